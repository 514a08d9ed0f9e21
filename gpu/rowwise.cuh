// The backward's small row-wise kernels, for any head dim: D = rowsum(dO∘O) before the fused
// kernel, and the rounding of the fp32 dQ accumulator to the output dtype after it.
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

// dot[row, h] = Σ_x dout[row, h, x] · out[row, h, x] in fp32, one warp per row.
template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) dot_kernel(const BackwardParams p) {
  const int s = blockIdx.z, h = blockIdx.y;
  const SeqInfo si = sequence_info(p, s);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (i >= si.mask.seqlen_q) return;
  const T* o = static_cast<const T*>(p.out.data) + p.out.offset(si.batch, si.q_start + i, h);
  const T* d = static_cast<const T*>(p.dout.data) + p.dout.offset(si.batch, si.q_start + i, h);
  float acc = 0;
  for (int x = lane; x < p.dim; x += kWarpSize) acc += Elem<T>::to_float(o[x]) * Elem<T>::to_float(d[x]);
  acc = warp_sum(acc);
  if (lane == 0) p.dot[lse_index(p, si, h, i)] = acc;
}

// dq[row, h, :] = dq_accum[row, h, :] rounded to T, one warp per row.
template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) dq_convert_kernel(const BackwardParams p) {
  const int s = blockIdx.z, h = blockIdx.y;
  const SeqInfo si = sequence_info(p, s);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (i >= si.mask.seqlen_q) return;
  const float* acc = p.dq_accum + ((si.batch * p.q_seq + si.q_start + i) * p.heads_q + h) * p.dim;
  T* dq = static_cast<T*>(p.dq.data) + p.dq.offset(si.batch, si.q_start + i, h);
  for (int x = lane; x < p.dim; x += kWarpSize) dq[x] = Elem<T>::from_float(acc[x]);
}

}  // namespace flashattn::gpu::detail
