// K and V of one (sequence, key/value head) as fp32 rows, the operand form both passes broadcast
// from. Contiguous f32 rows (stride_seq == d, e.g. the bhsd layout) are used in place; otherwise
// (16-bit, or rows strided by heads as in bshd, whose power-of-two strides map a key block onto a
// few cache sets) they are widened into a contiguous per-thread copy: the forward copies a whole head
// once and reuses it while consecutive work items stay on that head; the backward copies one key
// block at a time (reused by every query block of the group).
#pragma once

#include <cstdint>

#include "flashattn/problem.hpp"
#include "plan.h"
#include "rows.h"

namespace flashattn::cpu::detail {

// Which head's k, v a thread's fp32 copy holds.
struct KvCopy {
  uint64_t call_id = 0;
  int64_t sequence = -1, head = -1;
};

// A K or V matrix as fp32 rows: element (j, x) at data[j·ld + x].
struct Rows {
  const float* data = nullptr;
  int64_t ld = 0;
};

// Widens n elements at offset `off` of a buffer of dtype t into dst (load_row or a SIMD version).
using WidenFn = void (*)(const void* data, DType t, int64_t off, int64_t n, float* dst);

// Sets k, v to keys [0, seq.mask.seqlen_k) of head kvh of sequence seq. `copy` has room for
// 2·max_k·d floats (used only for 16-bit inputs, widened with `widen`); `held` says what it holds.
inline void head_kv(const ForwardArgs& a, const Plan& p, const Sequence& seq, int64_t kvh, float* copy,
                    KvCopy& held, Rows& k, Rows& v, WidenFn widen) {
  if (!p.copy_kv) {
    k = {static_cast<const float*>(a.k.data) + a.k.offset(seq.batch, seq.k_start, kvh), a.k.stride_seq};
    v = {static_cast<const float*>(a.v.data) + a.v.offset(seq.batch, seq.k_start, kvh), a.v.stride_seq};
    return;
  }
  float* kc = copy;
  float* vc = copy + p.max_k * p.dim;
  if (held.call_id != p.call_id || held.sequence != seq.index || held.head != kvh) {
    constexpr int64_t kAhead = 8;  // rows prefetched ahead of the copy (strided rows defeat the hardware prefetcher)
    for (int64_t j = 0; j < seq.mask.seqlen_k; ++j) {
      if (j + kAhead < seq.mask.seqlen_k) {
        prefetch_row(a.k.data, a.k.dtype, a.k.offset(seq.batch, seq.k_start + j + kAhead, kvh), p.dim);
        prefetch_row(a.v.data, a.v.dtype, a.v.offset(seq.batch, seq.k_start + j + kAhead, kvh), p.dim);
      }
      widen(a.k.data, a.k.dtype, a.k.offset(seq.batch, seq.k_start + j, kvh), p.dim, kc + j * p.dim);
      widen(a.v.data, a.v.dtype, a.v.offset(seq.batch, seq.k_start + j, kvh), p.dim, vc + j * p.dim);
    }
    held = {p.call_id, seq.index, kvh};
  }
  k = {kc, p.dim};
  v = {vc, p.dim};
}

// Sets k, v to keys [c0, c0 + n) of head kvh of sequence seq: in place, or widened into `copy`
// (room for 2·block_k·d floats).
inline void block_kv(const ForwardArgs& a, const Plan& p, const Sequence& seq, int64_t kvh, int64_t c0,
                     int64_t n, float* copy, Rows& k, Rows& v, WidenFn widen) {
  if (!p.copy_kv) {
    k = {static_cast<const float*>(a.k.data) + a.k.offset(seq.batch, seq.k_start + c0, kvh), a.k.stride_seq};
    v = {static_cast<const float*>(a.v.data) + a.v.offset(seq.batch, seq.k_start + c0, kvh), a.v.stride_seq};
    return;
  }
  float* kc = copy;
  float* vc = copy + p.block_k * p.dim;
  for (int64_t j = 0; j < n; ++j) {
    widen(a.k.data, a.k.dtype, a.k.offset(seq.batch, seq.k_start + c0 + j, kvh), p.dim, kc + j * p.dim);
    widen(a.v.data, a.v.dtype, a.v.offset(seq.batch, seq.k_start + c0 + j, kvh), p.dim, vc + j * p.dim);
  }
  k = {kc, p.dim};
  v = {vc, p.dim};
}

}  // namespace flashattn::cpu::detail
