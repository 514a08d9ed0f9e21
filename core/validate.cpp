// Argument validation shared by every backend (see flashattn/validate.hpp).
#include "flashattn/validate.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn/error.hpp"
#include "views.hpp"

namespace flashattn {
namespace {

using namespace detail;

void check_same_shape(const ConstTensor& t, const std::string& name, const ConstTensor& ref, const std::string& ref_name) {
  if (t.batch != ref.batch || t.seq != ref.seq || t.heads != ref.heads || t.dim != ref.dim)
    fail(name, " shape [", t.batch, ", ", t.seq, ", ", t.heads, ", ", t.dim, "] must equal ", ref_name, " shape [",
         ref.batch, ", ", ref.seq, ", ", ref.heads, ", ", ref.dim, "]");
  if (t.dtype != ref.dtype)
    fail(name, ".dtype (", dtype_name(t.dtype), ") must equal ", ref_name, ".dtype (", dtype_name(ref.dtype), ")");
}

// Checks cu_seqlens contents: starts at 0, non-decreasing, ends within `rows`, lengths within max.
void check_cu_seqlens(const int32_t* cu, int64_t n, int64_t rows, int64_t max_len, const char* name,
                      const char* rows_name, const char* max_name) {
  if (cu[0] != 0) fail(name, "[0] (", cu[0], ") must be 0");
  for (int64_t s = 0; s < n; ++s) {
    const int64_t len = int64_t{cu[s + 1]} - cu[s];
    if (len < 0) fail(name, " must be non-decreasing: ", name, "[", s + 1, "] (", cu[s + 1], ") < ", name, "[", s, "] (", cu[s], ")");
    if (max_len > 0 && len > max_len)
      fail(name, ": sequence ", s, " has length ", len, " > ", max_name, " (", max_len, ")");
  }
  if (cu[n] > rows) fail(name, "[", n, "] (", cu[n], ") exceeds ", rows_name, " (", rows, ")");
}

// Checks the forward's output view `out` (written by the forward, read by the backward) and the
// alignment of its log-sum-exp array.
void check_out_and_lse(const AttentionArgs& a, const ConstTensor& out, const float* lse) {
  check_tensor(out, "out");
  check_same_shape(out, "out", a.q, "q");
  if (reinterpret_cast<uintptr_t>(lse) % alignof(float) != 0) fail("lse (", static_cast<const void*>(lse), ") is not 4-byte aligned");
}

// Checks the input views q, k, v on their own and against each other.
void check_inputs(const AttentionArgs& a) {
  check_tensor(a.q, "q");
  check_tensor(a.k, "k");
  check_tensor(a.v, "v");
  if (a.k.dtype != a.q.dtype) fail("k.dtype (", dtype_name(a.k.dtype), ") must equal q.dtype (", dtype_name(a.q.dtype), ")");
  if (a.v.dtype != a.q.dtype) fail("v.dtype (", dtype_name(a.v.dtype), ") must equal q.dtype (", dtype_name(a.q.dtype), ")");
  if (a.k.dim != a.q.dim) fail("k.dim (", a.k.dim, ") must equal q.dim (", a.q.dim, ")");
  if (a.v.dim != a.q.dim) fail("v.dim (", a.v.dim, ") must equal q.dim (", a.q.dim, ")");
  if (a.k.batch != a.q.batch) fail("k.batch (", a.k.batch, ") must equal q.batch (", a.q.batch, ")");
  if (a.v.batch != a.k.batch || a.v.seq != a.k.seq || a.v.heads != a.k.heads)
    fail("v shape [", a.v.batch, ", ", a.v.seq, ", ", a.v.heads, ", ", a.v.dim, "] must equal k shape [", a.k.batch, ", ",
         a.k.seq, ", ", a.k.heads, ", ", a.k.dim, "]");
  if (a.q.heads % a.k.heads != 0) fail("k.heads (", a.k.heads, ") must divide q.heads (", a.q.heads, ")");
}

// Checks the options: scale, softcap, window, varlen and key lengths, ALiBi (host arrays).
void check_options(const AttentionArgs& a) {
  if (a.scale && !std::isfinite(*a.scale)) fail("scale (", *a.scale, ") must be finite (leave it empty for 1/sqrt(d))");
  if (!std::isfinite(a.softcap) || a.softcap < 0) fail("softcap (", a.softcap, ") must be finite and >= 0 (0: off)");
  if (a.window_left < -1) fail("window_left (", a.window_left, ") must be >= -1 (-1: unbounded)");
  if (a.window_right < -1) fail("window_right (", a.window_right, ") must be >= -1 (-1: unbounded)");

  // Sequences.
  int64_t nseq = a.q.batch;
  if ((a.cu_seqlens_q == nullptr) != (a.cu_seqlens_k == nullptr))
    fail("cu_seqlens_q and cu_seqlens_k must be given together (got ", a.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k", " only)");
  if (a.max_seqlen_q < 0) fail("max_seqlen_q (", a.max_seqlen_q, ") must not be negative");
  if (a.max_seqlen_k < 0) fail("max_seqlen_k (", a.max_seqlen_k, ") must not be negative");
  if (a.cu_seqlens_q) {
    if (a.q.batch != 1 || a.k.batch != 1)
      fail("varlen (cu_seqlens_q set) needs q.batch and k.batch 1 (got ", a.q.batch, ", ", a.k.batch, ")");
    if (a.varlen_batch < 0 || a.varlen_batch >= kMaxDim) fail("varlen_batch (", a.varlen_batch, ") must be in [0, 2^31)");
    nseq = a.varlen_batch;
    check_cu_seqlens(a.cu_seqlens_q, nseq, a.q.seq, a.max_seqlen_q, "cu_seqlens_q", "q.seq", "max_seqlen_q");
    check_cu_seqlens(a.cu_seqlens_k, nseq, a.k.seq, a.max_seqlen_k, "cu_seqlens_k", "k.seq", "max_seqlen_k");
  } else if (a.varlen_batch != 0) {
    fail("varlen_batch (", a.varlen_batch, ") is set but cu_seqlens_q is null");
  }
  if (a.seqlens_k) {
    for (int64_t s = 0; s < nseq; ++s) {
      const int64_t rows = a.cu_seqlens_k ? int64_t{a.cu_seqlens_k[s + 1]} - a.cu_seqlens_k[s] : a.k.seq;
      if (a.seqlens_k[s] < 0 || a.seqlens_k[s] > rows)
        fail("seqlens_k[", s, "] (", a.seqlens_k[s], ") must be in [0, ", rows, "] (the keys of sequence ", s, ")");
    }
  }
  if (a.alibi_slopes) {
    if (a.alibi_batch_stride < 0) fail("alibi_batch_stride (", a.alibi_batch_stride, ") must not be negative");
    if (a.alibi_batch_stride != 0 && a.alibi_batch_stride < a.q.heads)
      fail("alibi_batch_stride (", a.alibi_batch_stride, ") must be 0 or >= q.heads (", a.q.heads, ")");
    for (int64_t s = 0; s < (a.alibi_batch_stride ? nseq : 1); ++s)
      for (int64_t h = 0; h < a.q.heads; ++h)
        if (!std::isfinite(a.alibi_slopes[s * a.alibi_batch_stride + h]))
          fail("alibi_slopes[", s * a.alibi_batch_stride + h, "] (", a.alibi_slopes[s * a.alibi_batch_stride + h], ") must be finite");
  } else if (a.alibi_batch_stride != 0) {
    fail("alibi_batch_stride (", a.alibi_batch_stride, ") is set but alibi_slopes is null");
  }
}

// Returns the bytes of the lse array [B, Hq, Nq] (fp32), failing on int64 overflow.
int64_t lse_bytes(const AttentionArgs& a) {
  return mul_checked(mul_checked(mul_checked(a.q.batch, a.q.heads, "lse"), a.q.seq, "lse"), 4, "lse bytes");
}

}  // namespace

void validate(const AttentionArgs& a) {
  check_inputs(a);
  check_options(a);
}

void validate(const ForwardArgs& a) {
  check_inputs(a);
  check_out_and_lse(a, a.out, a.lse);
  check_options(a);
  // Outputs: no self-overlap, and no overlap with any input.
  check_no_self_overlap(a.out, "out");
  const Span out_span = span_of(a.out, "out");
  const Span lse_span = span_of(a.lse, lse_bytes(a));
  const std::pair<Span, const char*> inputs[] = {
      {span_of(a.q, "q"), "q"}, {span_of(a.k, "k"), "k"}, {span_of(a.v, "v"), "v"}};
  for (const auto& in : inputs) {
    if (overlaps(out_span, in.first)) fail("out overlaps input ", in.second, " in memory");
    if (overlaps(lse_span, in.first)) fail("lse overlaps input ", in.second, " in memory");
  }
  if (overlaps(lse_span, out_span)) fail("lse overlaps out in memory");
}

void validate(const BackwardArgs& a) {
  check_inputs(a);
  check_out_and_lse(a, a.out, a.lse);
  check_options(a);
  if (a.lse == nullptr && a.q.batch * a.q.seq > 0) fail("lse is null: backward needs the forward's log-sum-exp");
  check_tensor(a.dout, "dout");
  check_tensor(a.dq, "dq");
  check_tensor(a.dk, "dk");
  check_tensor(a.dv, "dv");
  check_same_shape(a.dout, "dout", a.q, "q");
  check_same_shape(a.dq, "dq", a.q, "q");
  check_same_shape(a.dk, "dk", a.k, "k");
  check_same_shape(a.dv, "dv", a.k, "k");
  const std::pair<const Tensor*, const char*> outs[] = {{&a.dq, "dq"}, {&a.dk, "dk"}, {&a.dv, "dv"}};
  const std::pair<Span, const char*> inputs[] = {{span_of(a.q, "q"), "q"},       {span_of(a.k, "k"), "k"},
                                                 {span_of(a.v, "v"), "v"},       {span_of(a.out, "out"), "out"},
                                                 {span_of(a.dout, "dout"), "dout"}, {span_of(a.lse, lse_bytes(a)), "lse"}};
  for (const auto& o : outs) {
    check_no_self_overlap(*o.first, o.second);
    const Span s = span_of(*o.first, o.second);
    for (const auto& in : inputs)
      if (overlaps(s, in.first)) fail(o.second, " overlaps input ", in.second, " in memory");
  }
  for (int i = 0; i < 3; ++i)
    for (int j = i + 1; j < 3; ++j)
      if (may_share_elements(*outs[i].first, outs[i].second, *outs[j].first, outs[j].second))
        fail(outs[i].second, " and ", outs[j].second, " overlap in memory");
}

}  // namespace flashattn
