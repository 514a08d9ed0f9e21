// flashattn::gpu — fused CUDA attention (tensor cores, sm_80 and newer), forward and recompute
// backward. All tensors and arrays are device memory; calls are asynchronous on `stream`.
//
// Supported: f16 and bf16 (fp32 accumulation; f32 is rejected with flashattn::Error), head dims
// 32, 64, 96, 128 and 256 with dv = d, d = 192 with dv = 128, and d = 576 with dv = 512 (forward
// only) — those compiled in, see FLASHATTN_GPU_HEAD_DIMS; every mask, softcap, ALiBi, seqlens_k,
// varlen, GQA/MQA, sinks (and dsinks), paged K/V (any page size), the KV-cache append with rotary
// embeddings and split-KV, and strided layouts whose data pointers are 16-byte aligned and whose
// strides are multiples of 8 elements. Validation copies the small device arrays (cu_seqlens,
// seqlens_k, alibi_slopes, sinks, block_table) to the host, which waits for `stream`; errors are
// thrown before any kernel runs or anything is written. See docs/gpu.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashattn/args.hpp"

// CUDA's own spelling of a stream handle, so this header needs no CUDA include.
struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace flashattn::gpu {

// Validates `a` and computes out (and lse if set) on the device.
void forward(const ForwardArgs& a, cudaStream_t stream = nullptr);

// Validates `a` and computes dq, dk, dv on the device. With deterministic = false, dQ is summed
// with fp32 atomics (fast, not bitwise repeatable); with deterministic = true a separate kernel
// computes dQ per query block with no atomics, and repeated calls give identical bits.
// dK and dV never use atomics.
void backward(const BackwardArgs& a, cudaStream_t stream = nullptr, bool deterministic = false);

// Returns the bytes of device scratch a backward call allocates (stream-ordered) beyond its inputs
// and outputs: D = rowsum(dO∘O) and LSE·log2(e) per row, plus the fp32 dQ accumulator unless
// deterministic.
size_t backward_workspace_bytes(const BackwardArgs& a, bool deterministic = false);

// Returns why the GPU backend cannot run a call with this dtype, query/key head dim and value head
// dim (0: equal to head_dim), forward only or (backward = true) forward and backward, or "" when it
// can. quantized_kv: K/V are 8-bit (docs/semantics.md, "Quantized K/V"): a forward then runs the
// quantized kernel, which takes any head dims up to 256 (no append into quantized caches, no
// backward).
std::string unsupported_reason(DType dtype, int64_t head_dim, int64_t head_dim_v = 0, bool backward = false,
                               bool quantized_kv = false);

}  // namespace flashattn::gpu
