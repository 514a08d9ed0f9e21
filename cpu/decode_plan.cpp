// The decode path's shape rules and scratch sizes (see decode.h).
#include <algorithm>

#include "decode.h"
#include "flashattn/problem.hpp"

namespace flashattn::cpu::detail {

bool decode_applies(const ForwardArgs& a, const Config& c, const Plan& p) {
  // A block-sparse mask is per (query head, query block): the general path's tiles apply it.
  return c.decode && !a.block_mask.used() && p.max_q >= 1 && p.max_q * p.group <= kDecodeMaxRows;
}

int64_t auto_splits(int64_t sequences, int64_t head_runs, int64_t max_k) {
  const int64_t items = std::max<int64_t>(sequences * head_runs, 1);
  const int64_t wanted = ceil_div(kDecodeItems, items);
  const int64_t longest = std::max<int64_t>(max_k / kDecodeMinSplitKeys, 1);
  return std::clamp<int64_t>(wanted, 1, longest);
}

DecodePlan make_decode_plan(const ForwardArgs& a, const Config& c, const Plan& p, int64_t requested_splits) {
  DecodePlan dp;
  dp.group = p.group;
  dp.max_q = p.max_q;
  dp.rows = p.group * p.max_q;
  dp.dpad = round_up(std::max<int64_t>(a.q.dim, 1), kMaxLanes);
  dp.dvpad = round_up(std::max<int64_t>(a.v.dim, 1), kMaxLanes);
  const int64_t widest = std::max(dp.dpad, dp.dvpad);
  dp.block_k = c.block_k > 0 ? c.block_k : std::max<int64_t>(std::min<int64_t>(kDecodeBlockK, kDecodeTileFloats / widest), 1);
  // At most one split per key tile of the longest sequence: a split is a whole number of tiles
  // (split_begin), so more splits would only be empty ones, whose fp32 partials grow with the count
  // (the fuzzer's num_splits = 46341 over 4 keys allocated 428 MB) and add exact zeros when merged.
  const int64_t most = std::max<int64_t>(ceil_div(p.max_k, dp.block_k), 1);
  const int64_t tile_bytes = dp.block_k * (dp.dpad + dp.dvpad) * static_cast<int64_t>(sizeof(float));
  const int64_t row_bytes = dp.rows * (dp.dpad + dp.dvpad) * static_cast<int64_t>(sizeof(float));
  const int64_t fit = std::min(kDecodeItemTileBytes / tile_bytes, kDecodeItemRowBytes / row_bytes);
  const int64_t hk = std::max<int64_t>(a.k.heads, 1);
  const int64_t want = c.decode_heads > 0 ? c.decode_heads : fit;
  dp.head_runs = ceil_div(hk, std::clamp<int64_t>(want, 1, std::min(hk, kMaxDecodeHeads)));
  dp.heads = ceil_div(hk, dp.head_runs);  // runs of equal length up to one head
  dp.splits = requested_splits > 0 ? std::min(requested_splits, most) : auto_splits(p.sequences, dp.head_runs, p.max_k);
  // A cache too short to split (under 2·kDecodeMinSplitKeys keys) can leave fewer items than cores
  // (B = 1, Nk = 512: one): then the head runs are halved, down to kDecodeMinHeads heads. Longer
  // caches keep whole runs: halving them at B = 1, Nk = 4096-16384 cost 15-30 % (each item then
  // reads half of every key's span).
  const auto items = [&] { return p.sequences * dp.head_runs * dp.splits; };
  while (c.decode_heads == 0 && dp.splits == 1 && items() < kDecodeItems && dp.heads / 2 >= kDecodeMinHeads) {
    dp.head_runs = ceil_div(hk, dp.heads / 2);
    dp.heads = ceil_div(hk, dp.head_runs);
  }
  dp.bias = p.bias;
  return dp;
}

size_t decode_scratch_floats(const DecodePlan& dp, bool exact_scores) {
  Carver c(nullptr);
  const DecodeScratch counted(c, dp, exact_scores);
  static_cast<void>(counted);
  return (c.bytes() + sizeof(float) - 1) / sizeof(float);
}

size_t decode_partial_floats(const DecodePlan& dp, int64_t sequences, int64_t heads_k, int64_t dv) {
  if (dp.splits <= 1) return 0;
  return static_cast<size_t>(sequences * heads_k * dp.splits * dp.rows * (dv + 1));
}

}  // namespace flashattn::cpu::detail
