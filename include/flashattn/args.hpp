// The argument structs of the forward and backward passes, shared by every backend.
//
// AttentionArgs holds what both passes share: the input views q, k, v and every option that
// defines the computation (scale, masks, soft-capping, ALiBi, key lengths, varlen, attention sinks,
// paged K/V, additive bias, block-sparse masks, dropout). ForwardArgs adds the forward's outputs and the forward-only inference options (KV-cache
// append with rotary embeddings, split-KV); BackwardArgs adds the backward's inputs (the forward's
// out and lse, dout) and its outputs. Inputs are read-only views (ConstTensor, const pointers): a const buffer needs
// no cast; outputs are writable (Tensor, float*). docs/semantics.md is the full contract.
#pragma once

#include <cstdint>

#include "flashattn/block_mask.hpp"
#include "flashattn/options.hpp"
#include "flashattn/types.hpp"

namespace flashattn {

// How the scales of quantized K/V are indexed (KvScales).
enum class ScaleGranularity : uint8_t {
  tensor,  // one scale for the whole tensor: [1]
  head,    // one per key/value head: [Hk]
  token,   // one per (row, key/value head): [k.batch, k.seq, Hk] contiguous (a page pool's
           // [num_pages, page_size, Hk] with a block table)
};

// Scales of quantized K and V (docs/semantics.md, "Quantized K/V"): element x of row (b, j) of key
// head h is decode(k[b, j, h, x]) · scale(b, j, h) rounded to fp32, likewise V with its own scales.
// fp32, each finite and > 0. Set exactly when k and v are quantized (DType i8, e4m3, e5m2).
struct KvScales {
  const float* k = nullptr;
  const float* v = nullptr;
  ScaleGranularity granularity = ScaleGranularity::tensor;
};

// The inputs and options of an attention call, common to the forward and the backward pass:
// out = dropout(softmax(mask(bias + alibi(softcap(scale * q kᵀ))))) v. The value options live in
// the groups it inherits (flashattn/options.hpp): MaskOptions (causal, window_left/right,
// diagonal_offset), ScoreOptions (scale, softcap), DropoutOptions (dropout_p, _seed, _offset).
struct AttentionArgs : MaskOptions, ScoreOptions, DropoutOptions {
  ConstTensor q;  // [B, Nq, Hq, d]
  ConstTensor k;  // [B, Nk, Hk, d], Hq % Hk == 0 (MQA/GQA: query head h reads key head h / (Hq/Hk))
  ConstTensor v;  // [B, Nk, Hk, dv]: the value head dim dv may differ from d (out, dout, dv carry dv)
                  // With a block table, k and v are page pools [num_pages, page_size, Hk, d / dv].
                  // k and v have q's dtype, or (forward only) one quantized dtype with kv_scales.
  KvScales kv_scales;  // scales of quantized k and v; unset otherwise

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

  // Attention sinks (gpt-oss): fp32 [Hq], one finite logit per query head shared by every sequence.
  // It joins each row's softmax denominator and carries no value: P_ij = exp(S_ij - LSE_i) with
  // LSE_i = log(sum_j exp(S_ij) + exp(sinks[h])); the sink is not scaled, capped, biased or masked.
  // A row that sees no key then has O = 0 and LSE = sinks[h]. null: no sinks.
  const float* sinks = nullptr;

  // Paged K/V (as vLLM / flash_attn_with_kvcache): when set, k and v are page pools
  // [num_pages, page_size, Hk, d] (k.batch = num_pages, k.seq = page_size >= 1) and the batch B is
  // q.batch. block_table is int32 [B, block_table_pages] with block_table_stride elements between
  // sequences' rows (0: block_table_pages). Key j of sequence b is row j % page_size of page
  // block_table[b * stride + j / page_size]. Sequence b has seqlens_k[b] keys if seqlens_k is set,
  // else block_table_pages * page_size. Only the entries of pages holding a key are read (and must
  // lie in [0, num_pages)); pages may be shared between sequences and appear in any order. Forward
  // only; not combined with cu_seqlens_q/k.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int64_t block_table_pages = 0;  // columns of the block table (max pages per sequence)

  // Additive bias (docs/semantics.md, "Additive bias"): element (s, i, h, j) of this view is added
  // to the score of query row i of head h of sequence s for key j, after ALiBi and before the mask
  // (−∞ hides the key). The view's [batch, seq, heads, dim] are [S, Nq, Hq, Nk]: a contiguous
  // [B, Hq, Nq, Nk] buffer is bhsd(ptr, dtype, B, Nq, Hq, Nk). batch, seq and heads may be 1
  // (broadcast), any stride may be 0; dim is key_columns(args). Its own dtype (f32, f16, bf16).
  // Left empty (the default view): no bias.
  ConstTensor bias;

  // Block-sparse mask (docs/semantics.md, "Block-sparse masks"; flashattn/block_mask.hpp): per
  // (sequence, query head, block of block_mask.block_q rows) the lists of key blocks that are fully
  // and partially visible; unlisted blocks are hidden and never loaded; partial blocks may carry
  // element bits. It only restricts the window rule. Left empty (the default): no block mask.
  BlockMask block_mask;
};

// New K/V rows appended to a KV cache by the forward call that attends over them (as
// flash_attn_with_kvcache), with optional rotary embeddings. In use when any member differs from its
// default (KvAppend::used). Then q's batch B has B sequences, AttentionArgs::k and v must be left
// empty (the call attends over the caches) and seqlens_k is required: each sequence's cache length
// BEFORE the call. The call first writes row t of k_new (rotated) and v_new to cache position
// seqlens_k[b] + t (through the block table when one is set), then attends with
// seqlens_k[b] + k_new.seq keys; query row i is rotated at position seqlens_k[b] + i (in scratch: q
// is never modified). docs/semantics.md gives the exact order of operations and rounding.
struct KvAppend {
  Tensor k_cache;     // [B, capacity, Hk, d] contiguous-per-sequence cache, or a page pool
                      // [num_pages, page_size, Hk, d] with a block table; read and written
  Tensor v_cache;     // as k_cache with dv
  ConstTensor k_new;  // [B, Nnew, Hk, d]: rows to append (Nnew may be 0)
  ConstTensor v_new;  // [B, Nnew, Hk, dv]

  // Quantized caches at token granularity (docs/semantics.md, "Appending to a quantized cache"): the
  // caches' fp32 scale arrays, [B, capacity, Hk] or the page pool's [num_pages, page_size, Hk]; the
  // appended rows' entries are computed and written, the others read. kv_scales.k/.v stay null then.
  // Null at other granularities (kv_scales holds the scales) and for caches of q's dtype.
  float* k_scales = nullptr;
  float* v_scales = nullptr;

  // Rotary embeddings of k_new and q: fp32 tables [rotary_positions, rotary_dim / 2], row p the
  // angles' cos / sin at position p. null (both): no rotary. rotary_dim is even, in [2, d]; only the
  // first rotary_dim elements of each head rotate. interleaved: pairs (x[2r], x[2r+1]) (GPT-J);
  // otherwise pairs (x[r], x[r + rotary_dim/2]) (GPT-NeoX, half-split).
  const float* rotary_cos = nullptr;
  const float* rotary_sin = nullptr;
  int64_t rotary_dim = 0, rotary_positions = 0;
  bool rotary_interleaved = false;

  // Returns whether any member is set (the call appends).
  bool used() const {
    return k_cache.data || v_cache.data || k_new.data || v_new.data || k_cache.heads || v_cache.heads || k_new.heads ||
           v_new.heads || k_scales || v_scales || rotary_cos || rotary_sin || rotary_dim || rotary_positions ||
           rotary_interleaved;
  }
};

// Arguments of one forward call: writes out, and lse if it is set.
struct ForwardArgs : AttentionArgs {
  Tensor out;            // [B, Nq, Hq, dv], same dtype as q; written
  float* lse = nullptr;  // optional output, fp32 [B, Hq, Nq] contiguous (varlen: B = 1, Nq = total)

  KvAppend append;  // KV-cache append (+ rotary) before attending; unused by default

  // Split-KV ("flash-decoding"): the keys of each (sequence, head) are cut into num_splits contiguous
  // chunks whose partial results are combined by LSE as flashattn::merge does, in a fixed order.
  // 0: chosen from the shape alone (never from the thread count: bits are the same for any number of
  // threads); 1: unsplit. A performance knob: every value agrees with the unsplit result within the
  // tolerance rule.
  int64_t num_splits = 0;

  // Optional output: the dropout keep decisions Z as bits (docs/semantics.md, "Keep mask"):
  // lse_count x dropout_mask_row_bytes(args) bytes, row i of head h of sequence s at
  // lse_index(s, h, i) · row bytes, bit j % 8 of byte j / 8 = Z_ij for keys below the sequence's
  // count, 0 past it. Written whenever set (p = 0: all ones).
  uint8_t* dropout_mask = nullptr;
};

// Arguments of one backward call: reads the forward's out and lse, and dout; writes dq, dk, dv
// (dtype of q) and dsinks if set. A block table is rejected (paged K/V is forward-only). backward_args(forward) copies the shared part and the forward's out and lse.
struct BackwardArgs : AttentionArgs {
  ConstTensor out;             // [B, Nq, Hq, dv]: the forward's output, as the forward wrote it
  const float* lse = nullptr;  // required: the forward's log-sum-exp, fp32 [B, Hq, Nq]
  ConstTensor dout;            // [B, Nq, Hq, dv]
  Tensor dq;                   // [B, Nq, Hq, d]; written
  Tensor dk;                   // [B, Nk, Hk, d]; written (summed over the query heads of a group)
  Tensor dv;                   // [B, Nk, Hk, dv]; written
  float* dsinks = nullptr;     // optional (needs sinks): fp32 [Hq], d loss / d sinks[h], summed over
                               // every row of every sequence; written when set
  Tensor dbias;                // optional (needs bias): d loss / d bias with bias's sizes (any of the
                               // three dtypes), summed over the dimensions where bias has size 1;
                               // every element written (0 where nothing reads it). Empty: not computed
};

// Returns backward arguments with the inputs and options of `forward` and its out and lse as the
// backward's inputs; dout, dq, dk, dv, dsinks and dbias are left for the caller to set. The
// forward-only options (append, num_splits, dropout_mask) are not part of a backward call.
inline BackwardArgs backward_args(const ForwardArgs& forward) {
  BackwardArgs b;
  static_cast<AttentionArgs&>(b) = forward;
  b.out = forward.out;
  b.lse = forward.lse;
  return b;
}

}  // namespace flashattn
