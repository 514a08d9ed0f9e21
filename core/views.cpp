// Checks of tensor views shared by validate() and merge() (see views.hpp).
#include "views.hpp"

#include <algorithm>
#include <vector>

namespace flashattn::detail {

// Returns a*b, or fails naming `what` if it overflows int64.
int64_t mul_checked(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(what, ": size ", a, " x ", b, " overflows int64");
  return r;
}

int64_t add_checked(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail(what, ": offset ", a, " + ", b, " overflows int64");
  return r;
}

// Returns the largest element offset of t, or -1 if t has no element.
int64_t max_offset(const ConstTensor& t, const std::string& name) {
  if (t.batch == 0 || t.seq == 0 || t.heads == 0 || t.dim == 0) return -1;
  int64_t off = mul_checked(t.batch - 1, t.stride_batch, name + ".stride_batch");
  off = add_checked(off, mul_checked(t.seq - 1, t.stride_seq, name + ".stride_seq"), name);
  off = add_checked(off, mul_checked(t.heads - 1, t.stride_head, name + ".stride_head"), name);
  off = add_checked(off, t.dim - 1, name);
  mul_checked(add_checked(off, 1, name), static_cast<int64_t>(dtype_size(t.dtype)), name + " bytes");
  return off;
}

// Checks a view's dtype, sizes and strides.
void check_fields(const ConstTensor& t, const std::string& name, bool quantized_ok) {
  if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16) {
    if (!is_quantized(t.dtype))
      fail(name, ".dtype (", static_cast<int>(t.dtype), ") is not a DType (f32, f16, bf16, i8, e4m3, e5m2)");
    if (!quantized_ok)
      fail(name, ".dtype (", dtype_name(t.dtype), ") must be f32, f16 or bf16 (only a forward's k and v may be quantized)");
  }
  const int64_t sizes[4] = {t.batch, t.seq, t.heads, t.dim};
  const char* size_names[4] = {"batch", "seq", "heads", "dim"};
  for (int i = 0; i < 4; ++i) {
    if (sizes[i] < 0) fail(name, ".", size_names[i], " (", sizes[i], ") must not be negative");
    if (sizes[i] >= kMaxDim) fail(name, ".", size_names[i], " (", sizes[i], ") must be below 2^31");
  }
  const int64_t strides[3] = {t.stride_batch, t.stride_seq, t.stride_head};
  const char* stride_names[3] = {"stride_batch", "stride_seq", "stride_head"};
  for (int i = 0; i < 3; ++i)
    if (strides[i] < 0) fail(name, ".", stride_names[i], " (", strides[i], ") must not be negative");
}

// Checks a view's pointer (its fields checked): non-null when it has elements, aligned.
void check_pointer(const ConstTensor& t, const std::string& name) {
  const int64_t last = max_offset(t, name);
  if (last < 0) return;  // no element: the pointer is never used
  if (t.data == nullptr) fail(name, ".data is null for a tensor of ", t.batch, "x", t.seq, "x", t.heads, "x", t.dim, " elements");
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (addr % dtype_size(t.dtype) != 0)
    fail(name, ".data (", t.data, ") is not aligned to its element size (", dtype_size(t.dtype), " bytes)");
}

// Checks one tensor view on its own: dtype, sizes, strides, pointer.
void check_tensor(const ConstTensor& t, const std::string& name, bool quantized_ok) {
  check_fields(t, name, quantized_ok);
  if (t.heads == 0) fail(name, ".heads (0) must be at least 1");
  if (t.dim == 0) fail(name, ".dim (0) must be at least 1");
  check_pointer(t, name);
}

// Checks that distinct indices of an output view address distinct elements (no self-overlap).
void check_no_self_overlap(const ConstTensor& t, const std::string& name) {
  if (max_offset(t, name) < 0) return;
  struct Axis { int64_t size, stride; const char* stride_name; };
  std::vector<Axis> axes = {{t.batch, t.stride_batch, "stride_batch"},
                            {t.seq, t.stride_seq, "stride_seq"},
                            {t.heads, t.stride_head, "stride_head"}};
  // Sort the axes with more than one index by stride; each stride must step over everything the
  // faster axes (and the contiguous dim) span.
  std::vector<Axis> used;
  for (const Axis& a : axes)
    if (a.size > 1) used.push_back(a);
  for (size_t i = 1; i < used.size(); ++i)
    for (size_t j = i; j > 0 && used[j].stride < used[j - 1].stride; --j) std::swap(used[j], used[j - 1]);
  int64_t span = t.dim;  // elements covered by the faster axes
  for (const Axis& a : used) {
    if (a.stride < span)
      fail(name, ".", a.stride_name, " (", a.stride, ") makes the output overlap itself (needs >= ", span, ")");
    span = a.stride * (a.size - 1) + span;
  }
}

Span span_of(const ConstTensor& t, const std::string& name) {
  const int64_t last = max_offset(t, name);
  if (last < 0) return {};
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + static_cast<uintptr_t>(last + 1) * dtype_size(t.dtype)};
}

Span span_of(const void* p, int64_t bytes) {
  if (!p || bytes <= 0) return {};
  const auto b = reinterpret_cast<uintptr_t>(p);
  return {b, b + static_cast<uintptr_t>(bytes)};
}

bool overlaps(Span a, Span b) { return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end; }


namespace {

struct Axis {
  int64_t stride, lo, hi;  // index differences i_a - i_b range over [lo, hi]
};

// Returns whether delta = Σ_k Δ_k·stride_k has a solution with Δ_k in [lo_k, hi_k], for axes sorted
// by decreasing stride where each stride exceeds every difference the faster axes can make: then
// each level has at most two candidate Δ_k, found by division.
bool representable(int64_t delta, const std::vector<Axis>& axes, size_t k) {
  if (k == axes.size()) return delta == 0;
  int64_t reach_lo = 0, reach_hi = 0;  // differences the faster axes can make
  for (size_t f = k + 1; f < axes.size(); ++f) {
    reach_lo += axes[f].lo * axes[f].stride;
    reach_hi += axes[f].hi * axes[f].stride;
  }
  const Axis& a = axes[k];
  // Δ·stride must lie in [delta - reach_hi, delta - reach_lo].
  const auto floor_div = [](int64_t x, int64_t y) { return x / y - ((x % y != 0) && ((x < 0) != (y < 0))); };
  const int64_t first = -floor_div(-(delta - reach_hi), a.stride), last = floor_div(delta - reach_lo, a.stride);
  for (int64_t d = std::max(first, a.lo); d <= std::min(last, a.hi); ++d)
    if (representable(delta - d * a.stride, axes, k + 1)) return true;
  return false;
}

}  // namespace

bool may_share_elements(const ConstTensor& a, const std::string& a_name, const ConstTensor& b, const std::string& b_name) {
  if (!overlaps(span_of(a, a_name), span_of(b, b_name))) return false;
  if (a.dtype != b.dtype || a.stride_batch != b.stride_batch || a.stride_seq != b.stride_seq ||
      a.stride_head != b.stride_head)
    return true;
  const auto es = static_cast<intptr_t>(dtype_size(a.dtype));
  const intptr_t bytes = reinterpret_cast<intptr_t>(b.data) - reinterpret_cast<intptr_t>(a.data);
  if (bytes % es != 0) return true;
  const Axis all[4] = {{a.stride_batch, -(b.batch - 1), a.batch - 1},
                       {a.stride_seq, -(b.seq - 1), a.seq - 1},
                       {a.stride_head, -(b.heads - 1), a.heads - 1},
                       {1, -(b.dim - 1), a.dim - 1}};
  std::vector<Axis> axes;  // the axes along which the two views can differ
  for (const Axis& x : all)
    if (x.lo != 0 || x.hi != 0) axes.push_back(x);
  std::sort(axes.begin(), axes.end(), [](const Axis& x, const Axis& y) { return x.stride > y.stride; });
  // The division search is exact only when every stride exceeds what the faster axes can reach.
  for (size_t k = 0; k + 1 < axes.size(); ++k) {
    int64_t reach = 0;
    for (size_t f = k + 1; f < axes.size(); ++f) reach += std::max(-axes[f].lo, axes[f].hi) * axes[f].stride;
    if (axes[k].stride <= reach) return true;
  }
  return representable(static_cast<int64_t>(bytes / es), axes, 0);
}

}  // namespace flashattn::detail
