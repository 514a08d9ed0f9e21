// CUDA error handling of the host code: every runtime call goes through check_cuda.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace flashattn::gpu::detail {

// Throws std::runtime_error naming the call and CUDA's message when `e` is not cudaSuccess. CUDA
// failures are not argument errors, so they are not flashattn::Error.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("flashattn::gpu: ") + what + " failed: " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

}  // namespace flashattn::gpu::detail
