// Geometry of a validated call: which sequences it holds and where their rows live. Every backend
// walks a problem through these helpers, so varlen, key lengths and LSE layout mean the same thing
// everywhere.
#pragma once

#include <cmath>
#include <cstdint>

#include "flashattn/args.hpp"
#include "flashattn/config.hpp"
#include "flashattn/convert.hpp"
#include "flashattn/mask.hpp"

namespace flashattn {

// One sequence of a call: its rows in the tensors and its mask.
struct Sequence {
  int64_t index = 0;    // sequence number (batch index, or varlen sequence)
  int64_t batch = 0;    // batch index in the tensors (0 for varlen)
  int64_t q_start = 0;  // first row of q/out/dout/dq in the tensors' seq dimension
  int64_t k_start = 0;  // first row of k/v/dk/dv
  int64_t k_rows = 0;   // rows of k/v belonging to this sequence (before seqlens_k)
  Mask mask;            // seqlen_q, seqlen_k (after seqlens_k) and the window
};

// Returns the number of sequences of a validated call.
inline int64_t num_sequences(const AttentionArgs& a) {
  return a.cu_seqlens_q ? a.varlen_batch : a.q.batch;
}

// Returns sequence s from the call's sizes and side arrays (cu_seqlens_q/k and seqlens_k, each
// null when unused), read by `read`. Host and device: the GPU passes its device copies of the arrays.
template <class Read = ElementRead>
FLASHATTN_HD inline Sequence make_sequence(int64_t s, int64_t q_seq, int64_t k_seq, const int32_t* cu_seqlens_q,
                                           const int32_t* cu_seqlens_k, const int32_t* seqlens_k,
                                           const MaskOptions& mask, Read read = {}) {
  Sequence r;
  r.index = s;
  int64_t nq = q_seq, nk = k_seq;
  if (cu_seqlens_q) {
    r.batch = 0;
    r.q_start = read(cu_seqlens_q + s);
    r.k_start = read(cu_seqlens_k + s);
    nq = read(cu_seqlens_q + s + 1) - r.q_start;
    nk = read(cu_seqlens_k + s + 1) - r.k_start;
  } else {
    r.batch = s;
  }
  r.k_rows = nk;
  if (seqlens_k) nk = read(seqlens_k + s);
  r.mask = Mask::make(nq, nk, mask);
  return r;
}

// Returns sequence s (0 <= s < num_sequences(a)) of a validated call. Reads host arrays
// (cu_seqlens, seqlens_k): backends holding device pointers pass a host copy.
// With a block table, a sequence's rows are its pages' capacity (block_table_pages · page size) and
// k_start is 0: locate its keys with key_row.
inline Sequence sequence(const AttentionArgs& a, int64_t s) {
  const int64_t k_seq = a.block_table ? a.block_table_pages * a.k.seq : a.k.seq;
  return make_sequence(s, a.q.seq, k_seq, a.cu_seqlens_q, a.cu_seqlens_k, a.seqlens_k, a);
}

// Where key j of a sequence lives in k and v: batch index (the page with a block table) and row.
struct KeyRow {
  int64_t batch = 0, row = 0;
};

// Returns the location of key j (0 <= j < seq.k_rows) of sequence seq of a validated call: row
// j % page_size of page block_table[b·stride + j / page_size] with a block table, else row
// k_start + j of batch seq.batch.
inline KeyRow key_row(const AttentionArgs& a, const Sequence& seq, int64_t j) {
  if (!a.block_table) return {seq.batch, seq.k_start + j};
  const int64_t stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
  return {a.block_table[seq.index * stride + j / a.k.seq], j % a.k.seq};
}

// Returns the index in a scale array of granularity g of row `row` of batch `batch` (the page, with
// a block table), key/value head h, for K/V of `rows` rows per batch entry and `heads` heads: the
// one layout of docs/semantics.md, "Quantized K/V" (token: [k.batch, k.seq, Hk]).
FLASHATTN_HD constexpr int64_t kv_scale_index(ScaleGranularity g, int64_t rows, int64_t heads, int64_t batch, int64_t row,
                                              int64_t h) {
  return g == ScaleGranularity::tensor ? 0 : g == ScaleGranularity::head ? h : (batch * rows + row) * heads + h;
}

// Returns the scale of row `row` of batch `batch` (the page, with a block table), key/value head h
// of a quantized K or V whose scales are `scales` (a.kv_scales.k or .v).
inline float kv_scale(const AttentionArgs& a, const float* scales, int64_t batch, int64_t row, int64_t h) {
  return scales[kv_scale_index(a.kv_scales.granularity, a.k.seq, a.k.heads, batch, row, h)];
}

// Returns the value a quantized element stands for: its decoded value (load_as_float) times its
// scale, the fp32 product (docs/semantics.md, "Quantized K/V").
inline float dequantize(float decoded, float scale) { return decoded * scale; }

// Returns the scale 1/sqrt(d) used when AttentionArgs::scale is empty.
inline float default_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// Returns the scale applied to q kᵀ: a.scale if it is set (0 included), else 1/sqrt(d).
inline float effective_scale(const AttentionArgs& a) { return a.scale ? *a.scale : default_scale(a.q.dim); }

// Returns the ALiBi slope of query head h in sequence s (0 when ALiBi is off).
inline float alibi_slope(const AttentionArgs& a, int64_t s, int64_t h) {
  return a.alibi_slopes ? a.alibi_slopes[s * a.alibi_batch_stride + h] : 0.0f;
}

// Returns the index into lse ([B, Hq, Nq] contiguous) of row i of sequence seq, query head h.
inline int64_t lse_index(const AttentionArgs& a, const Sequence& seq, int64_t h, int64_t i) {
  return (seq.batch * a.q.heads + h) * a.q.seq + seq.q_start + i;
}

// Subtracts exp(sink_h − LSE_i)·D_i, D_i = Σ_x dout_ix·out_ix (fp64), from sums[h] for every row i
// of every sequence of a validated backward call with sinks, head by head in sequence and row
// order; rows with an infinite LSE add nothing. dsinks[h] is the sum over all rows rounded to fp32
// (docs/semantics.md, "Backward"): the CPU backend's, and each rank's share in flashattn::ring.
inline void add_sink_gradients(const BackwardArgs& a, double* sums) {
  for (int64_t h = 0; h < a.q.heads; ++h) {
    for (int64_t s = 0; s < num_sequences(a); ++s) {
      const Sequence seq = sequence(a, s);
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
        const double lse = a.lse[lse_index(a, seq, h, i)];
        if (std::isinf(lse)) continue;  // cannot hold with finite sinks unless overflowed: no term
        double dot = 0;
        const int64_t o = a.out.offset(seq.batch, seq.q_start + i, h), g = a.dout.offset(seq.batch, seq.q_start + i, h);
        for (int64_t x = 0; x < a.v.dim; ++x)
          dot += static_cast<double>(load_as_float(a.dout.data, a.dout.dtype, g + x)) *
                 load_as_float(a.out.data, a.out.dtype, o + x);
        sums[h] -= std::exp(static_cast<double>(a.sinks[h]) - lse) * dot;
      }
    }
  }
}

// Returns whether any field of an optional view is set (an unset view is the default one).
inline bool view_set(const ConstTensor& t) {
  return t.data || t.batch || t.seq || t.heads || t.dim || t.stride_batch || t.stride_seq || t.stride_head;
}

// Returns whether the call has an additive bias.
inline bool has_bias(const AttentionArgs& a) { return view_set(a.bias); }

// Returns the keys one sequence of the call can hold before seqlens_k (the bias's dim and the
// keep mask's bits per row): block_table_pages · page size with paged K/V, the longest sequence's
// key rows with varlen (cu_seqlens_k read on the host), else k.seq. Call it on the call that
// attends: key_columns(const ForwardArgs&) below handles an append.
inline int64_t key_columns(const AttentionArgs& a) {
  if (a.block_table) return a.block_table_pages * a.k.seq;
  if (!a.cu_seqlens_k) return a.k.seq;
  int64_t m = 0;
  for (int64_t s = 0; s < a.varlen_batch; ++s) {
    const int64_t n = int64_t{a.cu_seqlens_k[s + 1]} - a.cu_seqlens_k[s];
    m = n > m ? n : m;
  }
  return m;
}
inline int64_t key_columns(const ForwardArgs& a) {
  if (!a.append.used()) return key_columns(static_cast<const AttentionArgs&>(a));
  AttentionArgs eff = a;
  eff.k = a.append.k_cache;
  return key_columns(eff);
}

// Returns the bias view with stride 0 in every broadcast (size-1) dimension, so that element
// (s, i, h, j) is at offset(s, i, h) + j for any sequence s, row i, query head h of the call.
inline ConstTensor bias_view(const AttentionArgs& a) {
  ConstTensor b = a.bias;
  if (b.batch == 1) b.stride_batch = 0;
  if (b.seq == 1) b.stride_seq = 0;
  if (b.heads == 1) b.stride_head = 0;
  return b;
}

// Returns the number of LSE entries (and keep-mask rows): B·Hq·Nq of q's view.
inline int64_t lse_count(const AttentionArgs& a) { return a.q.batch * a.q.heads * a.q.seq; }

// Returns the bytes of one row of the dropout keep mask: ⌈key_columns / 8⌉.
inline int64_t dropout_mask_row_bytes(const ForwardArgs& a) { return (key_columns(a) + 7) / 8; }

// Returns the key/value head read by query head h.
FLASHATTN_HD constexpr int64_t kv_head(int64_t h, int64_t heads_q, int64_t heads_k) {
  return h / (heads_q / heads_k);
}

// Returns the score after the optional soft-capping and ALiBi of docs/semantics.md, in this
// order, for row i and key j of a sequence with mask m; s is scale * q·k. Masking is not
// applied here.
template <class T>
FLASHATTN_HD inline T transform_score(T s, T softcap, T slope, int64_t i, int64_t j, const Mask& m) {
  if (softcap > T(0)) s = softcap * std::tanh(s / softcap);
  if (slope != T(0)) {
    const int64_t dist = i + m.diag() - j;
    s -= slope * static_cast<T>(dist < 0 ? -dist : dist);
  }
  return s;
}

}  // namespace flashattn
