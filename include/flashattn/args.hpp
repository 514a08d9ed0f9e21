// The argument structs of the forward and backward passes, shared by every backend.
//
// AttentionArgs holds what both passes share: the input views q, k, v and every option that
// defines the computation (scale, masks, soft-capping, ALiBi, key lengths, varlen). ForwardArgs adds
// the forward's outputs; BackwardArgs adds the backward's inputs (the forward's out and lse, dout)
// and its outputs. Inputs are read-only views (ConstTensor, const pointers): a const buffer needs
// no cast; outputs are writable (Tensor, float*). docs/semantics.md is the full contract.
#pragma once

#include <cstdint>
#include <optional>

#include "flashattn/types.hpp"

namespace flashattn {

// The inputs and options of an attention call, common to the forward and the backward pass:
// out = softmax(mask(alibi(softcap(scale * q kᵀ)))) v.
struct AttentionArgs {
  ConstTensor q;  // [B, Nq, Hq, d]
  ConstTensor k;  // [B, Nk, Hk, d], Hq % Hk == 0 (MQA/GQA: query head h reads key head h / (Hq/Hk))
  ConstTensor v;  // [B, Nk, Hk, d]

  std::optional<float> scale;  // multiplies q kᵀ; empty (the default): 1/sqrt(d). Any finite value,
                               // 0 and negative included, is used as given.
  bool causal = false;         // bottom-right aligned: row i sees keys j <= i + Nk - Nq
  int64_t window_left = -1, window_right = -1;  // sliding window around the diagonal; -1 unbounded
  float softcap = 0;                            // > 0: S <- softcap * tanh(S / softcap); 0 off
  const float* alibi_slopes = nullptr;  // [Hq], or [B, Hq] with alibi_batch_stride = Hq
  int64_t alibi_batch_stride = 0;       // elements between sequences' slopes; 0: shared by all
  const int32_t* seqlens_k = nullptr;   // [B] valid keys per sequence (keys at or past it invisible)

  // Variable-length packed batches (as flash_attn_varlen_func): q, k, v (and out, the gradients)
  // have batch 1 and hold the sequences back to back; sequence s has rows
  // [cu_seqlens_q[s], cu_seqlens_q[s+1]) of q and [cu_seqlens_k[s], cu_seqlens_k[s+1]) of k/v.
  // Both arrays have varlen_batch + 1 entries.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t varlen_batch = 0;                    // number of sequences when cu_seqlens_* are set
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // bounds on sequence lengths; 0: not given
};

// Arguments of one forward call: writes out, and lse if it is set.
struct ForwardArgs : AttentionArgs {
  Tensor out;            // [B, Nq, Hq, d], same dtype as q; written
  float* lse = nullptr;  // optional output, fp32 [B, Hq, Nq] contiguous (varlen: B = 1, Nq = total)
};

// Arguments of one backward call: reads the forward's out and lse, and dout; writes dq, dk, dv
// (dtype of q). backward_args(forward) copies the shared part and the forward's out and lse.
struct BackwardArgs : AttentionArgs {
  ConstTensor out;             // [B, Nq, Hq, d]: the forward's output, as the forward wrote it
  const float* lse = nullptr;  // required: the forward's log-sum-exp, fp32 [B, Hq, Nq]
  ConstTensor dout;            // [B, Nq, Hq, d]
  Tensor dq;                   // [B, Nq, Hq, d]; written
  Tensor dk;                   // [B, Nk, Hk, d]; written (summed over the query heads of a group)
  Tensor dv;                   // [B, Nk, Hk, d]; written
};

// Returns backward arguments with the inputs and options of `forward` and its out and lse as the
// backward's inputs; dout, dq, dk and dv are left for the caller to set.
inline BackwardArgs backward_args(const ForwardArgs& forward) {
  BackwardArgs b;
  static_cast<AttentionArgs&>(b) = forward;
  b.out = forward.out;
  b.lse = forward.lse;
  return b;
}

}  // namespace flashattn
