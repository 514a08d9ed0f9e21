// Block-sparse masks in the GPU tiles (docs/semantics.md, "Block-sparse masks";
// flashattn/block_mask.hpp): which tiles a kernel visits, which key rows of a visited tile it loads,
// and the per-element block test of tiles the block mask leaves partial. Without a block mask
// (BlockMask::used() false) every helper answers as the window rule alone, reading nothing; with
// kSparse false (the kernels' variant for calls without a block mask) they fold to constants, so
// that variant compiles to the code it had before block masks (its registers, docs/gpu.md).
//
// Cost (every lookup is a binary search in a sorted list): deciding whether a tile is visited is
// flashattn::classify_tile, 4 searches per block_q-row query block the tile's rows meet, done by
// every thread (uniform, no shared memory); the rows to load are one more pass over the listed
// entries the tile meets; the per-element test of a partial tile is BlockMask::visible, 2 searches
// per element of the partial tile (and a bit read with bits), made once per element into a bit
// mask before the element loop. Skipped tiles cost one classification each.
#pragma once

#include <cstdint>

#include "flashattn/block_mask.hpp"
#include "flashattn/mask.hpp"
#include "tile.cuh"

namespace flashattn::gpu::detail {

// Returns the first tile t' in [t, last) of width Bc that rows [r0, r1) of sequence s, query head
// h must visit (flashattn::classify_tile not empty), or `last`. Without a block mask, t: the window
// rule's range [first, last) of key_tiles has no empty tile.
template <bool kSparse, int Bc>
__device__ inline int64_t next_visited(const Mask& m, const BlockMask& bm, int64_t s, int64_t h, int64_t r0, int64_t r1,
                                       int64_t t, int64_t last) {
  if constexpr (!kSparse) return t;
  if (!bm.used()) return t;
  while (t < last && classify_tile(m, bm, s, h, r0, r1, t * Bc, t * Bc + Bc, DeviceRead{}) == TileKind::empty) ++t;
  return t;
}

// Returns a bit per key row of the tile [c0, c0 + Rows) (bit r: key c0 + r) set when the key's block
// is listed (full or partial) for some query block meeting rows [r0, r1) of query heads [h0, h1):
// the rows a kernel may load. Rows of blocks no list names stay unloaded (zero-filled), so nothing
// of them (NaN included) reaches a product. All ones without a block mask.
template <bool kSparse, int Rows>
__device__ inline uint64_t listed_rows(const BlockMask& bm, int64_t s, int64_t h0, int64_t h1, int64_t r0, int64_t r1,
                                       int64_t c0) {
  static_assert(!kSparse || Rows <= 64, "one bit per row of the tile (tiles of more rows have no block-mask code)");
  constexpr uint64_t kAll = Rows >= 64 ? ~uint64_t{0} : (uint64_t{1} << Rows) - 1;
  if constexpr (!kSparse) return kAll;
  if (!bm.used()) return kAll;
  if (r0 >= r1) return 0;
  const int64_t kb0 = c0 / bm.block_k, kb1 = (c0 + Rows - 1) / bm.block_k;
  if (bm.heads == 1) h1 = h0 + 1;  // every head reads the same lists
  uint64_t rows = 0;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t qb = r0 / bm.block_q; qb <= (r1 - 1) / bm.block_q && rows != kAll; ++qb) {
      const int64_t l = bm.list(s, h, qb);
      // Adds the tile rows of the blocks of list l of (count, index) that meet the tile.
      auto add = [&](const int32_t* count, const int32_t* index) {
        if (!count) return;
        const int32_t* e = index + l * bm.max_blocks;
        for (int32_t x = BlockMask::lower_bound(count, index, bm.max_blocks, l, kb0, DeviceRead{}); x < ld(count + l) && ld(e + x) <= kb1;
             ++x) {
          const int64_t b0 = ld(e + x) * bm.block_k - c0, b1 = b0 + bm.block_k;  // the block's rows in the tile
          const int lo = static_cast<int>(b0 < 0 ? 0 : b0), hi = static_cast<int>(b1 > Rows ? Rows : b1);
          rows |= (hi == 64 ? ~uint64_t{0} : (uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1);
        }
      };
      add(bm.full_count, bm.full_index);
      add(bm.partial_count, bm.partial_index);
    }
  return rows;
}

// Returns the block mask's own kind of the tile rows [r0, r1) x keys [c0, c1) (BlockMask::classify;
// full without a block mask, so its per-element test is skipped).
template <bool kSparse>
__device__ inline TileKind block_kind(const BlockMask& bm, int64_t s, int64_t h, int64_t r0, int64_t r1, int64_t c0,
                                      int64_t c1) {
  if constexpr (!kSparse) return TileKind::full;
  return bm.used() ? bm.classify(s, h, r0, r1, c0, c1, DeviceRead{}) : TileKind::full;
}

// Returns whether the block mask shows element (row i, key j) of sequence s, query head h, for a
// row and key inside the sequence (i < seqlen_q, j < seqlen_k: lists and bits are read only there).
__device__ inline bool block_visible(const Mask& m, const BlockMask& bm, int64_t s, int64_t h, int64_t i, int64_t j) {
  return i < m.seqlen_q && j < m.seqlen_k && bm.visible(s, h, i, j, DeviceRead{});
}

// Returns a bit per element of this thread's kTiles fragments (bit 4·nb + e) that the block mask
// hides; at(nb, e, i, j) gives element e of fragment nb as (row i, key j). Called only for tiles the
// block mask leaves partial: the searches stay out of the kernels' unrolled element loops, which
// then test one bit (the common case without a block mask pays a zero register and a bit test).
template <int kTiles, class Element>
__device__ inline uint32_t block_hidden_bits(const Mask& m, const BlockMask& bm, int64_t s, int64_t h, const Element& at) {
  static_assert(4 * kTiles <= 32, "one bit per element of the thread's fragments");
  uint32_t hidden = 0;
#pragma unroll 1
  for (int x = 0; x < 4 * kTiles; ++x) {
    int64_t i = 0, j = 0;
    at(x / 4, x % 4, i, j);
    if (!block_visible(m, bm, s, h, i, j)) hidden |= 1u << x;
  }
  return hidden;
}

// load_rows restricted to the rows of `rows` (bit r: row r): the others are zero-filled like rows
// at or past valid_rows, and row() is not called for them; not unrolled (the block-sparse kernels
// are short of registers: unrolled, forward d = 256 spilled 64-72 B more). Without kSparse: load_rows.
template <bool kSparse, int Rows, int D, int kThreads, class T, class RowPointer>
__device__ inline void load_listed_rows(T* dst, const RowPointer& row, const T* fallback, int valid_rows,
                                        uint64_t rows, int tid) {
  if constexpr (!kSparse)
    load_rows<Rows, D, kThreads>(dst, row, fallback, valid_rows, tid);
  else
    load_rows<Rows, D, kThreads, 1>(dst, row, fallback, valid_rows, tid,
                                    [rows](int r) { return ((rows >> r) & 1u) != 0; });
}

}  // namespace flashattn::gpu::detail
