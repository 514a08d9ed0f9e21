// Kernel parameter blocks (plain structs passed by value) and the per-sequence geometry that every
// kernel reads on the device, mirroring flashattn/problem.hpp's host-side sequence().
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cfloat>
#include <cstdint>

#ifdef FLASHATTN_GPU_EMULATE
#include "emu/emu.hpp"
#endif

#include "flashattn/args.hpp"
#include "flashattn/block_mask.hpp"
#include "flashattn/mask.hpp"
#include "flashattn/philox.hpp"
#include "flashattn/problem.hpp"
#include "mma.cuh"

namespace flashattn::gpu::detail {

// A strided [batch, seq, heads, dim] view on the device (element strides, dim contiguous):
// View is writable (outputs), ConstView read-only (inputs).
template <class Pointer>
struct BasicView {
  Pointer data = nullptr;
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;

  // Returns the element offset of row `row` of head `head` in batch `batch`.
  __host__ __device__ int64_t offset(int64_t batch, int64_t row, int64_t head) const {
    return batch * stride_batch + row * stride_seq + head * stride_head;
  }
};
using View = BasicView<void*>;
using ConstView = BasicView<const void*>;

// What every kernel reads: the inputs q, k, v and the options. Device pointers; validated on the
// host before launch.
struct CommonParams {
  ConstView q, k, v;
  int64_t q_seq = 0, k_seq = 0;  // seq sizes of the tensors (varlen: total rows; paged: pages x page size)
  int heads_q = 0, heads_k = 0;
  int dim = 0, dim_v = 0;        // head dims of q/k and of v/out
  int num_sequences = 0;
  const int32_t* cu_seqlens_q = nullptr;  // device, [num_sequences + 1] or null
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqlens_k = nullptr;     // device, [num_sequences] or null
  MaskOptions mask;     // as the call's (the same layout as its fields would have here)
  float scale = 1;      // effective scale (any finite value, 0 included)
  float softcap = 0;    // 0: off
  const float* alibi_slopes = nullptr;  // device or null
  int64_t alibi_batch_stride = 0;
  const float* sinks = nullptr;         // device [heads_q] or null
  // Paged K/V: k and v are page pools; key j of sequence s is row j % page_size of page
  // block_table[s * block_table_stride + j / page_size]. null: contiguous K/V.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0, page_size = 0;
  // Additive bias: element (s, i, h, j) at bias.offset(s, i, h) + j (stride 0 in broadcast
  // dimensions, flashattn::bias_view), of dtype bias_dtype. null data: no bias.
  ConstView bias;
  DType bias_dtype = DType::f32;
  // Dropout (docs/semantics.md, "Dropout"): on when dropout_p > 0; dropout_scale = 1/(1 − p).
  float dropout_p = 0, dropout_scale = 1;
  uint32_t dropout_threshold = 0;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  // Block-sparse mask (flashattn/block_mask.hpp) with device lists and bits; unused (all zero): none.
  BlockMask block_mask;
};

// The forward adds its outputs.
// Split-KV: with num_splits > 1 every (query block, head, sequence) runs num_splits times on
// consecutive slices of its key tiles and writes fp32 partials (O normalised by its own sum, and
// its LSE) to o_part [num_splits][B·Hq·q_seq][dim_v] and lse_part [num_splits][B·Hq·q_seq] (rows
// indexed like lse); the combine kernel merges them into out and lse.
struct ForwardParams : CommonParams {
  View out;
  float* lse = nullptr;  // [B, Hq, q_seq] or null
  int num_splits = 1;
  int64_t part_rows = 0;  // B·Hq·q_seq: rows of one split's partials
  float* o_part = nullptr;
  float* lse_part = nullptr;
  uint8_t* dropout_mask = nullptr;  // keep bits [B·Hq·q_seq][mask_row_bytes] or null
  int64_t mask_row_bytes = 0;
  // Quantized K/V (docs/semantics.md, "Quantized K/V"; the quantized forward kernel only): the
  // scales (device) and their granularity; scale_rows = k.seq, the rows of one batch entry (or
  // page) of the per-token array [k.batch, k.seq, Hk].
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  ScaleGranularity scale_granularity = ScaleGranularity::tensor;
  int64_t scale_rows = 0;
};

// The parameters of the sm_90a forward kernel (forward_sm90_kernel.cuh): the forward's and the TMA
// tensor maps of q, k and v (4-D: dim, seq, head, batch; boxes of 64 columns, 128-byte swizzle).
struct Sm90ForwardParams {
  ForwardParams p;
  CUtensorMap q_map, k_map, v_map;
  // When sequences have their own extents (varlen, key lengths): maps [sequence][q, k, v] over each
  // sequence's rows alone (dimensions dim, rows, head, 1); null: the three above.
  const CUtensorMap* seq_maps = nullptr;
};

// The backward adds the forward's output and LSE and dO (inputs), the gradients and fp32 scratch.
struct BackwardParams : CommonParams {
  ConstView out, dout;
  const float* lse = nullptr;  // [B, Hq, q_seq]
  View dq, dk, dv;
  float* dot = nullptr;       // scratch D = rowsum(dO∘O), laid out like lse
  // scratch LSE·log2(e), laid out like lse; +inf where LSE = −inf (a row that saw no key), so that
  // P = exp2(s − lse2) is 0 there with no test: written by dot_kernel, read by the dK/dV kernel
  float* lse2 = nullptr;
  float* dq_accum = nullptr;  // scratch fp32 dQ [B or 1, q_seq, heads_q, dim] contiguous, or null
  // scratch row of dim floats after dq_accum (dq_accum_count's last row), never read: the dK/dV
  // kernel's reductions for query rows past a sequence go there instead of behind a row guard
  float* dq_sink = nullptr;
  float* dsinks = nullptr;    // [heads_q] or null (needs sinks)
  // d loss / d bias with bias's sizes (its own strides and dtype), or null data.
  View dbias;
  DType dbias_dtype = DType::f32;
  int64_t dbias_batch = 0, dbias_seq = 0, dbias_heads = 0, dbias_dim = 0;
};

// One sequence as the kernels see it: the shared flashattn::Sequence.
using SeqInfo = Sequence;

// Returns sequence s, reading the device arrays of p, by the one rule of flashattn::make_sequence.
__device__ inline SeqInfo sequence_info(const CommonParams& p, int64_t s) {
  return make_sequence(s, p.q_seq, p.k_seq, p.cu_seqlens_q, p.cu_seqlens_k, p.seqlens_k, p.mask, DeviceRead{});
}

// Where key j of sequence si lives: batch entry (or page) and row, through the block table when K/V
// are paged: key_offset's rule, for callers that also index a per-row array (the quantized kernel's
// per-token scales). key_offset keeps its own copy of the rule: routed through this struct it gave
// the attention kernels' loaders different code (2-6 instructions per loop in 8 variants), which no
// GPU has measured.
struct KeyPlace {
  int64_t batch, row;
};
__device__ inline KeyPlace key_place(const CommonParams& p, const SeqInfo& si, int64_t j) {
  if (!p.block_table) return {si.batch, si.k_start + j};
  return {ld(p.block_table + si.index * p.block_table_stride + j / p.page_size), j % p.page_size};
}

// Returns the element offset in `view` (k or v) of key j of sequence si, key/value head hk: row
// si.k_start + j of batch si.batch, or through the block table when K/V are paged.
__device__ inline int64_t key_offset(const CommonParams& p, const ConstView& view, const SeqInfo& si, int64_t j,
                                     int hk) {
  if (!p.block_table) return view.offset(si.batch, si.k_start + j, hk);
  const int64_t page = ld(p.block_table + si.index * p.block_table_stride + j / p.page_size);
  return view.offset(page, j % p.page_size, hk);
}

// Returns the index into lse (and the D scratch) of row i of sequence `si`, query head h.
__device__ inline int64_t lse_index(const CommonParams& p, const SeqInfo& si, int64_t h, int64_t i) {
  return (si.batch * p.heads_q + h) * p.q_seq + si.q_start + i;
}

// Returns the fp32 value of element `offset` of a 16-bit or fp32 array of dtype `dtype`.
__device__ inline float load_widened(const void* data, DType dtype, int64_t offset) {
  if (dtype == DType::f32) return ld(static_cast<const float*>(data) + offset);
  if (dtype == DType::f16) return Elem<__half>::to_float(ld(static_cast<const __half*>(data) + offset));
  return Elem<__nv_bfloat16>::to_float(ld(static_cast<const __nv_bfloat16*>(data) + offset));
}

// Stores x rounded to nearest even as element `offset` of an array of dtype `dtype`.
__device__ inline void store_narrowed(void* data, DType dtype, int64_t offset, float x) {
  if (dtype == DType::f32)
    st(static_cast<float*>(data) + offset, x);
  else if (dtype == DType::f16)
    st(static_cast<__half*>(data) + offset, Elem<__half>::from_float(x));
  else
    st(static_cast<__nv_bfloat16*>(data) + offset, Elem<__nv_bfloat16>::from_float(x));
}

// The bias entries of one (sequence, query head): row i, key j within the sequence. Reads nothing
// (returns 0) without a bias.
struct BiasRows {
  const void* data = nullptr;  // at element (s, 0, h, 0)
  DType dtype = DType::f32;
  int64_t base = 0, stride_seq = 0;

  __device__ BiasRows(const CommonParams& p, int64_t s, int64_t h)
      : data(p.bias.data), dtype(p.bias_dtype), base(p.bias.offset(s, 0, h)), stride_seq(p.bias.stride_seq) {}
  __device__ float operator()(int64_t i, int64_t j) const {
    return data ? load_widened(data, dtype, base + i * stride_seq + j) : 0.0f;
  }
};

// Returns whether a call uses the additive bias or dropout: the kernels templated on kExtras then
// run their variant with that code compiled in.
__host__ __device__ inline bool uses_extras(const CommonParams& p) { return p.bias.data != nullptr || p.dropout_p > 0; }

// Returns whether a call uses a per-element option: the additive bias, dropout, softcap or ALiBi;
// the forward and dK/dV kernels run their kExtras variant for these and for block masks.
__host__ __device__ inline bool uses_score_options(const CommonParams& p) {
  return uses_extras(p) || p.softcap > 0 || p.alibi_slopes != nullptr;
}

// Returns whether a call has a block-sparse mask: the kernels templated on kBlockSparse then run
// their variant with that code compiled in.
__host__ __device__ inline bool uses_block_mask(const CommonParams& p) { return p.block_mask.used(); }

// Returns whether the forward's plain variant can take a call's scale: a positive normal float, so
// that scaling keeps the order of the scores (the variant takes the row maximum before scaling) and
// scale·log2(e) is not flushed to 0 (which would turn a masked −inf score into NaN). A zero,
// negative or subnormal scale runs the variant with the options' code.
__host__ __device__ inline bool plain_forward_scale(const CommonParams& p) { return p.scale >= FLT_MIN; }

// Returns whether a call runs the dK/dV kernel's variant with the options' code (backward_variant):
// a per-element option or a block mask.
__host__ __device__ inline bool backward_extras(const CommonParams& p) {
  return uses_score_options(p) || uses_block_mask(p);
}
// Returns whether a call runs the forward kernel's variant with the options' code (forward_variant):
// as the backward, for a scale the plain variant cannot take, and for paged K/V (the plain variant
// has only the contiguous K/V loader: the paged one's state cost its 64-key tiles registers).
__host__ __device__ inline bool forward_extras(const CommonParams& p) {
  return backward_extras(p) || !plain_forward_scale(p) || p.block_table != nullptr;
}

// Returns the ALiBi slope of query head h in sequence s (0 when off).
__device__ inline float alibi_slope(const CommonParams& p, int64_t s, int64_t h) {
  return p.alibi_slopes ? ld(p.alibi_slopes + s * p.alibi_batch_stride + h) : 0.0f;
}

}  // namespace flashattn::gpu::detail
