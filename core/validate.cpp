// Argument validation shared by every backend (see flashattn/validate.hpp).
#include "flashattn/validate.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"
#include "views.hpp"

namespace flashattn {
namespace {

using namespace detail;

void check_same_shape(const ConstTensor& t, const std::string& name, const ConstTensor& ref, const std::string& ref_name) {
  if (t.batch != ref.batch || t.seq != ref.seq || t.heads != ref.heads || t.dim != ref.dim)
    fail(name, " shape [", t.batch, ", ", t.seq, ", ", t.heads, ", ", t.dim, "] must equal ", ref_name, " shape [",
         ref.batch, ", ", ref.seq, ", ", ref.heads, ", ", ref.dim, "]");
  if (t.dtype != ref.dtype)
    fail(name, ".dtype (", dtype_name(t.dtype), ") must equal ", ref_name, ".dtype (", dtype_name(ref.dtype), ")");
}

// Checks cu_seqlens contents: starts at 0, non-decreasing, ends within `rows`, lengths within max.
void check_cu_seqlens(const int32_t* cu, int64_t n, int64_t rows, int64_t max_len, const char* name,
                      const char* rows_name, const char* max_name) {
  if (cu[0] != 0) fail(name, "[0] (", cu[0], ") must be 0");
  for (int64_t s = 0; s < n; ++s) {
    const int64_t len = int64_t{cu[s + 1]} - cu[s];
    if (len < 0) fail(name, " must be non-decreasing: ", name, "[", s + 1, "] (", cu[s + 1], ") < ", name, "[", s, "] (", cu[s], ")");
    if (max_len > 0 && len > max_len)
      fail(name, ": sequence ", s, " has length ", len, " > ", max_name, " (", max_len, ")");
  }
  if (cu[n] > rows) fail(name, "[", n, "] (", cu[n], ") exceeds ", rows_name, " (", rows, ")");
}

// Checks that t has the shape [batch, seq, heads, dim] and the dtype of q.
void check_shape(const ConstTensor& t, const std::string& name, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                 const std::string& expected, DType dtype) {
  if (t.batch != batch || t.seq != seq || t.heads != heads || t.dim != dim)
    fail(name, " shape [", t.batch, ", ", t.seq, ", ", t.heads, ", ", t.dim, "] must be ", expected, " [", batch, ", ",
         seq, ", ", heads, ", ", dim, "]");
  if (t.dtype != dtype) fail(name, ".dtype (", dtype_name(t.dtype), ") must equal q.dtype (", dtype_name(dtype), ")");
}

// Checks the forward's output view `out` (written by the forward, read by the backward) and the
// alignment of its log-sum-exp array. out is [B, Nq, Hq, dv] with dv = v.dim.
void check_out_and_lse(const AttentionArgs& a, const ConstTensor& out, const float* lse) {
  check_tensor(out, "out");
  check_shape(out, "out", a.q.batch, a.q.seq, a.q.heads, a.v.dim, "[B, Nq, Hq, v.dim] =", a.q.dtype);
  if (reinterpret_cast<uintptr_t>(lse) % alignof(float) != 0) fail("lse (", static_cast<const void*>(lse), ") is not 4-byte aligned");
}

// Checks the input views q, k, v on their own and against each other.
// k and v may be quantized (`quantized_ok`: a forward, over k/v or the caches), both of one quantized dtype.
void check_inputs(const AttentionArgs& a, bool quantized_ok = false) {
  check_tensor(a.q, "q");
  check_tensor(a.k, "k", quantized_ok);
  check_tensor(a.v, "v", quantized_ok);
  if (is_quantized(a.k.dtype) || is_quantized(a.v.dtype)) {
    if (a.v.dtype != a.k.dtype)
      fail("v.dtype (", dtype_name(a.v.dtype), ") must equal k.dtype (", dtype_name(a.k.dtype), ") when K/V are quantized");
  } else {
    if (a.k.dtype != a.q.dtype) fail("k.dtype (", dtype_name(a.k.dtype), ") must equal q.dtype (", dtype_name(a.q.dtype), ")");
    if (a.v.dtype != a.q.dtype) fail("v.dtype (", dtype_name(a.v.dtype), ") must equal q.dtype (", dtype_name(a.q.dtype), ")");
  }
  if (a.k.dim != a.q.dim) fail("k.dim (", a.k.dim, ") must equal q.dim (", a.q.dim, ")");
  // Paged K/V: k and v are page pools, their batch is the number of pages, not B.
  if (a.k.batch != a.q.batch && !a.block_table)
    fail("k.batch (", a.k.batch, ") must equal q.batch (", a.q.batch, ")");
  if (a.v.batch != a.k.batch || a.v.seq != a.k.seq || a.v.heads != a.k.heads)
    fail("v shape [", a.v.batch, ", ", a.v.seq, ", ", a.v.heads, ", ", a.v.dim, "] must equal k shape [", a.k.batch, ", ",
         a.k.seq, ", ", a.k.heads, ", ", a.k.dim, "] except in dim");
  if (a.q.heads % a.k.heads != 0) fail("k.heads (", a.k.heads, ") must divide q.heads (", a.q.heads, ")");
}

// Returns the keys sequence s can hold before seqlens_k: its page capacity with a block table, its
// packed rows with varlen, else k.seq.
int64_t key_capacity(const AttentionArgs& a, int64_t s) {
  if (a.block_table) return a.block_table_pages * a.k.seq;  // checked for overflow in check_paged
  return a.cu_seqlens_k ? int64_t{a.cu_seqlens_k[s + 1]} - a.cu_seqlens_k[s] : a.k.seq;
}

// Checks the block table (paged K/V) and that every entry a sequence reads lies in [0, num_pages).
// `appended` rows (an append) are written past seqlens_k and need their pages too.
void check_paged(const AttentionArgs& a, int64_t appended) {
  if (!a.block_table) {
    if (a.block_table_pages != 0) fail("block_table_pages (", a.block_table_pages, ") is set but block_table is null");
    if (a.block_table_stride != 0) fail("block_table_stride (", a.block_table_stride, ") is set but block_table is null");
    return;
  }
  if (a.cu_seqlens_q || a.cu_seqlens_k) fail("block_table cannot be combined with varlen (cu_seqlens_q/k set)");
  if (a.block_table_pages < 0 || a.block_table_pages >= kMaxDim)
    fail("block_table_pages (", a.block_table_pages, ") must be in [0, 2^31)");
  if (a.block_table_stride < 0 || (a.block_table_stride != 0 && a.block_table_stride < a.block_table_pages))
    fail("block_table_stride (", a.block_table_stride, ") must be 0 or >= block_table_pages (", a.block_table_pages, ")");
  const int64_t page = a.k.seq, pages = a.k.batch;
  if (page < 1) fail("page size k.seq (", page, ") must be >= 1 with a block table");
  mul_checked(mul_checked(a.block_table_pages, page, "block_table_pages * page size"), 1, "capacity");
  const int64_t stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
  for (int64_t b = 0; b < a.q.batch; ++b) {
    const int64_t keys = (a.seqlens_k ? int64_t{a.seqlens_k[b]} : a.block_table_pages * page) + appended;
    const int64_t used = std::min((keys + page - 1) / page, a.block_table_pages);  // past capacity: failed elsewhere
    for (int64_t c = 0; c < used; ++c) {
      const int64_t e = a.block_table[b * stride + c];
      if (e < 0 || e >= pages)
        fail("block_table[", b * stride + c, "] (", e, ", page ", c, " of sequence ", b, ") must be in [0, ", pages,
             ") (k.batch, the number of pages)");
    }
  }
}

// The names of the scale arrays in messages: kv_scales.k/.v, or an append's written ones.
const char* const* scale_names(bool appended) {
  static const char* const given[2] = {"kv_scales.k", "kv_scales.v"};
  static const char* const written[2] = {"append.k_scales", "append.v_scales"};
  return appended ? written : given;
}

// Checks kv_scales (docs/semantics.md, "Quantized K/V"): set exactly when k and v are quantized;
// then every scale the call reads (by the granularity: the one, one per key/value head, or one per
// row of each sequence's keys, found through the block table) finite and > 0. nseq: sequences.
// `appended`: the scales are an append's append.k_scales/.v_scales (named so in messages).
void check_kv_scales(const AttentionArgs& a, int64_t nseq, bool appended) {
  const KvScales& q = a.kv_scales;
  if (!is_quantized(a.k.dtype)) {
    if (q.k || q.v) fail("kv_scales.", q.k ? "k" : "v", " is set but k.dtype (", dtype_name(a.k.dtype), ") is not quantized");
    return;
  }
  if (!q.k || !q.v) fail("kv_scales.", q.k ? "v" : "k", " is null: quantized K/V (", dtype_name(a.k.dtype), ") need their scales");
  if (q.granularity != ScaleGranularity::tensor && q.granularity != ScaleGranularity::head &&
      q.granularity != ScaleGranularity::token)
    fail("kv_scales.granularity (", static_cast<int>(q.granularity), ") is not a ScaleGranularity (tensor, head, token)");
  const char* const* names = scale_names(appended);
  for (const auto& array : {std::pair<const float*, const char*>{q.k, names[0]}, {q.v, names[1]}}) {
    const float* scales = array.first;  // named, not a structured binding: the lambda below captures it
    const char* name = array.second;
    if (reinterpret_cast<uintptr_t>(scales) % alignof(float) != 0)
      fail(name, " (", static_cast<const void*>(scales), ") is not 4-byte aligned");
    auto check = [&](int64_t i) {
      if (!(std::isfinite(scales[i]) && scales[i] > 0)) fail(name, "[", i, "] (", scales[i], ") must be finite and > 0");
    };
    if (q.granularity == ScaleGranularity::tensor) {
      check(0);
    } else if (q.granularity == ScaleGranularity::head) {
      for (int64_t h = 0; h < a.k.heads; ++h) check(h);
    } else {
      for (int64_t s = 0; s < nseq; ++s) {
        const Sequence seq = sequence(a, s);
        for (int64_t j = 0; j < seq.mask.seqlen_k; ++j) {
          const KeyRow at = key_row(a, seq, j);
          for (int64_t h = 0; h < a.k.heads; ++h)
            check(kv_scale_index(ScaleGranularity::token, a.k.seq, a.k.heads, at.batch, at.row, h));
        }
      }
    }
  }
}

// Returns the number of floats of each of kv_scales.k and .v (0 when K/V are not quantized).
int64_t kv_scale_count(const AttentionArgs& a) {
  if (!is_quantized(a.k.dtype)) return 0;
  switch (a.kv_scales.granularity) {
    case ScaleGranularity::tensor: return 1;
    case ScaleGranularity::head: return a.k.heads;
    default: return mul_checked(mul_checked(a.k.batch, a.k.seq, "kv_scales"), a.k.heads, "kv_scales");
  }
}

// Checks the attention sinks: finite.
void check_sinks(const AttentionArgs& a) {
  if (!a.sinks) return;
  for (int64_t h = 0; h < a.q.heads; ++h)
    if (!std::isfinite(a.sinks[h])) fail("sinks[", h, "] (", a.sinks[h], ") must be finite");
}

// Checks the additive bias view (docs/semantics.md, "Additive bias") of a call with `nseq`
// sequences, its sequences (cu_seqlens) already checked.
void check_bias(const AttentionArgs& a, int64_t nseq) {
  if (!has_bias(a)) return;
  const ConstTensor& b = a.bias;
  check_fields(b, "bias");
  if (b.batch != 1 && b.batch != nseq)
    fail("bias.batch (", b.batch, ") must be 1 or the number of sequences (", nseq, ")");
  if (b.heads != 1 && b.heads != a.q.heads) fail("bias.heads (", b.heads, ") must be 1 or q.heads (", a.q.heads, ")");
  const int64_t keys = key_columns(a);
  if (a.cu_seqlens_q) {
    int64_t rows = 0;
    for (int64_t s = 0; s < nseq; ++s) rows = std::max<int64_t>(rows, a.cu_seqlens_q[s + 1] - a.cu_seqlens_q[s]);
    if (b.seq != 1 && b.seq < rows)
      fail("bias.seq (", b.seq, ") must be 1 or at least the longest sequence's query rows (", rows, ") with varlen");
    if (b.dim < keys) fail("bias.dim (", b.dim, ") must be at least the longest sequence's keys (", keys, ") with varlen");
  } else {
    if (b.seq != 1 && b.seq != a.q.seq) fail("bias.seq (", b.seq, ") must be 1 or q.seq (", a.q.seq, ")");
    if (b.dim != keys) fail("bias.dim (", b.dim, ") must equal the keys of a sequence (", keys, ")");
  }
  check_pointer(b, "bias");  // size-1 dimensions add nothing to its extent, as in bias_view
}

// Returns the longest sequence's query rows of a call with `nseq` sequences (cu_seqlens checked).
int64_t longest_rows(const AttentionArgs& a, int64_t nseq) {
  if (!a.cu_seqlens_q) return a.q.seq;
  int64_t rows = 0;
  for (int64_t s = 0; s < nseq; ++s) rows = std::max<int64_t>(rows, a.cu_seqlens_q[s + 1] - a.cu_seqlens_q[s]);
  return rows;
}

// Returns the bytes the element bits of a block mask span (0 without bits), failing on overflow.
int64_t bitmask_bytes(const BitMask& b, int64_t keys) {
  if (!b.data) return 0;
  int64_t n = (keys + 7) / 8;
  const int64_t sizes[3] = {b.batch, b.seq, b.heads}, strides[3] = {b.stride_batch, b.stride_seq, b.stride_head};
  for (int t = 0; t < 3; ++t)
    if (sizes[t] > 1) n = add_checked(n, mul_checked(sizes[t] - 1, strides[t], "block_mask.bits extent"), "block_mask.bits extent");
  return n;
}

// Returns the entries of each of a block mask's index arrays (lists x max_blocks), failing on overflow.
int64_t block_mask_entries(const BlockMask& m) {
  return mul_checked(mul_checked(mul_checked(m.batch, m.heads, "block_mask lists"), m.q_blocks, "block_mask lists"),
                     m.max_blocks, "block_mask index entries");
}

// Checks one kind of block list (docs/semantics.md, "Block-sparse masks"): counts in
// [0, max_blocks], entries strictly increasing in [0, key_blocks).
void check_block_list(const BlockMask& m, const int32_t* count, const int32_t* index, const char* name,
                      int64_t key_blocks) {
  if ((count == nullptr) != (index == nullptr))
    fail("block_mask.", name, "_count and block_mask.", name, "_index must be given together (got only ",
         count ? "the count" : "the index", ")");
  if (!count) return;
  for (int64_t s = 0; s < m.batch; ++s)
    for (int64_t h = 0; h < m.heads; ++h)
      for (int64_t qb = 0; qb < m.q_blocks; ++qb) {
        const int64_t l = (s * m.heads + h) * m.q_blocks + qb;
        if (count[l] < 0 || count[l] > m.max_blocks)
          fail("block_mask.", name, "_count[", l, "] (", count[l], ") must be in [0, max_blocks = ", m.max_blocks,
               "] (list s=", s, " h=", h, " qb=", qb, ")");
        const int32_t* e = index + l * m.max_blocks;
        for (int32_t t = 0; t < count[l]; ++t) {
          if (e[t] < 0 || e[t] >= key_blocks)
            fail("block_mask.", name, "_index[", l * m.max_blocks + t, "] (", e[t], ") must be in [0, ", key_blocks,
                 ") (entry ", t, " of list s=", s, " h=", h, " qb=", qb, ": ", key_blocks, " key blocks of ", m.block_k,
                 ")");
          if (t > 0 && e[t] <= e[t - 1])
            fail("block_mask.", name, "_index[", l * m.max_blocks + t, "] (", e[t], ") must be greater than the entry before it (",
                 e[t - 1], "): lists are strictly increasing (list s=", s, " h=", h, " qb=", qb, ")");
        }
      }
}

// Checks the block-sparse mask of a call with `nseq` sequences (docs/semantics.md, "Block-sparse
// masks"), its sequences already checked: block sizes, list geometry and contents (sorted, in
// range, no block both full and partial), and the element bits' view. Reads every list entry.
void check_block_mask(const AttentionArgs& a, int64_t nseq) {
  const BlockMask& m = a.block_mask;
  if (!m.used()) return;
  if (m.block_q < 1 || m.block_q >= kMaxDim) fail("block_mask.block_q (", m.block_q, ") must be in [1, 2^31)");
  if (m.block_k < 1 || m.block_k >= kMaxDim) fail("block_mask.block_k (", m.block_k, ") must be in [1, 2^31)");
  if (m.batch != 1 && m.batch != nseq)
    fail("block_mask.batch (", m.batch, ") must be 1 or the number of sequences (", nseq, ")");
  if (m.heads != 1 && m.heads != a.q.heads)
    fail("block_mask.heads (", m.heads, ") must be 1 or q.heads (", a.q.heads, ")");
  const int64_t rows = longest_rows(a, nseq), keys = key_columns(a);
  const int64_t need = (rows + m.block_q - 1) / m.block_q, key_blocks = (keys + m.block_k - 1) / m.block_k;
  if (m.q_blocks < need || m.q_blocks >= kMaxDim)
    fail("block_mask.q_blocks (", m.q_blocks, ") must be at least ceil(", rows, " query rows / block_q ", m.block_q,
         ") = ", need, " and below 2^31");
  if (m.max_blocks < 0 || m.max_blocks >= kMaxDim) fail("block_mask.max_blocks (", m.max_blocks, ") must be in [0, 2^31)");
  mul_checked(block_mask_entries(m), 4, "block_mask index bytes");
  check_block_list(m, m.full_count, m.full_index, "full", key_blocks);
  check_block_list(m, m.partial_count, m.partial_index, "partial", key_blocks);
  if (m.full_count && m.partial_count) {
    for (int64_t l = 0; l < m.batch * m.heads * m.q_blocks; ++l) {
      const int32_t *f = m.full_index + l * m.max_blocks, *p = m.partial_index + l * m.max_blocks;
      for (int32_t x = 0, y = 0; x < m.full_count[l] && y < m.partial_count[l];) {
        if (f[x] == p[y]) fail("block_mask: key block ", f[x], " is listed both full and partial (list ", l, ")");
        if (f[x] < p[y]) ++x; else ++y;
      }
    }
  }
  const BitMask& b = m.bits;
  if (!bitmask_set(b)) return;
  if (b.batch != 1 && b.batch != nseq)
    fail("block_mask.bits.batch (", b.batch, ") must be 1 or the number of sequences (", nseq, ")");
  if (b.heads != 1 && b.heads != a.q.heads)
    fail("block_mask.bits.heads (", b.heads, ") must be 1 or q.heads (", a.q.heads, ")");
  if (a.cu_seqlens_q ? (b.seq != 1 && b.seq < rows) : (b.seq != 1 && b.seq != a.q.seq))
    fail("block_mask.bits.seq (", b.seq, ") must be 1 or ", a.cu_seqlens_q ? "at least the longest sequence's query rows (" : "q.seq (",
         rows, ")");
  if (b.stride_batch < 0 || b.stride_seq < 0 || b.stride_head < 0)
    fail("block_mask.bits strides (", b.stride_batch, ", ", b.stride_seq, ", ", b.stride_head, ") must not be negative");
  if (!b.data && nseq > 0 && rows > 0 && keys > 0) fail("block_mask.bits.data is null but its sizes or strides are set");
  bitmask_bytes(b, keys);  // fails on an extent that overflows
}

// Checks the options: scale, softcap, window, varlen and key lengths, ALiBi (host arrays). With an
// append, seqlens_k counts the rows before it and the `appended` rows must fit too.
void check_options(const AttentionArgs& a, int64_t appended = 0, bool written_scales = false) {
  if (!a.block_table) check_paged(a, 0);  // block-table fields set without a table
  if (a.scale && !std::isfinite(*a.scale)) fail("scale (", *a.scale, ") must be finite (leave it empty for 1/sqrt(d))");
  if (!std::isfinite(a.softcap) || a.softcap < 0) fail("softcap (", a.softcap, ") must be finite and >= 0 (0: off)");
  if (a.window_left < -1) fail("window_left (", a.window_left, ") must be >= -1 (-1: unbounded)");
  if (a.window_right < -1) fail("window_right (", a.window_right, ") must be >= -1 (-1: unbounded)");
  if (a.diagonal_offset <= -(int64_t{1} << 31) || a.diagonal_offset >= (int64_t{1} << 31))
    fail("diagonal_offset (", a.diagonal_offset, ") must lie in (-2^31, 2^31)");

  // Sequences.
  int64_t nseq = a.q.batch;
  if ((a.cu_seqlens_q == nullptr) != (a.cu_seqlens_k == nullptr))
    fail("cu_seqlens_q and cu_seqlens_k must be given together (got ", a.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k", " only)");
  if (a.max_seqlen_q < 0) fail("max_seqlen_q (", a.max_seqlen_q, ") must not be negative");
  if (a.max_seqlen_k < 0) fail("max_seqlen_k (", a.max_seqlen_k, ") must not be negative");
  if (a.block_table && (a.cu_seqlens_q || a.cu_seqlens_k))
    fail("block_table cannot be combined with varlen (cu_seqlens_q/k set)");
  if (a.cu_seqlens_q) {
    if (a.q.batch != 1 || a.k.batch != 1)
      fail("varlen (cu_seqlens_q set) needs q.batch and k.batch 1 (got ", a.q.batch, ", ", a.k.batch, ")");
    if (a.varlen_batch < 0 || a.varlen_batch >= kMaxDim) fail("varlen_batch (", a.varlen_batch, ") must be in [0, 2^31)");
    nseq = a.varlen_batch;
    check_cu_seqlens(a.cu_seqlens_q, nseq, a.q.seq, a.max_seqlen_q, "cu_seqlens_q", "q.seq", "max_seqlen_q");
    check_cu_seqlens(a.cu_seqlens_k, nseq, a.k.seq, a.max_seqlen_k, "cu_seqlens_k", "k.seq", "max_seqlen_k");
  } else if (a.varlen_batch != 0) {
    fail("varlen_batch (", a.varlen_batch, ") is set but cu_seqlens_q is null");
  }
  if (a.block_table && (a.block_table_pages < 0 || a.block_table_pages >= kMaxDim || a.k.seq < 1))
    check_paged(a, appended);  // reports the bad table geometry before the capacity is used below
  if (a.seqlens_k) {
    for (int64_t s = 0; s < nseq; ++s) {
      const int64_t rows = key_capacity(a, s);
      if (appended > 0) {
        if (a.seqlens_k[s] < 0 || a.seqlens_k[s] + appended > rows)
          fail("seqlens_k[", s, "] (", a.seqlens_k[s], ") + append.k_new.seq (", appended,
               ") must be in [0, the cache capacity ", rows, "] (sequence ", s, ")");
      } else if (a.seqlens_k[s] < 0 || a.seqlens_k[s] > rows) {
        fail("seqlens_k[", s, "] (", a.seqlens_k[s], ") must be in [0, ", rows, "] (the keys of sequence ", s, ")");
      }
    }
  }
  check_paged(a, appended);
  check_kv_scales(a, nseq, written_scales);
  check_sinks(a);
  check_bias(a, nseq);
  check_block_mask(a, nseq);
  if (!(a.dropout_p >= 0.0f && a.dropout_p < 1.0f)) fail("dropout_p (", a.dropout_p, ") must be in [0, 1)");
  if (a.alibi_slopes) {
    if (a.alibi_batch_stride < 0) fail("alibi_batch_stride (", a.alibi_batch_stride, ") must not be negative");
    if (a.alibi_batch_stride != 0 && a.alibi_batch_stride < a.q.heads)
      fail("alibi_batch_stride (", a.alibi_batch_stride, ") must be 0 or >= q.heads (", a.q.heads, ")");
    for (int64_t s = 0; s < (a.alibi_batch_stride ? nseq : 1); ++s)
      for (int64_t h = 0; h < a.q.heads; ++h)
        if (!std::isfinite(a.alibi_slopes[s * a.alibi_batch_stride + h]))
          fail("alibi_slopes[", s * a.alibi_batch_stride + h, "] (", a.alibi_slopes[s * a.alibi_batch_stride + h], ") must be finite");
  } else if (a.alibi_batch_stride != 0) {
    fail("alibi_batch_stride (", a.alibi_batch_stride, ") is set but alibi_slopes is null");
  }
}

// Returns the bytes of the lse array [B, Hq, Nq] (fp32), failing on int64 overflow.
int64_t lse_bytes(const AttentionArgs& a) {
  return mul_checked(mul_checked(mul_checked(a.q.batch, a.q.heads, "lse"), a.q.seq, "lse"), 4, "lse bytes");
}

// Returns whether a view is left at its default (empty, no data).
bool is_empty_view(const ConstTensor& t) {
  return t.data == nullptr && t.batch == 0 && t.seq == 0 && t.heads == 0 && t.dim == 0;
}

// Bytes of the side arrays a call reads (tables, sinks), for the overlap checks of its outputs.
// `written_scales`: kv_scales are an append's append.k_scales/.v_scales (named so).
std::vector<std::pair<Span, const char*>> side_arrays(const AttentionArgs& a, bool written_scales = false) {
  std::vector<std::pair<Span, const char*>> r;
  const int64_t nseq = a.cu_seqlens_q ? a.varlen_batch : a.q.batch;
  if (a.sinks) r.push_back({span_of(a.sinks, a.q.heads * 4), "sinks"});
  if (has_bias(a)) r.push_back({span_of(bias_view(a), "bias"), "bias"});
  const BlockMask& m = a.block_mask;
  if (m.used()) {
    const int64_t lists = m.batch * m.heads * m.q_blocks, entries = block_mask_entries(m);
    if (m.full_count) r.push_back({span_of(m.full_count, lists * 4), "block_mask.full_count"});
    if (m.full_index) r.push_back({span_of(m.full_index, entries * 4), "block_mask.full_index"});
    if (m.partial_count) r.push_back({span_of(m.partial_count, lists * 4), "block_mask.partial_count"});
    if (m.partial_index) r.push_back({span_of(m.partial_index, entries * 4), "block_mask.partial_index"});
    if (m.bits.data) r.push_back({span_of(m.bits.data, bitmask_bytes(m.bits, key_columns(a))), "block_mask.bits"});
  }
  if (a.seqlens_k) r.push_back({span_of(a.seqlens_k, nseq * 4), "seqlens_k"});
  if (const int64_t n = kv_scale_count(a); n > 0) {
    const char* const* names = scale_names(written_scales);
    r.push_back({span_of(a.kv_scales.k, mul_checked(n, 4, "kv_scales bytes")), names[0]});
    r.push_back({span_of(a.kv_scales.v, mul_checked(n, 4, "kv_scales bytes")), names[1]});
  }
  if (a.block_table && a.q.batch > 0) {
    const int64_t stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
    const int64_t n = add_checked(mul_checked(a.q.batch - 1, stride, "block_table size"), a.block_table_pages, "block_table size");
    r.push_back({span_of(a.block_table, mul_checked(n, 4, "block_table bytes")), "block_table"});
  }
  return r;
}

// An i8 cache has no NaN (docs/semantics.md, "Appending to a quantized cache"): the new rows'
// elements and the rotary entries they are rotated with must be finite (then no NaN can arise).
void check_i8_sources(const ForwardArgs& a) {
  const KvAppend& ap = a.append;
  for (const auto& nv : {std::pair<const ConstTensor*, const char*>{&ap.k_new, "append.k_new"}, {&ap.v_new, "append.v_new"}}) {
    const ConstTensor& t = *nv.first;
    for (int64_t b = 0; b < t.batch; ++b)
      for (int64_t r = 0; r < t.seq; ++r)
        for (int64_t h = 0; h < t.heads; ++h)
          for (int64_t x = 0; x < t.dim; ++x)
            if (const float e = load_as_float(t.data, t.dtype, t.offset(b, r, h) + x); !std::isfinite(e))
              fail(nv.second, "[", b, ", ", r, ", ", h, ", ", x, "] (", e, ") is not finite: an i8 cache cannot hold it");
  }
  if (!ap.rotary_cos) return;
  const int64_t half = ap.rotary_dim / 2;
  for (int64_t b = 0; b < a.q.batch; ++b)
    for (int64_t t = 0; t < ap.k_new.seq; ++t)
      for (int64_t r = 0; r < half; ++r) {
        const int64_t i = (int64_t{a.seqlens_k[b]} + t) * half + r;
        for (const auto& tab : {std::pair<const float*, const char*>{ap.rotary_cos, "append.rotary_cos"}, {ap.rotary_sin, "append.rotary_sin"}})
          if (!std::isfinite(tab.first[i]))
            fail(tab.second, "[", i, "] (", tab.first[i], ") is not finite: it rotates a new row of an i8 cache, which cannot hold a NaN");
      }
}

// Arranges the scales of an append into quantized caches (docs/semantics.md, "Appending to a
// quantized cache") in `eff`, the call over the caches: at token granularity the caches' writable
// scale arrays append.k_scales/.v_scales, at the others kv_scales as given. Checks which are set.
void arrange_append_scales(const ForwardArgs& a, AttentionArgs& eff) {
  const KvAppend& ap = a.append;
  const DType kt = ap.k_cache.dtype, vt = ap.v_cache.dtype;
  if ((is_quantized(kt) || is_quantized(vt)) && kt != vt)
    fail("append.v_cache.dtype (", dtype_name(vt), ") must equal append.k_cache.dtype (", dtype_name(kt),
         ") when the caches are quantized");
  const char* set = ap.k_scales ? "append.k_scales" : "append.v_scales";
  if (!is_quantized(kt)) {
    if (ap.k_scales || ap.v_scales) fail(set, " is set but append.k_cache.dtype (", dtype_name(kt), ") is not quantized");
    return;
  }
  if (a.kv_scales.granularity != ScaleGranularity::token) {
    if (ap.k_scales || ap.v_scales)
      fail(set, " is set but kv_scales.granularity is not token: only per-token scales are written by an append (the "
           "others are read from kv_scales.k/.v)");
    return;
  }
  if (a.kv_scales.k || a.kv_scales.v)
    fail("kv_scales.", a.kv_scales.k ? "k" : "v", " is set: an append into a quantized cache at token granularity takes "
         "the caches' scale arrays as append.k_scales/.v_scales (written for the new rows)");
  if (!ap.k_scales || !ap.v_scales)
    fail("append.", ap.k_scales ? "v_scales" : "k_scales", " is null: an append into a quantized cache at token "
         "granularity writes the new rows' scales there");
  eff.kv_scales.k = ap.k_scales;
  eff.kv_scales.v = ap.v_scales;
}

// Checks the append of a forward call (docs/semantics.md, "Appending to a KV cache"): `eff` is the
// call with k, v replaced by the caches. Writes nothing.
void check_append(const ForwardArgs& a, const AttentionArgs& eff) {
  const KvAppend& ap = a.append;
  if (!is_empty_view(a.k)) fail("k must be left empty when append is used (the call attends over append.k_cache)");
  if (!is_empty_view(a.v)) fail("v must be left empty when append is used (the call attends over append.v_cache)");
  if (a.cu_seqlens_q || a.cu_seqlens_k) fail("append cannot be combined with varlen (cu_seqlens_q/k set)");
  if (!a.seqlens_k && a.q.batch > 0) fail("append needs seqlens_k (each sequence's cache length before the call)");
  check_tensor(ap.k_new, "append.k_new");
  check_tensor(ap.v_new, "append.v_new");
  const int64_t n = ap.k_new.seq;
  check_shape(ap.k_new, "append.k_new", a.q.batch, n, eff.k.heads, a.q.dim, "[B, Nnew, Hk, d] =", a.q.dtype);
  check_shape(ap.v_new, "append.v_new", a.q.batch, n, eff.k.heads, eff.v.dim, "[B, Nnew, Hk, dv] =", a.q.dtype);
  check_no_self_overlap(ap.k_cache, "append.k_cache");
  check_no_self_overlap(ap.v_cache, "append.v_cache");
  // Rotary.
  if ((ap.rotary_cos == nullptr) != (ap.rotary_sin == nullptr))
    fail("append.rotary_cos and append.rotary_sin must be given together (got ", ap.rotary_cos ? "rotary_cos" : "rotary_sin",
         " only)");
  if (ap.rotary_cos) {
    if (ap.rotary_dim < 2 || ap.rotary_dim % 2 != 0 || ap.rotary_dim > a.q.dim)
      fail("append.rotary_dim (", ap.rotary_dim, ") must be even and in [2, d = ", a.q.dim, "]");
    if (ap.rotary_positions < 0 || ap.rotary_positions >= kMaxDim)
      fail("append.rotary_positions (", ap.rotary_positions, ") must be in [0, 2^31)");
    const int64_t rows = std::max(n, a.q.seq);
    for (int64_t b = 0; b < a.q.batch && rows > 0; ++b) {
      const int64_t last = int64_t{a.seqlens_k[b]} + rows - 1;
      if (last >= ap.rotary_positions)
        fail("append.rotary_positions (", ap.rotary_positions, ") must exceed position ", last, " (seqlens_k[", b, "] (",
             a.seqlens_k[b], ") + ", rows, " - 1, the last query or new key row of sequence ", b, ")");
    }
  } else if (ap.rotary_dim != 0 || ap.rotary_positions != 0 || ap.rotary_interleaved) {
    fail("append.rotary_dim (", ap.rotary_dim, "), rotary_positions (", ap.rotary_positions,
         ") or rotary_interleaved are set but append.rotary_cos is null");
  }
  // Two appended rows must not land on one cache row (pages shared between sequences).
  if (a.block_table && n > 0) {
    const int64_t page = eff.k.seq;
    const int64_t stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
    std::vector<std::pair<int64_t, int64_t>> rows;  // (pool row, sequence)
    for (int64_t b = 0; b < a.q.batch; ++b)
      for (int64_t t = 0; t < n; ++t) {
        const int64_t j = a.seqlens_k[b] + t;
        rows.push_back({a.block_table[b * stride + j / page] * page + j % page, b});
      }
    std::sort(rows.begin(), rows.end());
    for (size_t i = 1; i < rows.size(); ++i)
      if (rows[i].first == rows[i - 1].first)
        fail("append writes cache row ", rows[i].first % page, " of page ", rows[i].first / page, " for sequences ",
             rows[i - 1].second, " and ", rows[i].second, " (a page shared by both)");
  }
  // The caches are written: they must not overlap what the call reads or any other output.
  const Span kc = span_of(ap.k_cache, "append.k_cache"), vc = span_of(ap.v_cache, "append.v_cache");
  if (overlaps(kc, vc)) fail("append.k_cache overlaps append.v_cache in memory");
  std::vector<std::pair<Span, const char*>> others = side_arrays(eff, ap.k_scales != nullptr);
  others.push_back({span_of(a.q, "q"), "q"});
  others.push_back({span_of(ap.k_new, "append.k_new"), "append.k_new"});
  others.push_back({span_of(ap.v_new, "append.v_new"), "append.v_new"});
  if (ap.rotary_cos) {
    const int64_t bytes = mul_checked(mul_checked(ap.rotary_positions, ap.rotary_dim / 2, "rotary table"), 4, "rotary table");
    others.push_back({span_of(ap.rotary_cos, bytes), "append.rotary_cos"});
    others.push_back({span_of(ap.rotary_sin, bytes), "append.rotary_sin"});
  }
  for (const auto& o : others) {
    if (overlaps(kc, o.first)) fail("append.k_cache overlaps ", o.second, " in memory");
    if (overlaps(vc, o.first)) fail("append.v_cache overlaps ", o.second, " in memory");
  }
  if (ap.k_cache.dtype == DType::i8) check_i8_sources(a);
  // Scales written at token granularity: apart from everything else, as the caches are.
  if (ap.k_scales) {
    const int64_t bytes = mul_checked(kv_scale_count(eff), 4, "kv_scales bytes");
    const Span ks = span_of(ap.k_scales, bytes), vs = span_of(ap.v_scales, bytes);
    if (overlaps(ks, vs)) fail("append.k_scales overlaps append.v_scales in memory");
    others.push_back({kc, "append.k_cache"});
    others.push_back({vc, "append.v_cache"});
    for (const auto& o : others) {
      if (o.second == scale_names(true)[0] || o.second == scale_names(true)[1]) continue;  // themselves
      if (overlaps(ks, o.first)) fail("append.k_scales overlaps ", o.second, " in memory");
      if (overlaps(vs, o.first)) fail("append.v_scales overlaps ", o.second, " in memory");
    }
  }
}

// Checks dbias (docs/semantics.md, "Additive bias"): needs a bias, has its sizes, a valid dtype,
// and overlaps neither itself nor any input (`inputs`, the bias, the side arrays) or output.
template <size_t NI, size_t NO>
void check_dbias(const BackwardArgs& a, const std::pair<Span, const char*> (&inputs)[NI],
                 const std::pair<const Tensor*, const char*> (&outs)[NO]) {
  const Tensor& g = a.dbias;
  if (!has_bias(a)) fail("dbias is set but bias is not");
  check_fields(g, "dbias");
  if (g.batch != a.bias.batch || g.seq != a.bias.seq || g.heads != a.bias.heads || g.dim != a.bias.dim)
    fail("dbias shape [", g.batch, ", ", g.seq, ", ", g.heads, ", ", g.dim, "] must equal bias shape [", a.bias.batch, ", ",
         a.bias.seq, ", ", a.bias.heads, ", ", a.bias.dim, "]");
  check_no_self_overlap(g, "dbias");
  check_pointer(g, "dbias");
  const Span s = span_of(g, "dbias");
  for (const auto& in : inputs)
    if (overlaps(s, in.first)) fail("dbias overlaps input ", in.second, " in memory");
  for (const auto& in : side_arrays(a))
    if (overlaps(s, in.first)) fail("dbias overlaps input ", in.second, " in memory");
  for (const auto& o : outs)
    if (overlaps(s, span_of(*o.first, o.second))) fail("dbias overlaps ", o.second, " in memory");
  if (a.dsinks && overlaps(s, span_of(a.dsinks, a.q.heads * 4))) fail("dbias overlaps dsinks in memory");
}

}  // namespace

void validate(const AttentionArgs& a) {
  check_inputs(a, true);  // the forward's inputs: quantized K/V allowed
  check_options(a);
}

void validate(const ForwardArgs& a) {
  if (a.num_splits < 0) fail("num_splits (", a.num_splits, ") must be >= 0 (0: chosen from the shape)");
  // With an append the call attends over the caches: check it as that call, then the append itself.
  const bool append = a.append.used();
  AttentionArgs eff = a;
  if (append) {
    check_tensor(a.append.k_cache, "append.k_cache", true);
    check_tensor(a.append.v_cache, "append.v_cache", true);
    check_tensor(a.append.k_new, "append.k_new");
    check_tensor(a.append.v_new, "append.v_new");
    arrange_append_scales(a, eff);
    eff.k = a.append.k_cache;
    eff.v = a.append.v_cache;
  }
  check_inputs(eff, true);
  check_out_and_lse(eff, a.out, a.lse);
  const bool written_scales = append && a.append.k_scales;
  check_options(eff, append ? a.append.k_new.seq : 0, written_scales);
  if (append) check_append(a, eff);
  // Outputs: no self-overlap, and no overlap with any input.
  check_no_self_overlap(a.out, "out");
  const Span out_span = span_of(a.out, "out");
  const Span lse_span = span_of(a.lse, lse_bytes(a));
  std::vector<std::pair<Span, const char*>> inputs = side_arrays(eff, written_scales);
  inputs.push_back({span_of(a.q, "q"), "q"});
  inputs.push_back({span_of(eff.k, append ? "append.k_cache" : "k"), append ? "append.k_cache" : "k"});
  inputs.push_back({span_of(eff.v, append ? "append.v_cache" : "v"), append ? "append.v_cache" : "v"});
  if (append) {
    inputs.push_back({span_of(a.append.k_new, "append.k_new"), "append.k_new"});
    inputs.push_back({span_of(a.append.v_new, "append.v_new"), "append.v_new"});
  }
  for (const auto& in : inputs) {
    if (overlaps(out_span, in.first)) fail("out overlaps input ", in.second, " in memory");
    if (overlaps(lse_span, in.first)) fail("lse overlaps input ", in.second, " in memory");
  }
  if (overlaps(lse_span, out_span)) fail("lse overlaps out in memory");
  if (a.dropout_mask) {
    const int64_t bytes = mul_checked(lse_bytes(a) / 4, (key_columns(eff) + 7) / 8, "dropout_mask bytes");
    const Span m = span_of(a.dropout_mask, bytes);
    for (const auto& in : inputs)
      if (overlaps(m, in.first)) fail("dropout_mask overlaps input ", in.second, " in memory");
    if (overlaps(m, out_span)) fail("dropout_mask overlaps out in memory");
    if (overlaps(m, lse_span)) fail("dropout_mask overlaps lse in memory");
  }
}

void validate(const BackwardArgs& a) {
  if (a.block_table) fail("block_table is set: the backward does not support paged K/V (forward only)");
  if (is_quantized(a.k.dtype) || is_quantized(a.v.dtype))
    fail("k.dtype (", dtype_name(a.k.dtype), ") is quantized: the backward takes no quantized K/V (forward only)");
  check_inputs(a);
  check_out_and_lse(a, a.out, a.lse);
  check_options(a);
  if (a.lse == nullptr && a.q.batch * a.q.seq > 0) fail("lse is null: backward needs the forward's log-sum-exp");
  check_tensor(a.dout, "dout");
  check_tensor(a.dq, "dq");
  check_tensor(a.dk, "dk");
  check_tensor(a.dv, "dv");
  check_same_shape(a.dout, "dout", a.out, "out");
  check_same_shape(a.dq, "dq", a.q, "q");
  check_same_shape(a.dk, "dk", a.k, "k");
  check_same_shape(a.dv, "dv", a.v, "v");
  if (a.dsinks && !a.sinks) fail("dsinks is set but sinks is null");
  const std::pair<const Tensor*, const char*> outs[] = {{&a.dq, "dq"}, {&a.dk, "dk"}, {&a.dv, "dv"}};
  const std::pair<Span, const char*> inputs[] = {{span_of(a.q, "q"), "q"},       {span_of(a.k, "k"), "k"},
                                                 {span_of(a.v, "v"), "v"},       {span_of(a.out, "out"), "out"},
                                                 {span_of(a.dout, "dout"), "dout"}, {span_of(a.lse, lse_bytes(a)), "lse"}};
  for (const auto& o : outs) {
    check_no_self_overlap(*o.first, o.second);
    const Span s = span_of(*o.first, o.second);
    for (const auto& in : inputs)
      if (overlaps(s, in.first)) fail(o.second, " overlaps input ", in.second, " in memory");
    for (const auto& in : side_arrays(a))
      if (overlaps(s, in.first)) fail(o.second, " overlaps input ", in.second, " in memory");
  }
  if (a.dsinks) {
    if (reinterpret_cast<uintptr_t>(a.dsinks) % alignof(float) != 0)
      fail("dsinks (", static_cast<const void*>(a.dsinks), ") is not 4-byte aligned");
    const Span ds = span_of(a.dsinks, a.q.heads * 4);
    for (const auto& in : inputs)
      if (overlaps(ds, in.first)) fail("dsinks overlaps input ", in.second, " in memory");
    for (const auto& in : side_arrays(a))
      if (overlaps(ds, in.first)) fail("dsinks overlaps input ", in.second, " in memory");
    for (const auto& o : outs)
      if (overlaps(ds, span_of(*o.first, o.second))) fail("dsinks overlaps ", o.second, " in memory");
  }
  for (int i = 0; i < 3; ++i)
    for (int j = i + 1; j < 3; ++j)
      if (may_share_elements(*outs[i].first, outs[i].second, *outs[j].first, outs[j].second))
        fail(outs[i].second, " and ", outs[j].second, " overlap in memory");
  if (view_set(a.dbias)) check_dbias(a, inputs, outs);
}

}  // namespace flashattn
