// The small row-wise kernels, for any head dim: the split-KV combine after the forward kernel;
// D = rowsum(dO∘O) before the fused backward kernel, the rounding of the fp32 dQ accumulator to the
// output dtype after it, the sink gradients and the dropout keep-mask output.
#pragma once

#include "params.cuh"
#include "mma.cuh"
#include "tile.cuh"
#include "traits.cuh"

namespace flashattn::gpu::detail {

constexpr int kRowsPerBlock = kWarps;  // one warp per (row, query head)

// Returns the sum of x over the 32 lanes of a warp (every lane gets it).
__device__ inline float warp_sum(float x) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The row a warp of a row-wise kernel owns: grid (row blocks of kRowsPerBlock, query heads,
// sequences), one warp per row; `valid` is false for warps past the sequence's last row.
struct WarpRow {
  SeqInfo si;
  int h = 0, lane = 0;
  int64_t i = 0;
  bool valid = false;
};
__device__ inline WarpRow warp_row(const CommonParams& p) {
  WarpRow r;
  r.si = sequence_info(p, blockIdx.z);
  r.h = blockIdx.y;
  r.lane = threadIdx.x % kWarpSize;
  r.i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  r.valid = r.i < r.si.mask.seqlen_q;
  return r;
}

// dot[row, h] = Σ_x dout[row, h, x] · out[row, h, x] in fp32, one warp per row.
template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) dot_kernel(const BackwardParams p) {
  const WarpRow w = warp_row(p);
  if (!w.valid) return;
  const SeqInfo& si = w.si;
  const int h = w.h, lane = w.lane;
  const int64_t i = w.i;
  const T* o = static_cast<const T*>(p.out.data) + p.out.offset(si.batch, si.q_start + i, h);
  const T* d = static_cast<const T*>(p.dout.data) + p.dout.offset(si.batch, si.q_start + i, h);
  float acc = 0;
  for (int x = lane; x < p.dim_v; x += kWarpSize) acc += Elem<T>::to_float(ld(o + x)) * Elem<T>::to_float(ld(d + x));
  acc = warp_sum(acc);
  if (lane == 0) {
    const int64_t li = lse_index(p, si, h, i);
    st(p.dot + li, acc);
    const float lse = ld(p.lse + li);
    st(p.lse2 + li, lse == -INFINITY ? INFINITY : lse * kLog2e);
  }
}

// dq[row, h, :] = scale · dq_accum[row, h, :] rounded to T, one warp per row (the dK/dV kernel adds
// the unscaled dS·K).
template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) dq_convert_kernel(const BackwardParams p) {
  const WarpRow w = warp_row(p);
  if (!w.valid) return;
  const SeqInfo& si = w.si;
  const int h = w.h, lane = w.lane;
  const int64_t i = w.i;
  const float* acc = p.dq_accum + ((si.batch * p.q_seq + si.q_start + i) * p.heads_q + h) * p.dim;
  T* dq = static_cast<T*>(p.dq.data) + p.dq.offset(si.batch, si.q_start + i, h);
  for (int x = lane; x < p.dim; x += kWarpSize) st(dq + x, Elem<T>::from_float(p.scale * ld(acc + x)));
}

// Split-KV combine, one warp per (row, query head): out and lse from the num_splits fp32 partials by
// flashattn::merge's formula (docs/semantics.md), m = max LSE_s, w_s = exp(LSE_s − m),
// O = Σ w_s·O_s / Σ w_s, LSE = m + ln Σ w_s, summed in split order; rows empty in every split get
// O = 0 and LSE = −inf; a NaN partial LSE makes the row's O and LSE NaN.
template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) combine_kernel(const ForwardParams p) {
  const WarpRow w = warp_row(p);
  if (!w.valid) return;
  const SeqInfo& si = w.si;
  const int h = w.h, lane = w.lane;
  const int64_t i = w.i;
  const int64_t li = lse_index(p, si, h, i);
  float mx = -INFINITY;  // NaN if a split's LSE is NaN (fmaxf would drop it): the row is then NaN, as unsplit
  for (int sp = 0; sp < p.num_splits; ++sp) {
    const float l = ld(p.lse_part + sp * p.part_rows + li);
    mx = l > mx || l != l ? l : mx;
  }
  auto weight = [&](int sp) { return mx == -INFINITY ? 0.0f : expf(ld(p.lse_part + sp * p.part_rows + li) - mx); };
  float wsum = 0;
  for (int sp = 0; sp < p.num_splits; ++sp) wsum += weight(sp);
  const float inv = wsum > 0 ? 1.0f / wsum : 0.0f;
  T* o = static_cast<T*>(p.out.data) + p.out.offset(si.batch, si.q_start + i, h);
  for (int x = lane; x < p.dim_v; x += kWarpSize) {
    float acc = 0;
    for (int sp = 0; sp < p.num_splits; ++sp) acc += weight(sp) * ld(p.o_part + (sp * p.part_rows + li) * p.dim_v + x);
    st(o + x, Elem<T>::from_float(acc * inv));
  }
  if (p.lse && lane == 0) st(p.lse + li, mx == -INFINITY ? -INFINITY : mx + logf(wsum));
}

// The keep-mask row of (row, query head), one warp per row, a byte per lane at a time: bit w of byte
// j8 is the keep decision of key 8·j8 + w below the sequence's key count, 0 past it (the layout of
// flashattn::write_dropout_mask).
__global__ void __launch_bounds__(kThreadsPerBlock) dropout_mask_kernel(const ForwardParams p) {
  const WarpRow w = warp_row(p);
  if (!w.valid) return;
  const SeqInfo& si = w.si;
  const uint64_t stream = dropout_stream(p.dropout_offset, si.index, p.heads_q, w.h);
  uint8_t* row = p.dropout_mask + lse_index(p, si, w.h, w.i) * p.mask_row_bytes;
  for (int64_t j8 = w.lane; j8 < p.mask_row_bytes; j8 += kWarpSize)
    st(row + j8, dropout_mask_byte(p.dropout_seed, stream, w.i, j8, p.dropout_threshold, si.mask.seqlen_k));
}

// dsinks[h] = −Σ over every row i of every sequence of exp(sink_h − LSE_i)·D_i (D = p.dot, rows
// with an infinite LSE add nothing), one block per query head: each thread sums a fixed share of
// the rows in fp64, then thread 0 adds the shares in thread order (bitwise repeatable). Needs
// kThreadsPerBlock doubles of dynamic shared memory.
__global__ void __launch_bounds__(kThreadsPerBlock) dsinks_kernel(const BackwardParams p) {
  const int h = blockIdx.x, tid = threadIdx.x;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  double* share = reinterpret_cast<double*>(smem_raw);
  const double sink = ld(p.sinks + h);
  double acc = 0;
  for (int s = 0; s < p.num_sequences; ++s) {
    const SeqInfo si = sequence_info(p, s);
    for (int64_t i = tid; i < si.mask.seqlen_q; i += kThreadsPerBlock) {
      const int64_t li = lse_index(p, si, h, i);
      const float lse = ld(p.lse + li);
      if (lse == INFINITY || lse == -INFINITY) continue;
      acc -= exp(sink - static_cast<double>(lse)) * static_cast<double>(ld(p.dot + li));
    }
  }
  st(share + tid, acc);
  __syncthreads();
  if (tid == 0) {
    double total = 0;
    for (int x = 0; x < kThreadsPerBlock; ++x) total += ld(share + x);
    st(p.dsinks + h, static_cast<float>(total));
  }
}

}  // namespace flashattn::gpu::detail
