// Launchers of the templated kernels, one explicit instantiation per (head dims, dtype, pass) in the
// generated translation units (see CMakeLists.txt and variants.cmake). Declarations only: including
// this header compiles no kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "append.cuh"
#include "params.cuh"

namespace flashattn::gpu::detail {

// Runs the forward kernel over every (query block x split, query head, sequence).
template <int D, int DV, class T>
void launch_forward(const ForwardParams& p, int64_t max_seqlen_q, cudaStream_t stream);

// Runs the sm_90a forward kernel (forward_sm90_kernel.cuh) over every (query block, query head,
// sequence) of a call sm90_forward_specs takes; D = DV = 64 or 128 (gpu/forward_sm90.cu).
template <int D, class T>
void launch_forward_sm90(const Sm90ForwardParams& p, int64_t max_seqlen_q, cudaStream_t stream);

// Runs the dK/dV kernel over every (key block, key head, sequence); when p.dq_accum is set it also
// accumulates dS·K into it with fp32 atomics (launch_dq_convert applies the scale).
template <int D, int DV, class T>
void launch_backward(const BackwardParams& p, int64_t max_k_rows, cudaStream_t stream);

// Runs the deterministic dQ kernel over every (query block, query head, sequence); writes p.dq.
template <int D, int DV, class T>
void launch_dq(const BackwardParams& p, int64_t max_seqlen_q, cudaStream_t stream);

// Computes p.dot = rowsum(dO∘O) for every row and query head (any head dim).
template <class T>
void launch_dot(const BackwardParams& p, int64_t max_seqlen_q, cudaStream_t stream);

// Writes p.dq = p.scale · p.dq_accum rounded to T for every row of every sequence (any head dim).
template <class T>
void launch_dq_convert(const BackwardParams& p, int64_t max_seqlen_q, cudaStream_t stream);

// Merges the split-KV partials of p into p.out (and p.lse) for every row and query head.
template <class T>
void launch_combine(const ForwardParams& p, int64_t max_seqlen_q, cudaStream_t stream);

// Runs the quantized K/V forward (quantized_kernel.cuh) for K/V of dtype kv over every (row block x
// split, query head, sequence); with p.num_splits > 1 it writes the partials launch_combine merges.
template <class T>
void launch_quantized_forward(const ForwardParams& p, DType kv, int64_t max_seqlen_q, cudaStream_t stream);

// Writes p.dropout_mask (keep bits) for every row and query head.
void launch_dropout_mask(const ForwardParams& p, int64_t max_seqlen_q, cudaStream_t stream);

// Writes every element of p.dbias (p.dot must hold D).
template <class T>
void launch_dbias(const BackwardParams& p, cudaStream_t stream);

// Writes p.dsinks (p.dot must hold D) for every query head.
void launch_dsinks(const BackwardParams& p, cudaStream_t stream);

// Writes the appended rows into the caches for `batch` sequences and, when p.q_rot is set, the
// rotated queries (q_rows rows per sequence).
template <class T>
void launch_append(const AppendParams& p, int64_t batch, int heads_k, int heads_q, int64_t q_rows, cudaStream_t stream);

}  // namespace flashattn::gpu::detail
