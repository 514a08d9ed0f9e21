// The backward's small row-wise passes, for any head dim: D = rowsum(dO∘O) before the fused kernel,
// and the rounding of the fp32 dQ accumulator to the output dtype after it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "check.hpp"
#include "launch.hpp"
#include "mma.cuh"
#include "tile.cuh"
#include "traits.cuh"

namespace flashattn::gpu::detail {
namespace {

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

dim3 row_grid(const BackwardParams& p, int64_t max_seqlen_q) {
  return dim3(static_cast<unsigned>((max_seqlen_q + kRowsPerBlock - 1) / kRowsPerBlock),
              static_cast<unsigned>(p.heads_q), static_cast<unsigned>(p.num_sequences));
}

}  // namespace

template <class T>
void launch_dot(const BackwardParams& p, int64_t max_seqlen_q, cudaStream_t stream) {
  if (max_seqlen_q == 0 || p.num_sequences == 0) return;
  dot_kernel<T><<<row_grid(p, max_seqlen_q), kThreadsPerBlock, 0, stream>>>(p);
  check_cuda(cudaGetLastError(), "dot kernel launch");
}

template <class T>
void launch_dq_convert(const BackwardParams& p, int64_t max_seqlen_q, cudaStream_t stream) {
  if (max_seqlen_q == 0 || p.num_sequences == 0) return;
  dq_convert_kernel<T><<<row_grid(p, max_seqlen_q), kThreadsPerBlock, 0, stream>>>(p);
  check_cuda(cudaGetLastError(), "dq convert kernel launch");
}

template void launch_dot<__half>(const BackwardParams&, int64_t, cudaStream_t);
template void launch_dot<__nv_bfloat16>(const BackwardParams&, int64_t, cudaStream_t);
template void launch_dq_convert<__half>(const BackwardParams&, int64_t, cudaStream_t);
template void launch_dq_convert<__nv_bfloat16>(const BackwardParams&, int64_t, cudaStream_t);

}  // namespace flashattn::gpu::detail
