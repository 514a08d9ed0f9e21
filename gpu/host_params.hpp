// Host-side construction of the kernel parameter blocks from validated arguments, shared by the
// CUDA entry points (api.cu) and the host emulator (emu/emu_api.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashattn/append.hpp"
#include "flashattn/args.hpp"
#include "flashattn/problem.hpp"
#include "append.cuh"
#include "params.cuh"
#include "sm90_tensor_map.hpp"
#include "traits.cuh"

namespace flashattn::gpu::detail {

inline View view(const Tensor& t) { return View{t.data, t.stride_batch, t.stride_seq, t.stride_head}; }
inline ConstView view(const ConstTensor& t) { return ConstView{t.data, t.stride_batch, t.stride_seq, t.stride_head}; }

// Fills the inputs and options every kernel reads from validated args (device pointers from `a`).
inline void fill_common(CommonParams& p, const AttentionArgs& a, int64_t nseq) {
  p.q = view(a.q);
  p.k = view(a.k);
  p.v = view(a.v);
  p.q_seq = a.q.seq;
  p.k_seq = a.block_table ? a.block_table_pages * a.k.seq : a.k.seq;  // as flashattn::sequence()
  p.heads_q = static_cast<int>(a.q.heads);
  p.heads_k = static_cast<int>(a.k.heads);
  p.dim = static_cast<int>(a.q.dim);
  p.dim_v = static_cast<int>(a.v.dim);
  p.num_sequences = static_cast<int>(nseq);
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.seqlens_k = a.seqlens_k;
  p.mask = a;
  p.scale = effective_scale(a);
  p.softcap = a.softcap;
  p.alibi_slopes = a.alibi_slopes;
  p.alibi_batch_stride = a.alibi_batch_stride;
  p.sinks = a.sinks;
  p.block_table = a.block_table;
  p.block_table_stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
  p.page_size = a.block_table ? a.k.seq : 0;
  if (has_bias(a)) {
    p.bias = view(bias_view(a));
    p.bias_dtype = a.bias.dtype;
  }
  p.dropout_p = a.dropout_p;
  p.dropout_scale = dropout_keep_scale(a.dropout_p);
  p.dropout_threshold = dropout_threshold(a.dropout_p);
  p.dropout_seed = a.dropout_seed;
  p.dropout_offset = a.dropout_offset;
  p.block_mask = a.block_mask;
}

// Fills the forward parameter block; mask_row_bytes: dropout_mask_row_bytes of the (host) call.
inline void fill(ForwardParams& p, const ForwardArgs& a, int64_t nseq, int64_t mask_row_bytes) {
  fill_common(p, a, nseq);
  p.out = view(a.out);
  p.lse = a.lse;
  p.dropout_mask = a.dropout_mask;
  p.mask_row_bytes = mask_row_bytes;
  p.k_scale = a.kv_scales.k;
  p.v_scale = a.kv_scales.v;
  p.scale_granularity = a.kv_scales.granularity;
  p.scale_rows = a.k.seq;
}

// The longest query and key-row counts over the sequences of a validated host copy.
struct Extents {
  int64_t nseq = 0, max_q = 0, max_k_rows = 0, max_k = 0;  // max_k: visible keys (after seqlens_k)
};
inline Extents extents(const AttentionArgs& host) {
  Extents e;
  e.nseq = num_sequences(host);
  for (int64_t s = 0; s < e.nseq; ++s) {
    const Sequence seq = sequence(host, s);
    e.max_q = std::max(e.max_q, seq.mask.seqlen_q);
    e.max_k_rows = std::max(e.max_k_rows, seq.k_rows);
    e.max_k = std::max(e.max_k, seq.mask.seqlen_k);
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
  p.dsinks = a.dsinks;
  if (view_set(a.dbias)) {
    p.dbias = view(a.dbias);
    p.dbias_dtype = a.dbias.dtype;
    p.dbias_batch = a.dbias.batch;
    p.dbias_seq = a.dbias.seq;
    p.dbias_heads = a.dbias.heads;
    p.dbias_dim = a.dbias.dim;
  }
}

// Returns the x blocks of the dbias kernel's grid (key blocks × dbias rows; 0 without dbias).
inline int64_t dbias_blocks(const BackwardParams& p) {
  return (p.dbias_dim + kThreadsPerBlock - 1) / kThreadsPerBlock * p.dbias_seq;
}

// ---- KV-cache append (docs/semantics.md, "Appending to a KV cache") ------------------------------

// Fills the append kernels' parameters of a validated call (pointers from `a`); q_rot: scratch for
// the rotated queries, contiguous [B, Nq, Hq, d] (used only with rotary tables).
inline void fill(AppendParams& p, const ForwardArgs& a, void* q_rot) {
  const KvAppend& ap = a.append;
  p.k_cache = view(ap.k_cache);
  p.v_cache = view(ap.v_cache);
  p.k_new = view(ap.k_new);
  p.v_new = view(ap.v_new);
  p.q = view(a.q);
  if (ap.rotary_cos) p.q_rot = view(bshd(q_rot, a.q.dtype, a.q.batch, a.q.seq, a.q.heads, a.q.dim));
  p.seqlens_k = a.seqlens_k;
  p.new_rows = ap.k_new.seq;
  p.block_table = a.block_table;
  p.block_table_stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
  p.page_size = a.block_table ? ap.k_cache.seq : 0;
  p.rotary_cos = ap.rotary_cos;
  p.rotary_sin = ap.rotary_sin;
  p.rotary_dim = static_cast<int>(ap.rotary_dim);
  p.interleaved = ap.rotary_interleaved;
  p.dim = static_cast<int>(a.q.dim);
  p.dim_v = static_cast<int>(ap.v_cache.dim);
}

// Returns the bytes of the rotated-query scratch of a call (0 without rotary tables).
inline size_t rotated_q_bytes(const ForwardArgs& a) {
  if (!a.append.rotary_cos) return 0;
  return static_cast<size_t>(a.q.batch * a.q.seq * a.q.heads * a.q.dim) * dtype_size(a.q.dtype);
}

// ---- Split-KV -----------------------------------------------------------------------------------

constexpr int64_t kMaxSplits = 128;

// Returns the split count of a forward call whose kernel has Br-row query blocks and Bc-key tiles:
// num_splits when given (at most one split per key tile of the longest sequence, and kMaxSplits),
// else chosen from the shape alone: enough splits to give about 256 blocks, keeping at least 4 key
// tiles per split.
inline int split_count(const ForwardArgs& a, const Extents& e, int64_t br, int64_t bc) {
  const int64_t tiles = std::max<int64_t>(1, (e.max_k + bc - 1) / bc);
  int64_t n = a.num_splits;
  if (n == 0) {
    const int64_t blocks = std::max<int64_t>(1, (e.max_q + br - 1) / br * a.q.heads * e.nseq);
    n = std::min((256 + blocks - 1) / blocks, tiles / 4);
  }
  return static_cast<int>(std::clamp<int64_t>(std::min(n, tiles), 1, kMaxSplits));
}

// Returns the fp32 elements of the split-KV partials of a call with `splits` splits (0 unsplit):
// O [splits][B·Hq·Nq][dv] followed by LSE [splits][B·Hq·Nq].
inline size_t partial_count(const AttentionArgs& a, int splits) {
  if (splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(a.q.batch * a.q.heads * a.q.seq);
  return static_cast<size_t>(splits) * rows * static_cast<size_t>(a.v.dim + 1);
}

// Points p at the partials in `scratch` (partial_count elements) for `splits` splits.
inline void set_partials(ForwardParams& p, const AttentionArgs& a, int splits, float* scratch) {
  p.num_splits = splits;
  if (splits <= 1) return;
  p.part_rows = a.q.batch * a.q.heads * a.q.seq;
  p.o_part = scratch;
  p.lse_part = scratch + static_cast<size_t>(splits) * static_cast<size_t>(p.part_rows) * static_cast<size_t>(a.v.dim);
}

// ---- The sm_90a forward (forward_sm90_kernel.cuh) ---------------------------------------------------

// The TMA map of a [batch, seq, heads, dim] view of 16-bit elements: dimensions (dim, seq, heads,
// batch), boxes of 64 columns x `rows` rows x 1 x 1, 128-byte swizzle. A dimension of size 1 takes
// any stride: 16 bytes where the view's is not one TMA accepts.
inline sm90::TensorMapSpec sm90_view_map(const ConstTensor& t, uint32_t rows) {
  sm90::TensorMapSpec s;
  s.global = t.data;
  s.rank = 4;
  const int64_t dims[4] = {t.dim, t.seq, t.heads, t.batch}, strides[4] = {1, t.stride_seq, t.stride_head, t.stride_batch};
  for (int i = 0; i < 4; ++i) {
    s.dims[i] = static_cast<uint64_t>(dims[i]);
    const int64_t bytes = 2 * strides[i];
    s.strides[i] = dims[i] == 1 && (bytes <= 0 || bytes % 16 != 0) ? 16 : static_cast<uint64_t>(bytes);
  }
  s.box[0] = 64, s.box[1] = rows, s.box[2] = 1, s.box[3] = 1;
  s.swizzle = sm90::Swizzle::b128;
  return s;
}

// Returns whether a call's sequences have their own extents (varlen, key lengths): the sm_90a
// forward then reads each through maps of its own rows.
inline bool sm90_per_sequence(const AttentionArgs& a) { return a.cu_seqlens_q || a.seqlens_k; }

// Returns the specs of the per-sequence maps of a call (sm90_per_sequence; empty otherwise):
// [sequence][q, k, v], each over the sequence's rows alone (its visible keys for k and v) from
// `a`'s pointers, the lengths read from `host`'s arrays. An empty sequence gets one row (never read).
inline std::vector<sm90::TensorMapSpec> sm90_sequence_specs(const AttentionArgs& a, const AttentionArgs& host) {
  std::vector<sm90::TensorMapSpec> specs;
  if (!sm90_per_sequence(a)) return specs;
  const int64_t nseq = num_sequences(host);
  auto rows_of = [](const ConstTensor& t, int64_t batch, int64_t first, int64_t count) {
    ConstTensor r = t;
    r.data = static_cast<const unsigned char*>(t.data) + 2 * (batch * t.stride_batch + first * t.stride_seq);
    r.batch = 1;
    r.seq = count > 0 ? count : 1;
    return r;
  };
  for (int64_t s = 0; s < nseq; ++s) {
    const Sequence seq = sequence(host, s);
    specs.push_back(sm90_view_map(rows_of(a.q, seq.batch, seq.q_start, seq.mask.seqlen_q), 128));
    specs.push_back(sm90_view_map(rows_of(a.k, seq.batch, seq.k_start, seq.mask.seqlen_k), 128));
    specs.push_back(sm90_view_map(rows_of(a.v, seq.batch, seq.k_start, seq.mask.seqlen_k), 128));
  }
  return specs;
}

// The tensor maps of a call the sm_90a forward takes: the whole tensors' (q, k, v) or, when the
// sequences have their own extents, [sequence][q, k, v] (sm90_sequence_specs).
struct Sm90MapSpecs {
  sm90::TensorMapSpec q, k, v;
  std::vector<sm90::TensorMapSpec> sequences;
};

// Returns whether the sm_90a forward takes a validated call (`a`: the pointers its kernel reads,
// `host`: the same call with host-readable arrays), and then its maps in `specs`: head dims
// d = dv = 64 or 128, no paging (rows past a sequence are then outside the tensor or its own map,
// which TMA reads as zeros), no block mask and no dropout (its code spilled in the d = 64 variant),
// and q, k, v views (each sequence's, with varlen or key lengths) that TMA can map.
inline bool sm90_forward_specs(const ForwardArgs& a, const ForwardArgs& host, Sm90MapSpecs& specs) {
  const bool dims = a.q.dim == a.v.dim && (a.q.dim == 64 || a.q.dim == 128);
  const bool options = !a.block_table && !a.block_mask.used() && a.dropout_p == 0 && !a.append.used();
  if (!dims || !options) return false;
  specs.q = sm90_view_map(a.q, 128), specs.k = sm90_view_map(a.k, 128), specs.v = sm90_view_map(a.v, 128);
  specs.sequences = sm90_sequence_specs(a, host);
  for (const sm90::TensorMapSpec* s : {&specs.q, &specs.k, &specs.v})
    if (!sm90::tensor_map_problem(*s).empty()) return false;
  for (const sm90::TensorMapSpec& s : specs.sequences)
    if (!sm90::tensor_map_problem(s).empty()) return false;
  return true;
}

// Returns the encoded maps of specs.
inline std::vector<CUtensorMap> encode_tensor_maps(const std::vector<sm90::TensorMapSpec>& specs) {
  std::vector<CUtensorMap> maps(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) sm90::encode_tensor_map(&maps[i], specs[i]);
  return maps;
}

// Returns the sm_90a forward's parameters of a supported call: p (filled, its split-KV partials set)
// and, when the call has no per-sequence maps, the whole tensors' (seq_maps is the caller's).
inline Sm90ForwardParams sm90_forward_params(const ForwardParams& p, const Sm90MapSpecs& specs) {
  Sm90ForwardParams sp;
  sp.p = p;
  if (specs.sequences.empty()) {
    sm90::encode_tensor_map(&sp.q_map, specs.q);
    sm90::encode_tensor_map(&sp.k_map, specs.k);
    sm90::encode_tensor_map(&sp.v_map, specs.v);
  }
  return sp;
}

// Returns the element count of the D scratch (laid out like lse) and of the fp32 dQ accumulator:
// its rows [B or 1, q_seq, heads_q, dim], then one sink row of dim floats (BackwardParams::dq_sink).
inline size_t dot_count(const AttentionArgs& a) { return static_cast<size_t>(a.q.batch * a.q.heads * a.q.seq); }
inline size_t dq_accum_rows_count(const AttentionArgs& a) {
  return static_cast<size_t>(a.q.batch * a.q.seq * a.q.heads * a.q.dim);
}
inline size_t dq_accum_count(const AttentionArgs& a) { return dq_accum_rows_count(a) + static_cast<size_t>(a.q.dim); }

}  // namespace flashattn::gpu::detail
