// The one definition of which keys a query row sees. Used per element by the oracle and per tile by
// the tiled CPU and GPU code; host and device.
//
// Every mask is a window on the bottom-right aligned diagonal: query row i of a sequence with
// seqlen_q rows is aligned with key i + seqlen_k - seqlen_q (FlashAttention >= 2.1), moved by the
// call's diagonal_offset (0 by default), and sees the keys
//   i + diag - left <= j <= i + diag + right,   0 <= j < seqlen_k,
//   diag = seqlen_k - seqlen_q + offset,
// where left/right = -1 means unbounded on that side. Causal is the window (-1, 0); a causal mask
// combined with a window keeps the tighter right bound. Per-batch key lengths and varlen sequences
// enter through seqlen_q / seqlen_k (the alignment is computed from those lengths).
//
// For every row the visible keys are one interval [key_begin(i), key_end(i)) (possibly empty), and
// both ends are non-decreasing in i. Tiles are classified from the same two functions.
#pragma once

#include <cstdint>

#include "flashattn/config.hpp"
#include "flashattn/options.hpp"

namespace flashattn {

// How a tile of rows x keys relates to the mask.
enum class TileKind : uint8_t {
  empty,    // no visible element: skip the tile
  full,     // every element visible: no per-element test needed
  partial,  // some visible: test each element with Mask::visible
};

struct Mask {
  int64_t seqlen_q = 0;  // query rows of this sequence
  int64_t seqlen_k = 0;  // keys of this sequence (after per-batch key lengths)
  int64_t left = -1;     // keys visible left of the diagonal; -1 unbounded
  int64_t right = -1;    // keys visible right of the diagonal; -1 unbounded
  int64_t offset = 0;    // moves the diagonal right by this many keys (AttentionArgs::diagonal_offset)

  // Returns the mask of one sequence from the user's options (window values < -1 are rejected by
  // validation before this is called; sizes and |offset| are below 2^31). Build masks through
  // make(): it bounds the window so the index arithmetic below cannot overflow.
  FLASHATTN_HD static constexpr Mask make(int64_t seqlen_q, int64_t seqlen_k, bool causal,
                                          int64_t window_left, int64_t window_right, int64_t offset = 0) {
    // |j - (i + diag)| never exceeds seqlen_q + seqlen_k + |offset|, so a wider window is the same
    // mask; clamping keeps every index computation below far from int64 overflow.
    const int64_t widest = seqlen_q + seqlen_k + (offset < 0 ? -offset : offset);
    const int64_t left = window_left > widest ? widest : window_left;
    const int64_t right = causal ? 0 : (window_right > widest ? widest : window_right);
    return Mask{seqlen_q, seqlen_k, left, right, offset};
  }
  FLASHATTN_HD static constexpr Mask make(int64_t seqlen_q, int64_t seqlen_k, const MaskOptions& o) {
    return make(seqlen_q, seqlen_k, o.causal, o.window_left, o.window_right, o.diagonal_offset);
  }

  // Returns the key aligned with query row 0.
  FLASHATTN_HD constexpr int64_t diag() const { return seqlen_k - seqlen_q + offset; }

  // Returns the first visible key of row i (clamped to [0, seqlen_k]).
  FLASHATTN_HD constexpr int64_t key_begin(int64_t i) const {
    if (left < 0) return 0;
    const int64_t b = i + diag() - left;
    return b < 0 ? 0 : (b > seqlen_k ? seqlen_k : b);
  }

  // Returns one past the last visible key of row i (clamped to [0, seqlen_k]).
  FLASHATTN_HD constexpr int64_t key_end(int64_t i) const {
    if (right < 0) return seqlen_k;
    const int64_t e = i + diag() + right + 1;
    return e < 0 ? 0 : (e > seqlen_k ? seqlen_k : e);
  }

  // Returns whether query row i sees key j. The definition every implementation shares.
  FLASHATTN_HD constexpr bool visible(int64_t i, int64_t j) const {
    return key_begin(i) <= j && j < key_end(i);
  }

  // Returns the first query row that sees key j (clamped to [0, seqlen_q]; rows [row_begin(j),
  // row_end(j)) see key j, none when j is past the keys). The rows seeing a key form one interval:
  // for 0 <= j < seqlen_k, key_begin(i) <= j iff i <= j - diag + left and j < key_end(i) iff
  // i >= j - diag - right (the clamps of key_begin/key_end change neither side).
  FLASHATTN_HD constexpr int64_t row_begin(int64_t j) const {
    if (j >= seqlen_k || right < 0) return j >= seqlen_k ? seqlen_q : 0;
    const int64_t b = j - diag() - right;
    return b < 0 ? 0 : (b > seqlen_q ? seqlen_q : b);
  }

  // Returns one past the last query row that sees key j (clamped to [row_begin(j), seqlen_q]).
  FLASHATTN_HD constexpr int64_t row_end(int64_t j) const {
    if (j >= seqlen_k) return seqlen_q;
    const int64_t b = row_begin(j);
    if (left < 0) return seqlen_q;
    const int64_t e = j - diag() + left + 1;
    return e < b ? b : (e > seqlen_q ? seqlen_q : e);
  }

  // Returns whether row i sees no key at all (its output is 0 and its LSE is -inf).
  FLASHATTN_HD constexpr bool row_empty(int64_t i) const { return key_begin(i) >= key_end(i); }

  // Classifies the tile of rows [r0, r1) x keys [c0, c1) (non-empty ranges, 0 <= r0, r1 <= seqlen_q,
  // 0 <= c0; c1 may pass seqlen_k).
  // Exact: `full` iff every element is visible, `empty` iff none is.
  FLASHATTN_HD constexpr TileKind classify(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    // Both interval ends grow with the row, so the first row bounds the right edge and the last
    // row bounds the left edge of the region visible to every row.
    if (key_begin(r1 - 1) <= c0 && c1 <= key_end(r0)) return TileKind::full;
    // Some element is visible iff some row's interval meets [c0, c1). Clamped to the keys, the tile
    // is the rectangle [r0, r1) x [c0, min(c1, seqlen_k)); on it j - i takes every value in
    // [c0 - (r1 - 1), min(c1, seqlen_k) - 1 - r0], which must meet the band
    // [diag - left, diag + right].
    const int64_t ce = c1 < seqlen_k ? c1 : seqlen_k;
    if (c0 >= ce) return TileKind::empty;
    const int64_t lo = c0 - (r1 - 1), hi = ce - 1 - r0;
    if (left >= 0 && hi < diag() - left) return TileKind::empty;
    if (right >= 0 && lo > diag() + right) return TileKind::empty;
    return TileKind::partial;
  }

  // Returns the keys [begin, end) that rows [r0, r1) may see (the union of their intervals):
  // key tiles outside it are empty and need not be visited.
  FLASHATTN_HD constexpr int64_t rows_key_begin(int64_t r0) const { return key_begin(r0); }
  FLASHATTN_HD constexpr int64_t rows_key_end(int64_t r1) const { return key_end(r1 - 1); }

  // Returns the keys [begin, end) that every row in [r0, r1) sees: key tiles inside it are full
  // (interior tiles, no per-element test); begin >= end when there is none.
  FLASHATTN_HD constexpr int64_t full_key_begin(int64_t r1) const { return key_begin(r1 - 1); }
  FLASHATTN_HD constexpr int64_t full_key_end(int64_t r0) const { return key_end(r0); }
};

}  // namespace flashattn
