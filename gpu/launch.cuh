// Definitions of the attention-kernel launchers; included only by the generated per-variant
// translation units, each of which instantiates one (head dims, dtype, pass).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backward_kernel.cuh"
#include "check.hpp"
#include "dq_kernel.cuh"
#include "forward_kernel.cuh"
#include "launch.hpp"

namespace flashattn::gpu::detail {

// Returns ceil(n / d) for n >= 0.
constexpr int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// Launches kernel over grid (blocks, heads, sequences) with `threads` threads per block and `smem`
// bytes of dynamic shared memory, raising the kernel's shared-memory limit first (needed above 48 KB).
template <class Kernel, class... Args>
void launch(Kernel kernel, int64_t blocks, int heads, int sequences, int threads, int smem, cudaStream_t stream,
            const Args&... args) {
  if (blocks == 0 || heads == 0 || sequences == 0) return;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(heads), static_cast<unsigned>(sequences));
  kernel<<<grid, threads, smem, stream>>>(args...);
  check_cuda(cudaGetLastError(), "kernel launch");
}

template <int D, int DV, class T>
void launch_forward(const ForwardParams& p, int64_t max_seqlen_q, cudaStream_t stream) {
  const ForwardShape shape = forward_shape<D, DV>(forward_extras(p));
  launch(forward_variant<D, DV, T>(p), ceil_div(max_seqlen_q, shape.br) * p.num_splits, p.heads_q, p.num_sequences,
         kThreadsPerBlock, shape.smem, stream, p);
}

template <int D, int DV, class T>
void launch_backward(const BackwardParams& p, int64_t max_k_rows, cudaStream_t stream) {
  const BackwardShape shape = backward_shape<D, DV>(backward_extras(p));
  launch(backward_variant<D, DV, T>(p), ceil_div(max_k_rows, shape.bc), p.heads_k, p.num_sequences, shape.threads,
         shape.smem, stream, p, p.dq_accum != nullptr);
}

template <int D, int DV, class T>
void launch_dq(const BackwardParams& p, int64_t max_seqlen_q, cudaStream_t stream) {
  using Tr = DqTraits<D, DV>;
  launch(dq_variant<D, DV, T>(p), ceil_div(max_seqlen_q, Tr::kBr),
         p.heads_q, p.num_sequences, Tr::kThreads, Tr::kSmemBytes, stream, p);
}

}  // namespace flashattn::gpu::detail
