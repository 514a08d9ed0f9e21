// K and V of one (sequence, key/value head) as fp32 rows, the operand form both passes broadcast
// from. Contiguous f32 rows (stride_seq == d, e.g. the bhsd layout) are used in place; otherwise
// (16-bit, or rows strided by heads as in bshd, whose power-of-two strides map a key block onto a
// few cache sets) they are widened into a contiguous copy of the head: the backward keeps one per
// thread (head_kv), the forward shares them between its threads (SharedKv).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "flashattn/problem.hpp"
#include "matrix.h"
#include "plan.h"
#include "rows.h"

namespace flashattn::cpu::detail {

// Which head a thread's per-head buffer holds (its fp32 k, v copy, the bf16 pairs of k, v, the key
// norms).
struct KvCopy {
  uint64_t call_id = 0;
  int64_t sequence = -1, head = -1;

  // Returns whether the buffer must be filled for head kvh of sequence seq in call p (it holds
  // another one), and records that it holds that head from now on.
  bool refill(const Plan& p, const Sequence& seq, int64_t kvh) {
    if (call_id == p.call_id && sequence == seq.index && head == kvh) return false;
    *this = {p.call_id, seq.index, kvh};
    return true;
  }
};

// Row j of head kvh of sequence seq in the bf16 tensor t (k or v of a), found through key_row, so
// paged K/V (a block table) is read from its pages in place.
inline const uint16_t* bf16_key_row(const ConstTensor& t, const AttentionArgs& a, const Sequence& seq, int64_t kvh,
                                    int64_t j) {
  const KeyRow where = key_row(a, seq, j);
  return static_cast<const uint16_t*>(t.data) + t.offset(where.batch, where.row, kvh);
}

// A K or V matrix as fp32 rows: element (j, x) at data[j·ld + x].
struct Rows {
  const float* data = nullptr;
  int64_t ld = 0;
};

// Rows [first, first + n) of r, `cols` elements each, as a matrix (a key block of K or V).
inline ConstMatrix row_block(const Rows& r, int64_t first, int64_t n, int64_t cols) {
  return {r.data + first * r.ld, n, cols, r.ld};
}

// How a kernel reads one K or V row as fp32 (its target's versions of widen-inl.h): `widen` writes
// the n elements at offset `off` of a buffer of dtype t (f32, f16, bf16) to dst (WidenRow);
// `dequantize` those of a quantized buffer, each times `scale` (DequantizeRow).
struct RowReaders {
  void (*widen)(const void* data, DType t, int64_t off, int64_t n, float* dst);
  void (*dequantize)(const void* data, DType t, int64_t off, int64_t n, float scale, float* dst);
};

// Prefetches into L2 rows [c0, c1) of k and v (clamped to [0, n)): the key block after the one
// being computed, so a head whose k, v do not fit in L2 (long sequences) streams from memory while
// the current tile runs instead of stalling the products on misses.
inline void prefetch_kv_block(const Rows& k, const Rows& v, int64_t c0, int64_t c1, int64_t n, int64_t dim) {
  for (int64_t j = std::max<int64_t>(c0, 0); j < std::min(c1, n); ++j) {
    prefetch_row(k.data, DType::f32, j * k.ld, dim, PrefetchFor::read_soon);
    prefetch_row(v.data, DType::f32, j * v.ld, dim, PrefetchFor::read_soon);
  }
}

// Sets k, v to keys [0, seq.mask.seqlen_k) of head kvh of sequence seq, read in place (f32 inputs).
inline void in_place_kv(const AttentionArgs& a, const Sequence& seq, int64_t kvh, Rows& k, Rows& v) {
  k = {static_cast<const float*>(a.k.data) + a.k.offset(seq.batch, seq.k_start, kvh), a.k.stride_seq};
  v = {static_cast<const float*>(a.v.data) + a.v.offset(seq.batch, seq.k_start, kvh), a.v.stride_seq};
}

// Widens keys [0, seq.mask.seqlen_k) of head kvh of k and v into the rows kc, vc (dim floats each,
// `ld` apart) with `read` (quantized rows times their scales). With a block table the rows are
// gathered from their pages (key_row).
inline void copy_head(const AttentionArgs& a, const Sequence& seq, int64_t kvh, int64_t dim, int64_t ld, float* kc,
                      float* vc, RowReaders read) {
  constexpr int64_t kAhead = 8;  // rows prefetched ahead of the copy (strided rows defeat the hardware prefetcher)
  for (int64_t j = 0; j < seq.mask.seqlen_k; ++j) {
    if (j + kAhead < seq.mask.seqlen_k) {
      const KeyRow ahead = key_row(a, seq, j + kAhead);
      prefetch_row(a.k.data, a.k.dtype, a.k.offset(ahead.batch, ahead.row, kvh), dim);
      prefetch_row(a.v.data, a.v.dtype, a.v.offset(ahead.batch, ahead.row, kvh), dim);
    }
    const KeyRow at = key_row(a, seq, j);
    const int64_t ko = a.k.offset(at.batch, at.row, kvh), vo = a.v.offset(at.batch, at.row, kvh);
    if (is_quantized(a.k.dtype)) {  // docs/semantics.md, "Quantized K/V"
      read.dequantize(a.k.data, a.k.dtype, ko, dim, kv_scale(a, a.kv_scales.k, at.batch, at.row, kvh), kc + j * ld);
      read.dequantize(a.v.data, a.v.dtype, vo, dim, kv_scale(a, a.kv_scales.v, at.batch, at.row, kvh), vc + j * ld);
    } else {
      read.widen(a.k.data, a.k.dtype, ko, dim, kc + j * ld);
      read.widen(a.v.data, a.v.dtype, vo, dim, vc + j * ld);
    }
  }
}

// Sets k, v to keys [0, seq.mask.seqlen_k) of head kvh of sequence seq: in place, or (p.copy_kv)
// from the thread's copy `copy` (room for 2·max_k·kv_ld floats), refilled when `held` says it holds
// another head.
inline void head_kv(const AttentionArgs& a, const Plan& p, const Sequence& seq, int64_t kvh, float* copy,
                    KvCopy& held, Rows& k, Rows& v, RowReaders read) {
  if (!p.copy_kv) {
    in_place_kv(a, seq, kvh, k, v);
    return;
  }
  float* kc = copy;
  float* vc = copy + p.max_k * p.kv_ld;
  if (held.refill(p, seq, kvh)) copy_head(a, seq, kvh, p.dim, p.kv_ld, kc, vc, read);
  k = {kc, p.kv_ld};
  v = {vc, p.kv_ld};
}

// Fp32 copies of k, v heads shared by the threads of one forward call. Consecutive work items of a
// head run on every thread at once, and with private copies each thread streamed its own copy of
// the same head: at N = 16384 two private copies (2 x 16 MiB at d = 128) no longer fit in L3 with the
// rest, and bshd ran at 61 % of peak against 75 % for in-place bhsd rows. A slot is filled by the
// first thread that needs its head while the others wait for it; copies are exact widening, so the
// results do not depend on which thread fills. One slot per thread: a thread releases its slot
// before it looks for another head, so it always finds a free one; a released head stays cached
// until its slot is reused.
class SharedKv {
 public:
  // buffer: forward_shared_floats(p) floats, shared_kv_slots(p) slots of 2 x max_k x kv_ld.
  SharedKv(float* buffer, const Plan& p);
  SharedKv(const SharedKv&) = delete;
  SharedKv& operator=(const SharedKv&) = delete;

  // Sets k, v to keys [0, seq.mask.seqlen_k) of head kvh of seq, copied with `read`; `held` is the
  // slot the calling thread holds (-1: none), released first when it holds another head.
  void acquire(const AttentionArgs& a, const Sequence& seq, int64_t kvh, int& held, Rows& k, Rows& v,
               RowReaders read);

 private:
  struct Slot {
    int64_t sequence = -1, head = -1;
    int users = 0;           // threads holding the slot
    bool ready = false;      // filled
    uint64_t last_use = 0;   // for least-recently-used replacement
  };
  float* data(int slot) const { return buffer_ + static_cast<int64_t>(slot) * 2 * max_k_ * ld_; }

  std::mutex mutex_;
  std::condition_variable filled_;
  std::vector<Slot> slots_;
  float* buffer_;
  int64_t max_k_, dim_, ld_;
  uint64_t clock_ = 0;
};

}  // namespace flashattn::cpu::detail
