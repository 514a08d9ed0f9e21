// Building block-sparse masks (docs/semantics.md, "Block-sparse masks") so callers never write the
// lists by hand: from a visibility predicate, from a dense boolean mask, or from a call's own window
// rule. Host only; each returns the arrays in a BlockMaskBuffers whose view() goes into
// AttentionArgs::block_mask (the buffers must outlive the calls that use the view).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "flashattn/args.hpp"
#include "flashattn/block_mask.hpp"

namespace flashattn {

// The arrays of one block mask and their geometry (docs/semantics.md, "Block-sparse masks").
struct BlockMaskBuffers {
  int64_t block_q = 0, block_k = 0, batch = 0, heads = 0, q_blocks = 0, max_blocks = 0;
  std::vector<int32_t> full_count, full_index, partial_count, partial_index;
  // Element bits [batch, rows, heads, row_bytes] (empty: no partial block needs bits).
  std::vector<uint8_t> bits;
  int64_t bit_rows = 0, row_bytes = 0;

  // Returns the view to set as AttentionArgs::block_mask (pointers into these buffers).
  BlockMask view() const;
  // Returns the number of listed blocks (full + partial) over every list.
  int64_t listed() const;
};

// Visibility of element (sequence s, query head h, row i, key j), each counted within its sequence.
using VisibleFn = std::function<bool(int64_t s, int64_t h, int64_t i, int64_t j)>;

// Returns the block mask of `sequences` (1: shared by all) x `heads` (1: shared) with `rows` query
// rows and `keys` keys per sequence: a (block_q x block_k) block is listed full when `visible`
// holds for every element, partial (its elements' bits set) when for some, and not at all when for
// none. Evaluates `visible` once per element: O(sequences·heads·rows·keys).
BlockMaskBuffers block_mask_from_predicate(int64_t sequences, int64_t heads, int64_t rows, int64_t keys, int64_t block_q,
                                           int64_t block_k, const VisibleFn& visible);

// As block_mask_from_predicate, from a dense boolean mask: element (s, i, h, j) is visible iff
// dense[s·stride_batch + i·stride_seq + h·stride_head + j] is nonzero (strides in bytes, keys
// contiguous), sizes [sequences, rows, heads, keys].
BlockMaskBuffers block_mask_from_dense(const uint8_t* dense, int64_t sequences, int64_t rows, int64_t heads,
                                       int64_t keys, int64_t stride_batch, int64_t stride_seq, int64_t stride_head,
                                       int64_t block_q, int64_t block_k);

// Returns the blocks the window rule of a validated call shows, per sequence (batch = sequences,
// heads = 1): full or partial by Mask::classify, without bits. A call with this block mask computes
// exactly what it computes without one, visiting the same tiles.
BlockMaskBuffers block_mask_from_rule(const AttentionArgs& a, int64_t block_q, int64_t block_k);

}  // namespace flashattn
