// props::Coverage: what one generated Case exercises, and a tally of many (the generator's shares).
//
// The geometry is computed exactly as the implementations compute it (flashattn::make_sequence and
// flashattn::Mask, from the case's sizes, varlen offsets, seqlens_k and window), without
// materialising any tensor, so classifying a case costs microseconds.
//
// Tiles. "Multi-tile" and "partial tiles" are defined against a tile grid of block_q query rows ×
// block_k keys laid over each sequence (rows [0, seqlen_q) × keys [0, seqlen_k after seqlens_k)),
// the grid the CPU backend walks:
//   multi_tile:    some sequence has at least two tiles that hold a visible element
//                  (Mask::classify != empty), i.e. an implementation really combines tiles:
//                  several key blocks in one row's online softmax, or several query blocks;
//   partial_tiles: some multi-tile sequence has a length (seqlen_q or seqlen_k) that is not a
//                  multiple of the tile, so a partial tile follows full ones (the tail paths). A
//                  sequence inside one tile is always "partial" and does not count.
// Two grids are reported: the CPU's default tiles (64 query rows × 128 keys, 64 keys for head dims
// above 128: cpu/plan.h) and the tiny 3 × 5 tiles the CPU property runner forces
// (tests/cpu/props.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "props/case.hpp"

namespace props {

// The mask options a case passes (by flags: a window wider than the sequence still counts).
enum class MaskKind : uint8_t { none, causal, window, causal_window };
const char* mask_kind_name(MaskKind m);

// A tile grid (see above).
struct Tile {
  int64_t block_q, block_k;
};
// The CPU's default tiles for head dim d (cpu/plan.h: 64 × 128, 64 × 64 above d = 128).
Tile default_tile(int64_t dim);
// The tiles of the CPU runner's tiny variant.
inline constexpr Tile kTinyTile{3, 5};

struct Coverage {
  flashattn::DType dtype = flashattn::DType::f32;
  Layout layout = Layout::bshd;
  MaskKind mask = MaskKind::none;
  bool alibi = false, softcap = false, varlen = false, seqlens_k = false, gqa = false;
  bool custom_scale = false, offset = false;
  Values values = Values::normal;
  int64_t dim = 1;
  bool gpu_dim = false;  // head dim in the GPU set 32/64/96/128/256

  bool rows = false;             // some query row exists (a sequence with seqlen_q > 0)
  bool multi_key_row = false;    // some row sees >= 2 keys: P is not one-hot, dS and so dq, dk can be != 0
  bool most_rows_multi = false;  // at least half of all rows see >= 2 keys
  bool empty_rows = false;       // some row sees no key (out = 0, LSE = -inf there)
  bool all_rows_empty = false;   // every row sees no key, or there is no row: out ≡ 0, all gradients 0
  bool empty_sequence = false;   // some sequence has seqlen_q = 0 or seqlen_k (after seqlens_k) = 0
  bool multi_tile = false, partial_tiles = false;            // against default_tile(dim)
  bool multi_tile_tiny = false, partial_tiles_tiny = false;  // against kTinyTile
  int64_t work = 0;                                          // Case::work()

  // Returns whether the case is degenerate: no row sees two keys (every gradient of q and k is
  // zero; out is a copy of V rows or 0).
  bool degenerate() const { return !multi_key_row; }
};

// Classifies one case.
Coverage coverage(const Case& c);

// Many classified cases; prints their shares as a few lines.
class CoverageTally {
 public:
  void add(const Case& c) { all_.push_back(coverage(c)); }
  void add(const Coverage& v) { all_.push_back(v); }
  int64_t cases() const { return static_cast<int64_t>(all_.size()); }
  // Returns the share (0..1) of the cases for which pred(const Coverage&) holds (0 without cases).
  template <class Pred>
  double share(Pred pred) const {
    int64_t n = 0;
    for (const Coverage& v : all_) n += pred(v) ? 1 : 0;
    return all_.empty() ? 0.0 : double(n) / double(all_.size());
  }
  double mean_work() const;
  // Returns a few lines of percentages: dtypes, layouts, masks, options, rows and keys, tiles.
  std::string summary() const;

 private:
  std::vector<Coverage> all_;
};

}  // namespace props
