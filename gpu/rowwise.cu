// Launchers of the row-wise kernels (rowwise.cuh, and the quantized K/V forward of
// quantized_kernel.cuh), of the dbias kernel (dbias_kernel.cuh) and of the KV-cache append
// (append.cuh), instantiated for both dtypes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "check.hpp"
#include "launch.hpp"
#include "append.cuh"
#include "dbias_kernel.cuh"
#include "host_params.hpp"
#include "quantized_kernel.cuh"
#include "rowwise.cuh"

namespace flashattn::gpu::detail {
namespace {

dim3 row_grid(const CommonParams& p, int64_t max_seqlen_q) {
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

template <class T>
void launch_combine(const ForwardParams& p, int64_t max_seqlen_q, cudaStream_t stream) {
  if (max_seqlen_q == 0 || p.num_sequences == 0) return;
  combine_kernel<T><<<row_grid(p, max_seqlen_q), kThreadsPerBlock, 0, stream>>>(p);
  check_cuda(cudaGetLastError(), "combine kernel launch");
}

template <class T>
void launch_quantized_forward(const ForwardParams& p, DType kv, int64_t max_seqlen_q, cudaStream_t stream) {
  if (max_seqlen_q == 0 || p.num_sequences == 0 || p.heads_q == 0) return;
  const dim3 rows = row_grid(p, max_seqlen_q);
  quantized_forward_variant<T>(kv)<<<dim3(rows.x * static_cast<unsigned>(p.num_splits), rows.y, rows.z),
                                     kThreadsPerBlock, 0, stream>>>(p);
  check_cuda(cudaGetLastError(), "quantized forward kernel launch");
}

void launch_dropout_mask(const ForwardParams& p, int64_t max_seqlen_q, cudaStream_t stream) {
  if (max_seqlen_q == 0 || p.num_sequences == 0 || p.heads_q == 0) return;
  dropout_mask_kernel<<<row_grid(p, max_seqlen_q), kThreadsPerBlock, 0, stream>>>(p);
  check_cuda(cudaGetLastError(), "dropout mask kernel launch");
}

template <class T>
void launch_dbias(const BackwardParams& p, cudaStream_t stream) {
  const int64_t blocks = dbias_blocks(p);
  if (blocks == 0 || p.dbias_heads == 0 || p.dbias_batch == 0) return;
  dbias_kernel<T><<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(p.dbias_heads),
                         static_cast<unsigned>(p.dbias_batch)),
                    kThreadsPerBlock, 0, stream>>>(p);
  check_cuda(cudaGetLastError(), "dbias kernel launch");
}

void launch_dsinks(const BackwardParams& p, cudaStream_t stream) {
  if (p.heads_q == 0) return;
  dsinks_kernel<<<p.heads_q, kThreadsPerBlock, kThreadsPerBlock * sizeof(double), stream>>>(p);
  check_cuda(cudaGetLastError(), "dsinks kernel launch");
}

template <class T>
void launch_append(const AppendParams& p, int64_t batch, int heads_k, int heads_q, int64_t q_rows, cudaStream_t stream) {
  if (batch == 0) return;
  if (p.new_rows > 0 && heads_k > 0) {
    append_kv_kernel<T><<<dim3(static_cast<unsigned>(p.new_rows), heads_k, static_cast<unsigned>(batch)),
                          kThreadsPerBlock, 0, stream>>>(p);
    check_cuda(cudaGetLastError(), "append kernel launch");
  }
  if (p.q_rot.data && q_rows > 0 && heads_q > 0) {
    rotate_q_kernel<T><<<dim3(static_cast<unsigned>(q_rows), heads_q, static_cast<unsigned>(batch)), kThreadsPerBlock,
                         0, stream>>>(p);
    check_cuda(cudaGetLastError(), "rotate q kernel launch");
  }
}

template void launch_quantized_forward<__half>(const ForwardParams&, DType, int64_t, cudaStream_t);
template void launch_quantized_forward<__nv_bfloat16>(const ForwardParams&, DType, int64_t, cudaStream_t);
template void launch_combine<__half>(const ForwardParams&, int64_t, cudaStream_t);
template void launch_combine<__nv_bfloat16>(const ForwardParams&, int64_t, cudaStream_t);
template void launch_append<__half>(const AppendParams&, int64_t, int, int, int64_t, cudaStream_t);
template void launch_append<__nv_bfloat16>(const AppendParams&, int64_t, int, int, int64_t, cudaStream_t);
template void launch_dot<__half>(const BackwardParams&, int64_t, cudaStream_t);
template void launch_dot<__nv_bfloat16>(const BackwardParams&, int64_t, cudaStream_t);
template void launch_dq_convert<__half>(const BackwardParams&, int64_t, cudaStream_t);
template void launch_dq_convert<__nv_bfloat16>(const BackwardParams&, int64_t, cudaStream_t);
template void launch_dbias<__half>(const BackwardParams&, cudaStream_t);
template void launch_dbias<__nv_bfloat16>(const BackwardParams&, cudaStream_t);

}  // namespace flashattn::gpu::detail
