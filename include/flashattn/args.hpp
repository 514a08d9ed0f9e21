// The argument structs of the forward and backward passes, shared by every backend.
#pragma once

#include <cstdint>

#include "flashattn/types.hpp"

namespace flashattn {

// Arguments of one forward call: out = softmax(mask(alibi(softcap(scale * q kᵀ)))) v, and optionally
// the row log-sum-exp. See docs/semantics.md for the exact contract.
struct ForwardArgs {
  Tensor q;    // [B, Nq, Hq, d]
  Tensor k;    // [B, Nk, Hk, d], Hq % Hk == 0 (MQA/GQA: query head h reads key head h / (Hq/Hk))
  Tensor v;    // [B, Nk, Hk, d]
  Tensor out;  // [B, Nq, Hq, d], same dtype as q; written
  float* lse = nullptr;  // optional output, fp32 [B, Hq, Nq] contiguous (varlen: B = 1, Nq = total)

  float scale = 0;        // multiplies q kᵀ; 0 means 1/sqrt(d)
  bool causal = false;    // bottom-right aligned: row i sees keys j <= i + Nk - Nq
  int64_t window_left = -1, window_right = -1;  // sliding window around the diagonal; -1 unbounded
  float softcap = 0;      // > 0: S <- softcap * tanh(S / softcap); 0 off
  const float* alibi_slopes = nullptr;  // [Hq], or [B, Hq] with alibi_batch_stride = Hq
  int64_t alibi_batch_stride = 0;       // elements between sequences' slopes; 0: shared by all
  const int32_t* seqlens_k = nullptr;   // [B] valid keys per sequence (keys at or past it invisible)

  // Variable-length packed batches (as flash_attn_varlen_func): q, k, v, out have batch 1 and hold
  // the sequences back to back; sequence s has rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) of q/out
  // and [cu_seqlens_k[s], cu_seqlens_k[s+1]) of k/v. Both arrays have varlen_batch + 1 entries.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t varlen_batch = 0;               // number of sequences when cu_seqlens_* are set
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // bounds on sequence lengths; 0: not given
};

// Arguments of one backward call. The forward fields are inputs here: out is the forward's output
// and lse (required) its log-sum-exp. Gradients are written to dq, dk, dv (dtype of q).
struct BackwardArgs : ForwardArgs {
  Tensor dout;  // [B, Nq, Hq, d]
  Tensor dq;    // [B, Nq, Hq, d]; written
  Tensor dk;    // [B, Nk, Hk, d]; written (summed over the query heads of a group)
  Tensor dv;    // [B, Nk, Hk, d]; written
};

}  // namespace flashattn
