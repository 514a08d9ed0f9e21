// Host-side construction of the kernel parameter blocks from validated arguments, shared by the
// CUDA entry points (api.cu) and the host emulator (emu/emu_api.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "flashattn/args.hpp"
#include "flashattn/problem.hpp"
#include "params.cuh"

namespace flashattn::gpu::detail {

inline View view(const Tensor& t) { return View{t.data, t.stride_batch, t.stride_seq, t.stride_head}; }
inline ConstView view(const ConstTensor& t) { return ConstView{t.data, t.stride_batch, t.stride_seq, t.stride_head}; }

// Fills the inputs and options every kernel reads from validated args (device pointers from `a`).
inline void fill_common(CommonParams& p, const AttentionArgs& a, int64_t nseq) {
  p.q = view(a.q);
  p.k = view(a.k);
  p.v = view(a.v);
  p.q_seq = a.q.seq;
  p.k_seq = a.k.seq;
  p.heads_q = static_cast<int>(a.q.heads);
  p.heads_k = static_cast<int>(a.k.heads);
  p.num_sequences = static_cast<int>(nseq);
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.seqlens_k = a.seqlens_k;
  p.causal = a.causal;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.diagonal_offset = a.diagonal_offset;
  p.scale = effective_scale(a);
  p.softcap = a.softcap;
  p.alibi_slopes = a.alibi_slopes;
  p.alibi_batch_stride = a.alibi_batch_stride;
}

// Fills the forward parameter block.
inline void fill(ForwardParams& p, const ForwardArgs& a, int64_t nseq) {
  fill_common(p, a, nseq);
  p.out = view(a.out);
  p.lse = a.lse;
}

// The longest query and key-row counts over the sequences of a validated host copy.
struct Extents {
  int64_t nseq = 0, max_q = 0, max_k_rows = 0;
};
inline Extents extents(const AttentionArgs& host) {
  Extents e;
  e.nseq = num_sequences(host);
  for (int64_t s = 0; s < e.nseq; ++s) {
    const Sequence seq = sequence(host, s);
    e.max_q = std::max(e.max_q, seq.mask.seqlen_q);
    e.max_k_rows = std::max(e.max_k_rows, seq.k_rows);
  }
  return e;
}

// Fills the backward parameter block (scratch pointers dot and dq_accum are left to the caller).
inline void fill(BackwardParams& p, const BackwardArgs& a, int64_t nseq) {
  fill_common(p, a, nseq);
  p.out = view(a.out);
  p.lse = a.lse;
  p.dout = view(a.dout);
  p.dq = view(a.dq);
  p.dk = view(a.dk);
  p.dv = view(a.dv);
  p.dim = static_cast<int>(a.q.dim);
}

// Returns the element count of the D scratch (laid out like lse) and of the fp32 dQ accumulator.
inline size_t dot_count(const AttentionArgs& a) { return static_cast<size_t>(a.q.batch * a.q.heads * a.q.seq); }
inline size_t dq_accum_count(const AttentionArgs& a) {
  return static_cast<size_t>(a.q.batch * a.q.seq * a.q.heads * a.q.dim);
}

}  // namespace flashattn::gpu::detail
