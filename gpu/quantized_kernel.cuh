// The forward over quantized K/V (docs/semantics.md, "Quantized K/V"; docs/gpu.md, "Quantized
// K/V"): one warp per (query row, query head, sequence) × split, on CUDA cores. Lane l holds
// elements l, l + 32, … of the query row and of its output row (head dims up to 256). Each key the
// row sees is read as the contract defines it: element x of K is fl32(decode(code) · scale) (the
// product rounded once), likewise V; the score is the warp's fp32 dot product, then the options'
// transform in the log2 domain (ScoreTransform, BiasRows: scale, softcap, ALiBi, bias) and the
// online softmax key by key, which starts from the sink (split 0). Dropout is decided per element
// (the Philox keep bits), as the dbias kernel does; block-sparse masks are not taken (api.cu rejects
// them with quantized K/V).
// Splits cut each row's visible keys into near-equal runs of whole kQuantTileKeys-key tiles and write
// the fp32 partials the combine kernel merges.
// Decoding reads a K/V row once per query head: a correctness path for 8-bit caches, not yet a tuned
// decode kernel (its speed has not been measured on a GPU).
#pragma once

#include <cuda_runtime.h>

#include "dropout.cuh"
#include "flashattn/convert.hpp"
#include "params.cuh"
#include "rowwise.cuh"
#include "tile.cuh"
#include "traits.cuh"

namespace flashattn::gpu::detail {

constexpr int kQuantMaxPerLane = kQuantMaxDim / kWarpSize;  // elements of q and O per lane

// Returns the value of code b of quantized dtype KV (exact).
template <DType KV>
__device__ inline float decode_code(uint8_t b) {
  if constexpr (KV == DType::i8) return static_cast<float>(static_cast<int8_t>(b));
  else if constexpr (KV == DType::e4m3) return float_from_e4m3_bits(b);
  else return float_from_e5m2_bits(b);
}

// Returns the scale of key/value head hk of the row at `at` (flashattn::kv_scale_index's layout).
__device__ inline float row_scale(const ForwardParams& p, const float* scales, const KeyPlace& at, int hk) {
  return ld(scales + kv_scale_index(p.scale_granularity, p.scale_rows, p.heads_k, at.batch, at.row, hk));
}

// Grid (row blocks of kRowsPerBlock × num_splits, query heads, sequences).
template <class T, DType KV>
__global__ void __launch_bounds__(kThreadsPerBlock) quantized_forward_kernel(const ForwardParams p) {
  const int splits = p.num_splits, split = static_cast<int>(blockIdx.x % splits);
  const SeqInfo si = sequence_info(p, blockIdx.z);
  const Mask& m = si.mask;
  const int h = blockIdx.y, lane = threadIdx.x % kWarpSize;
  const int64_t i = static_cast<int64_t>(blockIdx.x / splits) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (i >= m.seqlen_q) return;
  const int64_t s = si.index;
  const int hk = static_cast<int>(kv_head(h, p.heads_q, p.heads_k));
  float q[kQuantMaxPerLane], o[kQuantMaxPerLane];
  const T* qrow = static_cast<const T*>(p.q.data) + p.q.offset(si.batch, si.q_start + i, h);
#pragma unroll
  for (int u = 0; u < kQuantMaxPerLane; ++u) {
    const int x = lane + u * kWarpSize;
    q[u] = x < p.dim ? Elem<T>::to_float(ld(qrow + x)) : 0.0f;
    o[u] = 0.0f;
  }
  const ScoreTransform score{p.scale, p.softcap, alibi_slope(p, s, h), m.diag()};
  const BiasRows bias(p, s, h);
  const DropoutStream drop(p, s, h);
  const bool dropout = p.dropout_p > 0;
  // This split's keys: the row's visible keys [kb, ke) in runs of whole kQuantTileKeys-key tiles,
  // cut into num_splits near-equal slices as the forward kernel cuts a query block's tiles.
  const int64_t kb = m.key_begin(i), ke = m.key_end(i);
  const TileRange row_tiles{kb / kQuantTileKeys, ke > kb ? (ke + kQuantTileKeys - 1) / kQuantTileKeys : kb / kQuantTileKeys};
  const TileRange tiles = split_tiles(row_tiles, split, splits);
  const int64_t j0 = kb > tiles.first * kQuantTileKeys ? kb : tiles.first * kQuantTileKeys;
  const int64_t j1 = ke < tiles.last * kQuantTileKeys ? ke : tiles.last * kQuantTileKeys;
  // The online softmax (log2 domain) starts from the sink: a key of score sinks[h] and value 0.
  const bool sink = p.sinks != nullptr && split == 0;
  float mx = sink ? ld(p.sinks + h) * kLog2e : -INFINITY, sum = sink ? 1.0f : 0.0f;
  const auto* kdata = static_cast<const uint8_t*>(p.k.data);
  const auto* vdata = static_cast<const uint8_t*>(p.v.data);
  for (int64_t j = j0; j < j1; ++j) {
    const KeyPlace at = key_place(p, si, j);
    const float ks = row_scale(p, p.k_scale, at, hk);
    const uint8_t* krow = kdata + p.k.offset(at.batch, at.row, hk);
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < kQuantMaxPerLane; ++u) {
      const int x = lane + u * kWarpSize;
      if (x < p.dim) acc = fmaf(q[u], decode_code<KV>(ld(krow + x)) * ks, acc);
    }
    acc = warp_sum(acc);
    float th;
    const float x2 = score(acc, i, j, bias(i, j), th);
    // A NaN score leaves the maximum (fmaxf drops it) and makes the sum and O NaN, as unquantized.
    const float new_max = fmaxf(mx, x2);
    const float base = new_max == -INFINITY ? 0.0f : new_max;  // empty so far: P stays 0, no NaN
    const float alpha = exp2_ftz(mx - base), pr = exp2_ftz(x2 - base);
    sum = sum * alpha + pr;
    mx = new_max;
    const float pv = dropout && !((drop.bits(i, j / 8) >> (j % 8)) & 1u) ? 0.0f : pr;  // the sum keeps P
    const float vs = row_scale(p, p.v_scale, at, hk);
    const uint8_t* vrow = vdata + p.v.offset(at.batch, at.row, hk);
#pragma unroll
    for (int u = 0; u < kQuantMaxPerLane; ++u) {
      const int x = lane + u * kWarpSize;
      if (x < p.dim_v) o[u] = fmaf(pv, decode_code<KV>(ld(vrow + x)) * vs, o[u] * alpha);
    }
  }
  // Epilogue (store_forward_rows' rules): O = O / sum · 1/(1 − p), LSE = ln Σ; a row that saw no key
  // has O = 0 and LSE = −inf, a NaN sum makes both NaN; split-KV writes the fp32 partials.
  const bool empty = mx == -INFINITY && sum == sum;
  const float inv = empty ? 0.0f : (dropout ? p.dropout_scale : 1.0f) / sum;
  const float lse = empty ? -INFINITY : (mx + log2f(sum)) * kLn2;
  const int64_t li = lse_index(p, si, h, i);
  if (splits > 1) {
    const int64_t pi = split * p.part_rows + li;
#pragma unroll
    for (int u = 0; u < kQuantMaxPerLane; ++u) {
      const int x = lane + u * kWarpSize;
      if (x < p.dim_v) st(p.o_part + pi * p.dim_v + x, o[u] * inv);
    }
    if (lane == 0) st(p.lse_part + pi, lse);
    return;
  }
  T* orow = static_cast<T*>(p.out.data) + p.out.offset(si.batch, si.q_start + i, h);
#pragma unroll
  for (int u = 0; u < kQuantMaxPerLane; ++u) {
    const int x = lane + u * kWarpSize;
    if (x < p.dim_v) st(orow + x, Elem<T>::from_float(o[u] * inv));
  }
  if (p.lse && lane == 0) st(p.lse + li, lse);
}

// Returns the quantized forward kernel for K/V of dtype kv (i8, e4m3, e5m2).
template <class T>
auto quantized_forward_variant(DType kv) {
  if (kv == DType::i8) return quantized_forward_kernel<T, DType::i8>;
  return kv == DType::e4m3 ? quantized_forward_kernel<T, DType::e4m3> : quantized_forward_kernel<T, DType::e5m2>;
}

}  // namespace flashattn::gpu::detail
