// flashattn::gpu_emu — the GPU kernels run by the host emulator (emu.hpp) on HOST memory. For
// testing the kernels' logic on machines without a GPU; slow (fibers, emulated tensor cores).
#pragma once

#include "flashattn/args.hpp"

namespace flashattn::gpu_emu {

// As flashattn::gpu::forward, on host pointers.
void forward(const ForwardArgs& a);

// As flashattn::gpu::backward, on host pointers.
void backward(const BackwardArgs& a, bool deterministic);

// "" if the GPU kernels support this dtype and head dim, else the reason (as gpu::unsupported_reason).
const char* unsupported(DType dtype, int64_t head_dim);

}  // namespace flashattn::gpu_emu
