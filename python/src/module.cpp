// flashattn._flashattn: the nanobind extension behind the `flashattn` Python package.
//
// One generic entry point per pass takes the call's arguments as a dict {name: value} whose names
// are the C++ field names of AttentionArgs / ForwardArgs / BackwardArgs (flashattn/args.hpp). Each
// value option (flashattn/options.hpp) is set through the options' declared list; every other field
// is one row of a table below (kAttentionFields, kForwardFields, kBackwardFields). Adding a value
// option needs nothing here; an array field one row here; either one keyword in flashattn/_core.py.
// Arrays arrive as anything nanobind's ndarray accepts (DLPack, the buffer protocol: numpy, torch)
// and are used in place with their strides: nothing is copied. Arrays of raw-pointer fields (lse,
// seqlens_k, ...) must be contiguous and have exactly the element count the call reads or writes,
// which is checked here (the C++ API cannot check the length behind a pointer).
//
// flashattn::Error (a std::invalid_argument) becomes ValueError; a wrong dtype, device or kind of
// object becomes TypeError. The GIL is released while a backend computes.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "flashattn/cpu.hpp"
#include "flashattn/flashattn.hpp"
#include "flashattn/reference.hpp"
#include "tolerance/judge.hpp"
#ifdef FLASHATTN_PY_HAS_GPU
#include "flashattn/gpu.hpp"
#endif

namespace nb = nanobind;
using flashattn::AttentionArgs;
using flashattn::BackwardArgs;
using flashattn::ConstTensor;
using flashattn::DType;
using flashattn::ForwardArgs;
using flashattn::Tensor;

namespace {

using Array = nb::ndarray<nb::ro>;  // any dtype, shape, device; read-only is fine for inputs

enum class Device { cpu, cuda };

// Collects the arrays of one call and the checks that need the whole call (element counts).
struct Call {
  AttentionArgs* common = nullptr;
  ForwardArgs* fwd = nullptr;   // set for a forward call
  BackwardArgs* bwd = nullptr;  // set for a backward call
  Device device = Device::cpu;
  int device_id = -1;
  // Arrays whose bits hold a type numpy lacks, by name: uint16 arrays of bf16 bits, uint8 arrays of
  // e4m3 / e5m2 bits (the Python side passes views of ml_dtypes / torch arrays of those types).
  std::map<std::string, DType> reinterpret;
  std::deque<Array> keep;      // the arrays the views point into, alive for the call
  std::vector<std::function<void()>> checks;  // run after every field is set
  std::vector<std::function<void()>> after_validation;  // checks that read the sequences (validated first)
};

[[noreturn]] void type_error(const std::string& msg) { throw nb::type_error(("flashattn: " + msg).c_str()); }
[[noreturn]] void value_error(const std::string& msg) { throw flashattn::Error(msg); }

std::string dtype_str(nb::dlpack::dtype t) {
  const char* kind = t.code == uint8_t(nb::dlpack::dtype_code::Float)    ? "float"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Int)    ? "int"
                     : t.code == uint8_t(nb::dlpack::dtype_code::UInt)   ? "uint"
                                                                         : "other";
  return kind + std::to_string(t.bits);
}

bool is(nb::dlpack::dtype t, nb::dlpack::dtype_code code, int bits) {
  return t.code == uint8_t(code) && t.bits == bits && t.lanes == 1;
}

// Converts `h` to an array on the call's device and keeps it alive for the call.
Array& array(Call& c, const char* name, nb::handle h, bool writable) {
  Array a;
  if (!nb::try_cast(h, a)) type_error(std::string(name) + " must be an array (DLPack or buffer protocol), got " +
                                      nb::type_name(h.type()).c_str());
  const int dev = a.device_type();
  const Device want = c.device;
  if ((want == Device::cpu && dev != nb::device::cpu::value) || (want == Device::cuda && dev != nb::device::cuda::value))
    type_error(std::string(name) + " is on device type " + std::to_string(dev) + " but the call runs on " +
               (want == Device::cpu ? "the CPU" : "CUDA") + " (every array of a call must be on one device)");
  if (want == Device::cuda) {
    if (c.device_id < 0) c.device_id = a.device_id();
    if (a.device_id() != c.device_id) type_error(std::string(name) + " is on another CUDA device than the other arrays");
  }
  if (writable) {
    // nanobind marks read-only buffers (e.g. numpy with writeable=False): outputs must be writable.
    nb::ndarray<> w;
    if (!nb::try_cast(h, w)) value_error(std::string(name) + " is an output and must be writable");
  }
  c.keep.push_back(a);
  return c.keep.back();
}

// The element type of a q/k/v-like or bias-like array.
DType element_type(Call& c, const char* name, const Array& a) {
  const auto t = a.dtype();
  if (is(t, nb::dlpack::dtype_code::Float, 32)) return DType::f32;
  if (is(t, nb::dlpack::dtype_code::Float, 16)) return DType::f16;
  if (is(t, nb::dlpack::dtype_code::Bfloat, 16)) return DType::bf16;
  const auto as = c.reinterpret.find(name);
  if (as != c.reinterpret.end() && int(flashattn::dtype_size(as->second)) * 8 == t.bits &&
      is(t, nb::dlpack::dtype_code::UInt, t.bits))
    return as->second;
  if (is(t, nb::dlpack::dtype_code::Int, 8)) return DType::i8;  // quantized k, v (validation says where it may be)
  type_error(std::string(name) + " has dtype " + dtype_str(t) +
             "; expected float32, float16 or bfloat16 (k and v of a forward: also int8, float8_e4m3fn, float8_e5m2)");
}

// A rank-4 [batch, seq, heads, dim] view of `a` with its own element strides (rank 3: [seq, heads,
// dim] with batch 1, as varlen's packed tensors). The last dimension must be contiguous.
ConstTensor view(Call& c, const char* name, const Array& a) {
  const size_t nd = a.ndim();
  if (nd != 4 && nd != 3)
    value_error(std::string(name) + " must have 4 dimensions [batch, seq, heads, dim] (or 3: [seq, heads, dim]), got " +
                std::to_string(nd));
  int64_t size[4], stride[4];
  const size_t o = 4 - nd;
  size[0] = 1, stride[0] = 0;
  for (size_t i = 0; i < nd; ++i) size[i + o] = int64_t(a.shape(i)), stride[i + o] = a.stride(i);
  if (a.size() == 0) {  // no elements: frameworks report any strides (0 too); use the dense ones
    stride[3] = 1;
    for (int i = 2; i >= 0; --i) stride[i] = stride[i + 1] * std::max<int64_t>(size[i + 1], 1);
  }
  if (size[3] > 1 && stride[3] != 1)
    value_error(std::string(name) + "'s last dimension must be contiguous (stride 1), got stride " +
                std::to_string(stride[3]) + " (make it contiguous, e.g. .contiguous() / np.ascontiguousarray)");
  return ConstTensor(a.data(), element_type(c, name, a), size[0], size[1], size[2], size[3], stride[0], stride[1],
                     stride[2]);
}

ConstTensor input(Call& c, const char* name, nb::handle h) { return view(c, name, array(c, name, h, false)); }
Tensor output(Call& c, const char* name, nb::handle h) {
  const ConstTensor t = view(c, name, array(c, name, h, true));
  return Tensor{const_cast<void*>(t.data), t.dtype, t.batch, t.seq, t.heads, t.dim, t.stride_batch, t.stride_seq,
                t.stride_head};
}

// A contiguous array of a fixed element type whose element count `count()` is known once the whole
// call is set (checked then).
template <class T>
T* flat(Call& c, const char* name, nb::handle h, bool writable, nb::dlpack::dtype_code code,
        std::function<int64_t()> count) {
  Array& a = array(c, name, h, writable);
  if (!is(a.dtype(), code, int(sizeof(T) * 8)))
    type_error(std::string(name) + " has dtype " + dtype_str(a.dtype()) + "; expected " +
               (code == nb::dlpack::dtype_code::Float ? "float" : code == nb::dlpack::dtype_code::Int ? "int" : "uint") +
               std::to_string(sizeof(T) * 8));
  int64_t expect_stride = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.size() > 0 && a.shape(i) > 1 && a.stride(i) != expect_stride)
      value_error(std::string(name) + " must be contiguous (C order)");
    expect_stride *= int64_t(a.shape(i));
  }
  const int64_t n = int64_t(a.size());
  if (count) {
    c.checks.push_back([name, n, count] {
      const int64_t want = count();
      if (n != want)
        value_error(std::string(name) + " has " + std::to_string(n) + " elements; the call needs " + std::to_string(want));
    });
  }
  return static_cast<T*>(const_cast<void*>(a.data()));
}

template <class T>
const T* flat_in(Call& c, const char* name, nb::handle h, nb::dlpack::dtype_code code, std::function<int64_t()> count) {
  return flat<T>(c, name, h, false, code, std::move(count));
}

constexpr auto F = nb::dlpack::dtype_code::Float;
constexpr auto I = nb::dlpack::dtype_code::Int;
constexpr auto U = nb::dlpack::dtype_code::UInt;

int64_t i64(nb::handle h) { return nb::cast<int64_t>(h); }

// Sets AttentionArgs::block_mask from a flashattn.BlockMask (block_q, block_k; full_count /
// partial_count int32 [S|1, H|1, q_blocks] with full_index / partial_index int32 [..., max_blocks],
// each pair both or neither; bits uint8 [S|1, rows|1, H|1, row_bytes] or None). The geometry comes
// from the arrays' shapes; validate() checks it against the call.
void set_block_mask(Call& c, nb::handle h) {
  flashattn::BlockMask& m = c.common->block_mask;
  try {
    m.block_q = i64(h.attr("block_q"));
    m.block_k = i64(h.attr("block_k"));
  } catch (const nb::python_error&) {
    type_error(std::string("block_mask must be a flashattn.BlockMask, got ") + nb::type_name(h.type()).c_str());
  }
  bool any_lists = false;
  auto lists = [&](const char* count_name, const char* index_name, const char* count_attr, const char* index_attr,
                   const int32_t*& count, const int32_t*& index) {
    const nb::object hc = h.attr(count_attr), hi = h.attr(index_attr);
    if (hc.is_none() && hi.is_none()) return;
    if (hc.is_none() || hi.is_none())
      value_error(std::string(count_name) + " and " + index_name + " must be given together");
    const Array& ac = array(c, count_name, hc, false);
    const Array& ai = array(c, index_name, hi, false);
    if (ac.ndim() != 3)
      value_error(std::string(count_name) + " must have 3 dimensions [sequences|1, heads|1, q_blocks], got " +
                  std::to_string(ac.ndim()));
    if (ai.ndim() != 4 || ai.shape(0) != ac.shape(0) || ai.shape(1) != ac.shape(1) || ai.shape(2) != ac.shape(2))
      value_error(std::string(index_name) + " must have the shape of " + count_name + " plus a last dimension (max_blocks)");
    const int64_t batch = int64_t(ac.shape(0)), heads = int64_t(ac.shape(1)), q_blocks = int64_t(ac.shape(2)),
                  max_blocks = int64_t(ai.shape(3));
    if (any_lists && (batch != m.batch || heads != m.heads || q_blocks != m.q_blocks || max_blocks != m.max_blocks))
      value_error("the full and partial block lists must have the same shapes");
    any_lists = true;
    m.batch = batch, m.heads = heads, m.q_blocks = q_blocks, m.max_blocks = max_blocks;
    count = flat_in<int32_t>(c, count_name, hc, I, {});
    index = flat_in<int32_t>(c, index_name, hi, I, {});
  };
  lists("block_mask.full_count", "block_mask.full_index", "full_count", "full_index", m.full_count, m.full_index);
  lists("block_mask.partial_count", "block_mask.partial_index", "partial_count", "partial_index", m.partial_count,
        m.partial_index);
  const nb::object hb = h.attr("bits");
  if (!hb.is_none()) {
    const Array& ab = array(c, "block_mask.bits", hb, false);
    if (!is(ab.dtype(), U, 8)) type_error("block_mask.bits has dtype " + dtype_str(ab.dtype()) + "; expected uint8");
    if (ab.ndim() != 4)
      value_error("block_mask.bits must have 4 dimensions [sequences|1, rows|1, heads|1, row_bytes], got " +
                  std::to_string(ab.ndim()));
    if (ab.shape(3) > 1 && ab.stride(3) != 1) value_error("block_mask.bits' last dimension must be contiguous");
    m.bits = flashattn::BitMask{static_cast<const uint8_t*>(ab.data()), int64_t(ab.shape(0)), int64_t(ab.shape(1)),
                                int64_t(ab.shape(2)), ab.stride(0), ab.stride(1), ab.stride(2)};
  }
}

// Sets kv_scales.k (`key`) or .v from a float32 array whose shape gives the granularity: one element
// (shape () or (1,)): per tensor; [Hk]: per key/value head; [k.batch, k.seq, Hk]: per row and head
// (with an append, the caches' shapes, and the array is written for the new rows). k_scale and
// v_scale must have the same granularity.
void set_kv_scale(Call& c, nb::handle h, bool key) {
  const char* name = key ? "k_scale" : "v_scale";
  AttentionArgs* a = c.common;
  const Array& arr = array(c, name, h, false);
  flashattn::ScaleGranularity g;
  if (arr.size() == 1 && arr.ndim() <= 1)
    g = flashattn::ScaleGranularity::tensor;
  else if (arr.ndim() == 1)
    g = flashattn::ScaleGranularity::head;
  else if (arr.ndim() == 3)
    g = flashattn::ScaleGranularity::token;
  else
    value_error(std::string(name) + " must have one element, shape [Hk] or shape [k.batch, k.seq, Hk], got " +
                std::to_string(arr.ndim()) + " dimensions");
  ForwardArgs* f = c.fwd;  // with an append, the caches take k's place
  auto keys = [a, f]() -> ConstTensor { return f && f->append.used() ? ConstTensor(f->append.k_cache) : a->k; };
  const float* p = flat_in<float>(c, name, h, F, [a, g, keys] {
    return g == flashattn::ScaleGranularity::tensor ? 1
           : g == flashattn::ScaleGranularity::head ? keys().heads
                                                    : keys().batch * keys().seq * keys().heads;
  });
  (key ? a->kv_scales.k : a->kv_scales.v) = p;
  if (g == flashattn::ScaleGranularity::token && f) {
    // An append at token granularity writes the new rows' scales: the array is the caches' scale
    // array, append.k_scales / .v_scales (docs/semantics.md, "Appending to a quantized cache").
    c.checks.push_back([f, h, name, key] {
      if (!f->append.used()) return;
      nb::ndarray<> w;
      if (!nb::try_cast(h, w))
        value_error(std::string(name) + " must be writable: an append writes the new rows' per-token scales into it");
      float*& dst = key ? f->append.k_scales : f->append.v_scales;
      const float*& src = key ? f->kv_scales.k : f->kv_scales.v;
      dst = const_cast<float*>(src);
      src = nullptr;
    });
  }
  if (key) {
    a->kv_scales.granularity = g;
  } else {
    c.checks.push_back([a, f, g] {
      const bool k_set = a->kv_scales.k || (f && f->append.k_scales);  // k_scale may have moved there
      if (k_set && a->kv_scales.granularity != g)
        value_error("v_scale's shape gives another granularity than k_scale's (one element, [Hk] or [k.batch, k.seq, Hk])");
    });
  }
}

// Returns the block mask flashattn::block_mask_from_dense builds from `dense` (uint8 or bool
// [sequences, rows, heads, keys], keys contiguous) as a dict of numpy arrays and its geometry.
nb::dict block_mask_from_dense(nb::ndarray<nb::ro, nb::device::cpu> dense, int64_t block_q, int64_t block_k) {
  const auto t = dense.dtype();
  if (!is(t, U, 8) && !is(t, nb::dlpack::dtype_code::Bool, 8))
    type_error("dense has dtype " + dtype_str(t) + "; expected bool or uint8");
  if (dense.ndim() != 4) value_error("dense must have 4 dimensions [sequences, rows, heads, keys]");
  if (dense.shape(3) > 1 && dense.stride(3) != 1) value_error("dense's last dimension must be contiguous");
  if (block_q < 1 || block_k < 1)
    value_error("block_q (" + std::to_string(block_q) + ") and block_k (" + std::to_string(block_k) + ") must be >= 1");
  const flashattn::BlockMaskBuffers b = flashattn::block_mask_from_dense(
      static_cast<const uint8_t*>(dense.data()), int64_t(dense.shape(0)), int64_t(dense.shape(1)), int64_t(dense.shape(2)),
      int64_t(dense.shape(3)), dense.stride(0), dense.stride(1), dense.stride(2), block_q, block_k);
  auto numpy = [](const auto& v, std::initializer_list<size_t> shape) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    auto* copy = new std::vector<T>(v);
    nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
    return nb::ndarray<nb::numpy, T>(copy->data(), shape.size(), shape.begin(), owner).cast();
  };
  const size_t s = size_t(b.batch), h = size_t(b.heads), qb = size_t(b.q_blocks), mb = size_t(b.max_blocks);
  nb::dict d;
  d["block_q"] = b.block_q;
  d["block_k"] = b.block_k;
  d["full_count"] = numpy(b.full_count, {s, h, qb});
  d["full_index"] = numpy(b.full_index, {s, h, qb, mb});
  d["partial_count"] = numpy(b.partial_count, {s, h, qb});
  d["partial_index"] = numpy(b.partial_index, {s, h, qb, mb});
  if (b.bits.empty())
    d["bits"] = nb::none();
  else
    d["bits"] = numpy(b.bits, {s, size_t(b.bit_rows), h, size_t(b.row_bytes)});
  return d;
}

// ---- The field tables ------------------------------------------------------------------------------
// Each row: the C++ field name (also the Python keyword) and how a Python value sets it. None means
// "not set" and never reaches a setter.
using Setter = void (*)(Call&, nb::handle);
struct Field {
  const char* name;
  Setter set;
};

const Field kAttentionFields[] = {
    {"q", [](Call& c, nb::handle h) { c.common->q = input(c, "q", h); }},
    {"k", [](Call& c, nb::handle h) { c.common->k = input(c, "k", h); }},
    {"v", [](Call& c, nb::handle h) { c.common->v = input(c, "v", h); }},
    {"alibi_slopes",
     [](Call& c, nb::handle h) {
       AttentionArgs* a = c.common;
       // [Hq] shared by every sequence, or [B, Hq] (one row per sequence)
       Array& arr = array(c, "alibi_slopes", h, false);
       const bool per_sequence = arr.ndim() == 2;
       a->alibi_slopes = flat_in<float>(c, "alibi_slopes", h, F, [a, per_sequence] {
         return per_sequence ? flashattn::num_sequences(*a) * a->q.heads : a->q.heads;
       });
       if (per_sequence) c.checks.push_back([a] { a->alibi_batch_stride = a->q.heads; });
     }},
    {"seqlens_k",
     [](Call& c, nb::handle h) {
       AttentionArgs* a = c.common;
       a->seqlens_k = flat_in<int32_t>(c, "seqlens_k", h, I, [a] { return flashattn::num_sequences(*a); });
     }},
    {"cu_seqlens_q",
     [](Call& c, nb::handle h) {
       AttentionArgs* a = c.common;
       Array& arr = array(c, "cu_seqlens_q", h, false);
       a->varlen_batch = int64_t(arr.size()) - 1;
       a->cu_seqlens_q = flat_in<int32_t>(c, "cu_seqlens_q", h, I, {});
       if (arr.size() == 0) value_error("cu_seqlens_q must have varlen_batch + 1 >= 1 entries");
     }},
    {"cu_seqlens_k",
     [](Call& c, nb::handle h) {
       AttentionArgs* a = c.common;
       a->cu_seqlens_k = flat_in<int32_t>(c, "cu_seqlens_k", h, I, [a] { return a->varlen_batch + 1; });
     }},
    {"max_seqlen_q", [](Call& c, nb::handle h) { c.common->max_seqlen_q = i64(h); }},
    {"max_seqlen_k", [](Call& c, nb::handle h) { c.common->max_seqlen_k = i64(h); }},
    {"sinks",
     [](Call& c, nb::handle h) {
       AttentionArgs* a = c.common;
       a->sinks = flat_in<float>(c, "sinks", h, F, [a] { return a->q.heads; });
     }},
    {"block_table",
     [](Call& c, nb::handle h) {
       // int32 [B, pages per sequence], contiguous: block_table_pages and its stride come from it.
       AttentionArgs* a = c.common;
       Array& arr = array(c, "block_table", h, false);
       if (arr.ndim() != 2) value_error("block_table must have 2 dimensions [batch, pages], got " + std::to_string(arr.ndim()));
       a->block_table_pages = int64_t(arr.shape(1));
       a->block_table_stride = int64_t(arr.shape(1));
       a->block_table = flat_in<int32_t>(c, "block_table", h, I, [a] { return a->q.batch * a->block_table_pages; });
     }},
    {"bias", [](Call& c, nb::handle h) { c.common->bias = input(c, "bias", h); }},
    {"block_mask", [](Call& c, nb::handle h) { set_block_mask(c, h); }},
    {"k_scale", [](Call& c, nb::handle h) { set_kv_scale(c, h, true); }},
    {"v_scale", [](Call& c, nb::handle h) { set_kv_scale(c, h, false); }},
    // New array fields of AttentionArgs go here (one row that reads its arrays with input()/flat_in()
    // and sets the struct); value options need no row (set_value_option).
};

const Field kForwardFields[] = {
    {"out", [](Call& c, nb::handle h) { c.fwd->out = output(c, "out", h); }},
    {"lse",
     [](Call& c, nb::handle h) {
       ForwardArgs* a = c.fwd;
       a->lse = flat<float>(c, "lse", h, true, F, [a] { return flashattn::lse_count(*a); });
     }},
    {"num_splits", [](Call& c, nb::handle h) { c.fwd->num_splits = i64(h); }},
    {"dropout_mask",
     [](Call& c, nb::handle h) {
       // Its size depends on the sequences' key counts (cu_seqlens_k, the block table): checked once
       // the call is validated, so that those arrays are known to be sane.
       ForwardArgs* a = c.fwd;
       Array& arr = array(c, "dropout_mask", h, true);
       const int64_t n = int64_t(arr.size());
       a->dropout_mask = flat<uint8_t>(c, "dropout_mask", h, true, U, {});
       c.after_validation.push_back([a, n] {
         const int64_t want = flashattn::lse_count(*a) * flashattn::dropout_mask_row_bytes(*a);
         if (n != want)
           value_error("dropout_mask has " + std::to_string(n) + " elements; the call needs " + std::to_string(want));
       });
     }},
    {"k_cache", [](Call& c, nb::handle h) { c.fwd->append.k_cache = output(c, "k_cache", h); }},
    {"v_cache", [](Call& c, nb::handle h) { c.fwd->append.v_cache = output(c, "v_cache", h); }},
    {"k_new", [](Call& c, nb::handle h) { c.fwd->append.k_new = input(c, "k_new", h); }},
    {"v_new", [](Call& c, nb::handle h) { c.fwd->append.v_new = input(c, "v_new", h); }},
    {"rotary_cos",
     [](Call& c, nb::handle h) {
       // fp32 [rotary_positions, rotary_dim / 2]: both fields come from its shape
       ForwardArgs* a = c.fwd;
       Array& arr = array(c, "rotary_cos", h, false);
       if (arr.ndim() != 2) value_error("rotary_cos must have 2 dimensions [positions, rotary_dim / 2]");
       a->append.rotary_positions = int64_t(arr.shape(0));
       a->append.rotary_dim = 2 * int64_t(arr.shape(1));
       a->append.rotary_cos = flat_in<float>(c, "rotary_cos", h, F, {});
     }},
    {"rotary_sin",
     [](Call& c, nb::handle h) {
       ForwardArgs* a = c.fwd;
       a->append.rotary_sin = flat_in<float>(c, "rotary_sin", h, F, [a] {
         return a->append.rotary_positions * (a->append.rotary_dim / 2);
       });
     }},
    {"rotary_interleaved", [](Call& c, nb::handle h) { c.fwd->append.rotary_interleaved = nb::cast<bool>(h); }},
};

const Field kBackwardFields[] = {
    {"out", [](Call& c, nb::handle h) { c.bwd->out = input(c, "out", h); }},
    {"lse",
     [](Call& c, nb::handle h) {
       BackwardArgs* a = c.bwd;
       a->lse = flat_in<float>(c, "lse", h, F, [a] { return flashattn::lse_count(*a); });
     }},
    {"dout", [](Call& c, nb::handle h) { c.bwd->dout = input(c, "dout", h); }},
    {"dq", [](Call& c, nb::handle h) { c.bwd->dq = output(c, "dq", h); }},
    {"dk", [](Call& c, nb::handle h) { c.bwd->dk = output(c, "dk", h); }},
    {"dv", [](Call& c, nb::handle h) { c.bwd->dv = output(c, "dv", h); }},
    {"dsinks",
     [](Call& c, nb::handle h) {
       BackwardArgs* a = c.bwd;
       a->dsinks = flat<float>(c, "dsinks", h, true, F, [a] { return a->q.heads; });
     }},
    {"dbias", [](Call& c, nb::handle h) { c.bwd->dbias = output(c, "dbias", h); }},
};

// Sets the value option `name` of the call (flashattn/options.hpp's declared list) from `h`;
// returns false when the call has no value option of that name.
bool set_value_option(AttentionArgs& a, const std::string& name, nb::handle h) {
  bool found = false;
  flashattn::for_each_value_option(a, [&](const char* option, auto& field) {
    if (found || name != option) return;
    found = true;
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<T, std::optional<float>>)
      field = nb::cast<float>(h);
    else
      field = nb::cast<T>(h);
  });
  return found;
}

template <size_t N>
const Field* find(const Field (&table)[N], const std::string& name) {
  for (const Field& f : table)
    if (name == f.name) return &f;
  return nullptr;
}

// Sets every field of `args` (a dict name -> value; None: not set) on the call.
// `kinds`: {name: "bf16" | "e4m3" | "e5m2"} for arrays whose bits hold those types (a list of names:
// all bf16).
void fill(Call& c, nb::dict args, nb::handle kinds) {
  if (nb::isinstance<nb::dict>(kinds)) {
    for (auto [n, k] : nb::borrow<nb::dict>(kinds)) {
      const std::string kind = nb::cast<std::string>(k);
      const DType t = kind == "bf16" ? DType::bf16 : kind == "e4m3" ? DType::e4m3 : kind == "e5m2" ? DType::e5m2 : DType::f32;
      if (t == DType::f32) type_error("unknown array kind '" + kind + "' (bf16, e4m3, e5m2)");
      c.reinterpret[nb::cast<std::string>(n)] = t;
    }
  } else if (!kinds.is_none()) {
    for (nb::handle n : kinds) c.reinterpret[nb::cast<std::string>(n)] = DType::bf16;
  }
  for (auto [key, value] : args) {
    const std::string name = nb::cast<std::string>(key);
    if (value.is_none()) continue;
    const Field* f = c.fwd ? find(kForwardFields, name) : find(kBackwardFields, name);
    if (!f) f = find(kAttentionFields, name);
    try {
      if (f)
        f->set(c, value);
      else if (!set_value_option(*c.common, name, value))
        type_error("unknown argument '" + name + "' for a " + (c.fwd ? "forward" : "backward") + " call");
    } catch (const nb::cast_error&) {
      type_error("argument '" + name + "' has the wrong type (" + nb::type_name(value.type()).c_str() + ")");
    }
  }
  for (auto& check : c.checks) check();
  if (!c.after_validation.empty()) {
    flashattn::validate(*c.fwd);  // only forward fields add these
    for (auto& check : c.after_validation) check();
  }
}

Device parse_device(const std::string& backend) {
  if (backend == "cpu" || backend == "reference") return Device::cpu;
  if (backend == "gpu") return Device::cuda;
  value_error("unknown backend '" + backend + "' (cpu, gpu or reference)");
}

#ifdef FLASHATTN_PY_HAS_GPU
cudaStream_t stream_of(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }
#endif

void run_forward(const std::string& backend, nb::dict args, nb::handle bf16, uintptr_t stream) {
  ForwardArgs a;
  Call c;
  c.common = &a, c.fwd = &a, c.device = parse_device(backend);
  fill(c, args, bf16);
  nb::gil_scoped_release release;
  if (backend == "cpu") {
    flashattn::cpu::forward(a);
  } else if (backend == "reference") {
    flashattn::reference::forward(a);
  } else {
#ifdef FLASHATTN_PY_HAS_GPU
    flashattn::gpu::forward(a, stream_of(stream));
#else
    (void)stream;
    throw flashattn::Error("this flashattn package was built without the GPU backend (FLASHATTN_BUILD_GPU)");
#endif
  }
}

void run_backward(const std::string& backend, nb::dict args, nb::handle bf16, uintptr_t stream, bool deterministic) {
  BackwardArgs a;
  Call c;
  c.common = &a, c.bwd = &a, c.device = parse_device(backend);
  fill(c, args, bf16);
  nb::gil_scoped_release release;
  if (backend == "cpu") {
    flashattn::cpu::backward(a);
  } else if (backend == "reference") {
    flashattn::reference::backward(a);
  } else {
#ifdef FLASHATTN_PY_HAS_GPU
    flashattn::gpu::backward(a, stream_of(stream), deterministic);
#else
    (void)stream, (void)deterministic;
    throw flashattn::Error("this flashattn package was built without the GPU backend (FLASHATTN_BUILD_GPU)");
#endif
  }
}

flashattn::reference::Precision precision(const std::string& p) {
  using P = flashattn::reference::Precision;
  static const std::pair<const char*, P> names[] = {
      {"fp64", P::fp64}, {"same_as_input", P::same_as_input}, {"same_as_input_reversed", P::same_as_input_reversed},
      {"same_as_input_alternating", P::same_as_input_alternating}, {"magnitude", P::magnitude}, {"fp32", P::fp32},
      {"fp32_reversed", P::fp32_reversed}, {"fp32_alternating", P::fp32_alternating},
      {"fp64_given_out", P::fp64_given_out}, {"fp64_given", P::fp64_given}};
  for (const auto& [n, v] : names)
    if (p == n) return v;
  value_error("unknown precision '" + p + "'");
}

using F64 = nb::ndarray<nb::numpy, double>;

// Moves `v` into a float64 numpy array of `shape`.
F64 to_numpy(std::vector<double>&& v, std::vector<size_t> shape) {
  auto* heap = new std::vector<double>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  return F64(heap->data(), shape.size(), shape.data(), owner);
}

std::vector<size_t> dense_shape(const ConstTensor& t) {
  return {size_t(t.batch), size_t(t.seq), size_t(t.heads), size_t(t.dim)};
}

nb::dict reference_forward(nb::dict args, nb::handle bf16, const std::string& prec) {
  ForwardArgs a;
  Call c;
  c.common = &a, c.fwd = &a;
  fill(c, args, bf16);
  if (a.append.used()) value_error("the fp64 values of an append call are not available; use backend='reference'");
  flashattn::reference::ForwardValues r;
  {
    nb::gil_scoped_release release;
    r = flashattn::reference::forward_values(a, precision(prec));
  }
  nb::dict d;
  std::vector<size_t> out_shape = dense_shape(a.q);
  out_shape[3] = size_t(a.v.dim);
  d["out"] = to_numpy(std::move(r.out), out_shape);
  d["lse"] = to_numpy(std::move(r.lse), {size_t(a.q.batch), size_t(a.q.heads), size_t(a.q.seq)});
  if (!r.score_terms.empty()) d["score_terms"] = to_numpy(std::move(r.score_terms), out_shape);
  return d;
}

nb::dict reference_backward(nb::dict args, nb::handle bf16, const std::string& prec) {
  BackwardArgs a;
  Call c;
  c.common = &a, c.bwd = &a;
  fill(c, args, bf16);
  flashattn::reference::BackwardValues r;
  {
    nb::gil_scoped_release release;
    r = flashattn::reference::backward_values(a, precision(prec));
  }
  nb::dict d;
  d["dq"] = to_numpy(std::move(r.dq), dense_shape(a.q));
  d["dk"] = to_numpy(std::move(r.dk), dense_shape(a.k));
  d["dv"] = to_numpy(std::move(r.dv), dense_shape(a.v));
  if (!r.dsinks.empty()) d["dsinks"] = to_numpy(std::move(r.dsinks), {size_t(a.q.heads)});
  if (!r.dbias.empty()) d["dbias"] = to_numpy(std::move(r.dbias), dense_shape(a.dbias));
  return d;
}

// One verdict of the tolerance rule as a dict (the terms of the bound, the worst element).
nb::dict verdict(const flashattn::tolerance::Verdict& v) {
  const flashattn::tolerance::Comparison& r = v.result;
  nb::dict d;
  d["output"] = v.output;
  d["passed"] = r.passed;
  d["max_error"] = r.max_error;
  d["bound"] = r.bound;
  d["naive_error"] = r.same_error;
  d["c"] = r.allowance.c;
  d["fp32_terms"] = r.allowance.fp32_terms;
  d["contract"] = r.allowance.contract;
  d["floor"] = r.allowance.floor;
  d["worst_index"] = r.worst;
  d["where"] = v.where;
  d["reason"] = r.reason;
  d["message"] = v.message();
  d["description"] = flashattn::tolerance::describe(r, v.impl, v.oracle);
  if (r.worst >= 0 && size_t(r.worst) < v.impl.size() && size_t(r.worst) < v.oracle.size()) {
    d["impl_at_worst"] = v.impl[size_t(r.worst)];
    d["oracle_at_worst"] = v.oracle[size_t(r.worst)];
  }
  return d;
}

nb::list judgement(const flashattn::tolerance::Judgement& j) {
  nb::list l;
  for (const auto& v : j.verdicts) l.append(verdict(v));
  return l;
}

nb::list judge_forward(nb::dict args, nb::handle bf16) {
  ForwardArgs a;
  Call c;
  c.common = &a, c.fwd = &a;
  fill(c, args, bf16);
  flashattn::tolerance::Judgement j;
  {
    nb::gil_scoped_release release;
    j = flashattn::tolerance::judge_forward(a);
  }
  return judgement(j);
}

nb::list judge_backward(nb::dict args, nb::handle bf16) {
  BackwardArgs a;
  Call c;
  c.common = &a, c.bwd = &a;
  fill(c, args, bf16);
  flashattn::tolerance::Judgement j;
  {
    nb::gil_scoped_release release;
    j = flashattn::tolerance::judge_backward(a);
  }
  return judgement(j);
}

// The view the bindings make of an array (for tests: the data pointer proves nothing was copied).
nb::dict inspect_view(nb::handle h, bool bf16, bool cuda) {
  Call c;
  c.device = cuda ? Device::cuda : Device::cpu;
  if (bf16) c.reinterpret["x"] = DType::bf16;
  const ConstTensor t = input(c, "x", h);
  nb::dict d;
  d["data"] = reinterpret_cast<uintptr_t>(t.data);
  d["dtype"] = flashattn::dtype_name(t.dtype);
  d["shape"] = nb::make_tuple(t.batch, t.seq, t.heads, t.dim);
  d["strides"] = nb::make_tuple(t.stride_batch, t.stride_seq, t.stride_head);
  return d;
}

nb::list field_names(const std::string& pass) {
  nb::list l;
  for (const Field& f : kAttentionFields) l.append(f.name);
  AttentionArgs defaults;
  flashattn::for_each_value_option(defaults, [&l](const char* name, const auto&) { l.append(name); });
  if (pass == "forward")
    for (const Field& f : kForwardFields) l.append(f.name);
  else
    for (const Field& f : kBackwardFields) l.append(f.name);
  return l;
}

}  // namespace

NB_MODULE(_flashattn, m) {
  m.doc() = "flashattn C++ bindings (use the `flashattn` package, not this module)";
  m.def("forward", &run_forward, nb::arg("backend"), nb::arg("args"), nb::arg("bf16") = nb::none(),
        nb::arg("stream") = 0);
  m.def("backward", &run_backward, nb::arg("backend"), nb::arg("args"), nb::arg("bf16") = nb::none(),
        nb::arg("stream") = 0, nb::arg("deterministic") = false);
  m.def("reference_forward", &reference_forward, nb::arg("args"), nb::arg("bf16") = nb::none(),
        nb::arg("precision") = "fp64");
  m.def("reference_backward", &reference_backward, nb::arg("args"), nb::arg("bf16") = nb::none(),
        nb::arg("precision") = "fp64");
  m.def("judge_forward", &judge_forward, nb::arg("args"), nb::arg("bf16") = nb::none());
  m.def("judge_backward", &judge_backward, nb::arg("args"), nb::arg("bf16") = nb::none());
  m.def("field_names", &field_names, nb::arg("pass"));
  m.def("block_mask_from_dense", &block_mask_from_dense, nb::arg("dense"), nb::arg("block_q"), nb::arg("block_k"));
  m.def("_inspect_view", &inspect_view, nb::arg("array"), nb::arg("bf16") = false, nb::arg("cuda") = false);
#ifdef FLASHATTN_PY_HAS_GPU
  m.attr("has_gpu") = true;
#else
  m.attr("has_gpu") = false;
#endif
  m.attr("cpu_targets") = [] {
    nb::list l;
    for (const auto& t : flashattn::cpu::targets()) l.append(nb::str(t.name.c_str()));
    return l;
  }();
}
