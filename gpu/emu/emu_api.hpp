// flashattn::gpu_emu — the GPU kernels run by the host emulator (emu.hpp) on HOST memory. For
// testing the kernels' logic on machines without a GPU; slow (fibers, emulated tensor cores).
#pragma once

#include <string>

#include "flashattn/args.hpp"

namespace flashattn::gpu_emu {

// As flashattn::gpu::forward, on host pointers (every variant of the table, compiled on the GPU
// side or not), quantized K/V included. Does nothing for an unsupported call (check unsupported()
// first), an append into quantized caches or quantized K/V with a block mask (the GPU backend
// rejects those).
void forward(const ForwardArgs& a);
// The same as on an sm_90 device with the sm_90a kernels enabled: the calls they take run them.
void forward_on_sm90(const ForwardArgs& a);

// How many launches of the sm_90a forward the emulator has made (for tests that must reach it).
extern int64_t sm90_forward_calls;

// As flashattn::gpu::backward, on host pointers.
void backward(const BackwardArgs& a, bool deterministic);

// "" if the GPU kernels support this dtype and head-dim pair (dv = value head dim) for the
// forward (and the backward when `backward`), else the reason. quantized_kv: K/V are 8-bit (the
// quantized forward kernel: head dims up to 256, forward only).
std::string unsupported(DType dtype, int64_t d, int64_t dv, bool backward, bool quantized_kv = false);

}  // namespace flashattn::gpu_emu
