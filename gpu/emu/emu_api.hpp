// flashattn::gpu_emu — the GPU kernels run by the host emulator (emu.hpp) on HOST memory. For
// testing the kernels' logic on machines without a GPU; slow (fibers, emulated tensor cores).
#pragma once

#include <string>

#include "flashattn/args.hpp"

namespace flashattn::gpu_emu {

// As flashattn::gpu::forward, on host pointers (every variant of the table, compiled on the GPU
// side or not). Does nothing for an unsupported call (check unsupported() first).
void forward(const ForwardArgs& a);

// As flashattn::gpu::backward, on host pointers.
void backward(const BackwardArgs& a, bool deterministic);

// "" if the GPU kernels support this dtype and head-dim pair (dv = value head dim) for the
// forward (and the backward when `backward`), else the reason.
std::string unsupported(DType dtype, int64_t d, int64_t dv, bool backward);

}  // namespace flashattn::gpu_emu
