// Block-sparse masks (docs/semantics.md, "Block-sparse masks"): per (sequence, query head, block of
// block_q query rows) the caller lists the blocks of block_k keys that are fully visible and those
// that are partially visible; blocks not listed are hidden and never loaded. Partial blocks may carry
// a per-element bitmask. The block mask only restricts: an element is visible iff the window/causal
// rule (flashattn::Mask) shows it AND its block is listed AND (the block is full OR no bitmask is
// given OR its bit is 1). Host and device: the GPU kernels read the same struct with device pointers.
//
// Tiled code asks `classify` about a tile of rows x keys (empty: skip it, full: no per-element test
// from the block mask, partial: test each element with `visible`), and combines the answer with the
// window rule's own classification (combine_tiles). Lookups are binary searches in the sorted lists.
#pragma once

#include <cstdint>

#include "flashattn/config.hpp"
#include "flashattn/mask.hpp"

namespace flashattn {

// The per-element bits of a block mask's partial blocks: bit j % 8 of byte j / 8 of the row at
// data + s·stride_batch + i·stride_seq + h·stride_head (strides in bytes) is element (s, i, h, j)
// (sequence, query row within it, query head, key within it); 1 = visible. Rows hold
// ⌈key_columns / 8⌉ bytes. batch is 1 or the number of sequences, seq 1 or the query rows, heads 1
// or q.heads; a size of 1 broadcasts (its stride is not used). Only bytes of partial blocks are read.
struct BitMask {
  const uint8_t* data = nullptr;
  int64_t batch = 0, seq = 0, heads = 0;
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;
};

// Returns whether any field of a bitmask is set.
FLASHATTN_HD constexpr bool bitmask_set(const BitMask& b) {
  return b.data || b.batch || b.seq || b.heads || b.stride_batch || b.stride_seq || b.stride_head;
}

// What a block mask says of one block.
enum class BlockKind : uint8_t { hidden, full, partial };

struct BlockMask {
  int64_t block_q = 0;  // query rows per block (>= 1 when the block mask is used)
  int64_t block_k = 0;  // keys per block (>= 1 when used)
  int64_t batch = 0;    // lists exist for 1 (shared by every sequence) or every sequence
  int64_t heads = 0;    // ... and for 1 (shared by every head) or every query head
  int64_t q_blocks = 0;    // lists per (sequence, head): at least ⌈query rows / block_q⌉
  int64_t max_blocks = 0;  // entries reserved per list in full_index and partial_index
  // List l = (s·heads + h)·q_blocks + qb (s, h: 0 where the size is 1) holds full_count[l] key-block
  // indices at full_index + l·max_blocks, strictly increasing, each in [0, ⌈key_columns / block_k⌉);
  // likewise the partial list. A block is in at most one of the two. null count and index: no
  // block of that kind.
  const int32_t* full_count = nullptr;     // [batch, heads, q_blocks]
  const int32_t* full_index = nullptr;     // [batch, heads, q_blocks, max_blocks]
  const int32_t* partial_count = nullptr;  // [batch, heads, q_blocks]
  const int32_t* partial_index = nullptr;  // [batch, heads, q_blocks, max_blocks]
  BitMask bits;  // optional element mask of the partial blocks (unset: partial blocks are
                 // visible where the window rule and the bias show them)

  // Returns whether the call has a block mask (any field set).
  FLASHATTN_HD constexpr bool used() const {
    return block_q || block_k || batch || heads || q_blocks || max_blocks || full_count || full_index ||
           partial_count || partial_index || bitmask_set(bits);
  }

  // Returns the index of the list of sequence s, query head h, query block qb.
  FLASHATTN_HD constexpr int64_t list(int64_t s, int64_t h, int64_t qb) const {
    return ((batch == 1 ? 0 : s) * heads + (heads == 1 ? 0 : h)) * q_blocks + qb;
  }

  // Returns the position of the first entry >= kb in list l of (count, index), or the count.
  template <class Read = ElementRead>
  FLASHATTN_HD static constexpr int32_t lower_bound(const int32_t* count, const int32_t* index, int64_t max_blocks,
                                                    int64_t l, int64_t kb, Read read = {}) {
    if (!count) return 0;
    const int32_t* e = index + l * max_blocks;
    int32_t lo = 0, hi = read(count + l);
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (read(e + mid) < kb) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  // Returns the number of entries of list l of (count, index) in [kb0, kb1].
  template <class Read = ElementRead>
  FLASHATTN_HD static constexpr int64_t listed(const int32_t* count, const int32_t* index, int64_t max_blocks,
                                               int64_t l, int64_t kb0, int64_t kb1, Read read = {}) {
    if (!count) return 0;
    return lower_bound(count, index, max_blocks, l, kb1 + 1, read) - lower_bound(count, index, max_blocks, l, kb0, read);
  }

  // Returns the kind of key block kb for query block qb of sequence s, query head h.
  template <class Read = ElementRead>
  FLASHATTN_HD constexpr BlockKind kind(int64_t s, int64_t h, int64_t qb, int64_t kb, Read read = {}) const {
    const int64_t l = list(s, h, qb);
    if (listed(full_count, full_index, max_blocks, l, kb, kb, read)) return BlockKind::full;
    if (listed(partial_count, partial_index, max_blocks, l, kb, kb, read)) return BlockKind::partial;
    return BlockKind::hidden;
  }

  // Returns bit (s, i, h, j) of the element mask (call only when bits.data is set).
  template <class Read = ElementRead>
  FLASHATTN_HD constexpr bool bit(int64_t s, int64_t h, int64_t i, int64_t j, Read read = {}) const {
    const int64_t row = (bits.batch == 1 ? 0 : s) * bits.stride_batch + (bits.seq == 1 ? 0 : i) * bits.stride_seq +
                        (bits.heads == 1 ? 0 : h) * bits.stride_head;
    return (read(bits.data + row + j / 8) >> (j % 8)) & 1;
  }

  // Returns whether the block mask shows element (row i, key j) of sequence s, query head h (the
  // window rule is not applied here: visible_element below combines both).
  template <class Read = ElementRead>
  FLASHATTN_HD constexpr bool visible(int64_t s, int64_t h, int64_t i, int64_t j, Read read = {}) const {
    const BlockKind k = kind(s, h, i / block_q, j / block_k, read);
    if (k == BlockKind::full) return true;
    return k == BlockKind::partial && (!bits.data || bit(s, h, i, j, read));
  }

  // Classifies the tile of rows [r0, r1) x keys [c0, c1) (non-empty, r0 >= 0, c0 >= 0) of sequence s,
  // query head h by the block mask alone: empty iff no block it meets is listed; full iff every
  // block it meets is listed and none needs its bits (a partial block with bits.data set); else
  // partial. Exact for the blocks; a partial tile may still have every element visible.
  template <class Read = ElementRead>
  FLASHATTN_HD constexpr TileKind classify(int64_t s, int64_t h, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                           Read read = {}) const {
    const int64_t kb0 = c0 / block_k, kb1 = (c1 - 1) / block_k;
    bool any = false, all = true;
    for (int64_t qb = r0 / block_q; qb <= (r1 - 1) / block_q; ++qb) {
      const int64_t l = list(s, h, qb);
      const int64_t nf = listed(full_count, full_index, max_blocks, l, kb0, kb1, read);
      const int64_t np = listed(partial_count, partial_index, max_blocks, l, kb0, kb1, read);
      any = any || nf + np > 0;
      all = all && nf + np == kb1 - kb0 + 1 && !(np > 0 && bits.data);
    }
    return !any ? TileKind::empty : all ? TileKind::full : TileKind::partial;
  }
};

// Returns the kind of a tile from the window rule's classification and the block mask's: empty if
// either is, full if both are, else partial.
FLASHATTN_HD constexpr TileKind combine_tiles(TileKind rule, TileKind blocks) {
  if (rule == TileKind::empty || blocks == TileKind::empty) return TileKind::empty;
  return rule == TileKind::full && blocks == TileKind::full ? TileKind::full : TileKind::partial;
}

// Returns the kind of tile rows [r0, r1) x keys [c0, c1) of sequence s, query head h under the
// window rule m and the block mask b (unused: the rule alone). The one tile test of every backend.
template <class Read = ElementRead>
FLASHATTN_HD constexpr TileKind classify_tile(const Mask& m, const BlockMask& b, int64_t s, int64_t h, int64_t r0,
                                              int64_t r1, int64_t c0, int64_t c1, Read read = {}) {
  const TileKind rule = m.classify(r0, r1, c0, c1);
  if (rule == TileKind::empty || !b.used()) return rule;
  return combine_tiles(rule, b.classify(s, h, r0, r1, c0, c1, read));
}

// Returns whether row i of sequence s, query head h sees key j under the window rule m and the
// block mask b. The one element test of every backend.
template <class Read = ElementRead>
FLASHATTN_HD constexpr bool visible_element(const Mask& m, const BlockMask& b, int64_t s, int64_t h, int64_t i,
                                            int64_t j, Read read = {}) {
  return m.visible(i, j) && (!b.used() || b.visible(s, h, i, j, read));
}

}  // namespace flashattn
