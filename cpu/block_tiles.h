// Block-sparse masks in the CPU tiles (flashattn/block_mask.hpp): how a tile is classified by the
// window rule and by the block mask, and the element masking of tiles the block mask shows only in
// part. Scalar code (no SIMD): it runs once per tile, and its element loop only on partial blocks.
//
// The plan (make_plan) cuts block-sparse calls into tiles that divide the mask's block sizes, so a
// tile lies in one block and a tile of an unlisted block is never visited: its K, V rows and bias
// entries are not read by any product.
#pragma once

#include <algorithm>
#include <cstdint>

#include "flashattn/args.hpp"
#include "flashattn/block_mask.hpp"
#include "flashattn/problem.hpp"

namespace flashattn::cpu::detail {

// What a tile of rows x keys needs: the window rule's per-row key intervals (MaskScores) when
// `rule` is partial, the block mask's element test (MaskBlockTile) when `blocks` is partial.
struct TileKinds {
  TileKind rule = TileKind::full;
  TileKind blocks = TileKind::full;  // full without a block mask
  TileKind kind() const { return combine_tiles(rule, blocks); }
};

// Returns the kinds of the tile rows [r0, r1) x keys [c0, c1) of query head h in sequence seq.
inline TileKinds classify_tiles(const AttentionArgs& a, const Sequence& seq, int64_t h, int64_t r0, int64_t r1,
                                int64_t c0, int64_t c1) {
  TileKinds t;
  t.rule = seq.mask.classify(r0, r1, c0, c1);
  if (t.rule != TileKind::empty && a.block_mask.used()) t.blocks = a.block_mask.classify(seq.index, h, r0, r1, c0, c1);
  return t;
}

// Returns the first key tile of a row block whose rows see keys from `key_lo` on: key_lo itself,
// or with a block mask the tile boundary at or below it, so tiles stay inside the mask's blocks.
inline int64_t first_key_tile(const AttentionArgs& a, int64_t key_lo, int64_t block_k) {
  return a.block_mask.used() ? key_lo / block_k * block_k : key_lo;
}

// Sets the transposed scores st[j·ld + i] (key c0 + j, row r0 + i of sequence s, query head h) to
// `hidden` wherever the block mask hides the element, for rows [0, rows) and keys [0, nk): one
// block-kind lookup per (query block, key block) the tile meets, the element bits only in
// partial blocks.
template <class T>
void MaskBlockTile(const BlockMask& bm, int64_t s, int64_t h, int64_t r0, int64_t rows, int64_t c0, int64_t nk, T* st,
                   int64_t ld, T hidden) {
  for (int64_t i0 = 0; i0 < rows;) {
    const int64_t qb = (r0 + i0) / bm.block_q, i1 = std::min(rows, (qb + 1) * bm.block_q - r0);
    for (int64_t j0 = 0; j0 < nk;) {
      const int64_t kb = (c0 + j0) / bm.block_k, j1 = std::min(nk, (kb + 1) * bm.block_k - c0);
      const BlockKind kind = bm.kind(s, h, qb, kb);
      if (kind == BlockKind::hidden || (kind == BlockKind::partial && bm.bits.data)) {
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i)
            if (kind == BlockKind::hidden || !bm.bit(s, h, r0 + i, c0 + j)) st[j * ld + i] = hidden;
      }
      j0 = j1;
    }
    i0 = i1;
  }
}

}  // namespace flashattn::cpu::detail
