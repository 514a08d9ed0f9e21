// Launchers of the backward's row-wise kernels (rowwise.cuh), instantiated for both dtypes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "check.hpp"
#include "launch.hpp"
#include "rowwise.cuh"

namespace flashattn::gpu::detail {
namespace {

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
