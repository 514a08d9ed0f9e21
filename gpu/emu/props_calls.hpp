// The emulated GPU calls of the property tests: each runs on copies of the call's tensors in the
// layout flashattn::gpu requires (props::gpu_layout: 16-byte aligned rows; a case's own layout may
// be unaligned or padded, which the GPU runner copies into that layout too), with every buffer the
// harness holds registered for the emulator's memcheck (props::live_allocations, their canary
// zones). After the call: the copies of inputs must be unchanged and nothing outside the views
// written (std::logic_error otherwise), then the output views are copied back.
#pragma once

#include <functional>

#include "flashattn/args.hpp"

namespace flashattn::gpu_emu {

// Validates a (flashattn::validate, in its own layout), then runs run(copy).
void in_gpu_layout(const ForwardArgs& a, const std::function<void(const ForwardArgs&)>& run);
void in_gpu_layout(const BackwardArgs& a, const std::function<void(const BackwardArgs&)>& run);

// One emulated call (gpu_emu::forward / backward) in the GPU layout.
void forward_in_gpu_layout(const ForwardArgs& a, bool sm90 = false);
void backward_in_gpu_layout(const BackwardArgs& a, bool deterministic);

}  // namespace flashattn::gpu_emu
