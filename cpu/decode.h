// The decode path of the forward (docs/cpu-design.md, "Decoding"): calls with few query rows per
// key/value head (decoding, speculative decoding) are bound by reading K and V once, not by
// arithmetic. A work item is (sequence, a run of consecutive key/value heads, split of the keys): all
// g query heads of each GQA group and all query rows of the sequence (R = g·Nq rows per key/value
// head) are scored against each key row as it streams past, so every K and V row is read from memory
// once per call, and the heads of one key, adjacent in the usual [B, N, Hk, d] caches and in a page,
// are read together: the item walks the cache in its memory order. Splits keep every core busy when
// B is small; their partial (O, LSE) are combined in a fixed order afterwards.
//
// This header holds the shape rules and the sizes (no SIMD code); decode.cc the kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashattn/args.hpp"
#include "flashattn/cpu.hpp"
#include "plan.h"
#include "scratch.h"

namespace flashattn::cpu::detail {

// Most rows (query heads of a group x query rows of a sequence) a decode work item carries. Each
// key row costs R dot products and R axpys: at R = 64 and d = 128 that is still below the time to
// stream the row from memory on the Zen 4 host, and the general path's 64-row query blocks take over
// beyond it.
constexpr int64_t kDecodeMaxRows = 64;

// Key rows per decode tile when Config.block_k is 0: K and V tiles of 32 rows x 128 fp32 take
// 2 x 16 KiB, the L1 of the Zen 4 host; larger head dims take fewer rows (kDecodeTileFloats).
constexpr int64_t kDecodeBlockK = 32;
constexpr int64_t kDecodeTileFloats = kDecodeBlockK * 128;

// Key/value heads one decode item reads together: as many as keep its fp32 K and V tiles (block_k
// keys of every head) within kDecodeItemTileBytes, in L2 while each head's rows are scored, and its
// per-head rows (Q and O) within kDecodeItemRowBytes; at most kMaxDecodeHeads (plan.h), or
// Config::decode_heads. At d = 128, f32 tiles of 32 keys: 8 heads, 4 KiB of each key's row of an
// [B, N, 8, 128] f32 cache read front to back.
constexpr int64_t kDecodeItemTileBytes = 256 << 10;
constexpr int64_t kDecodeItemRowBytes = 128 << 10;

// num_splits == 0 picks splits so that B·(head runs)·splits reaches kDecodeItems work items (enough for the
// threads of a large machine to balance), but never chunks shorter than kDecodeMinSplitKeys keys:
// a split adds R·(dv + 1) floats of partials and one combine step per row, worth it only when the
// chunk's K/V stream is long.
constexpr int64_t kDecodeItems = 64;
constexpr int64_t kDecodeMinSplitKeys = 512;

// Fewest key/value heads a work item reads together when a cache too short to split makes the plan
// cut head runs to reach kDecodeItems items: at d = 128, 2 KiB of each f32 key row (1 KiB bf16) stay
// contiguous. Measured on the 2-core Zen 5 host, B = 1, Nk = 256-512, Hk = 8: 1.7-1.9x against one
// item of 8 heads.
constexpr int64_t kDecodeMinHeads = 4;

// The shape of one decode call, chosen from the arguments alone (never from the thread count).
struct DecodePlan {
  int64_t rows = 0;     // g·max_q: most rows of one work item
  int64_t group = 1;    // g, query heads per key/value head
  int64_t max_q = 0;    // most query rows of one sequence
  int64_t block_k = 0;  // key rows per tile
  int64_t dpad = 0;     // q/k head dim rounded up to kMaxLanes
  int64_t dvpad = 0;    // v head dim rounded up to kMaxLanes
  int64_t splits = 1;   // key chunks per (sequence, key/value head)
  int64_t heads = 1;    // key/value heads per work item (the last run of a sequence may have fewer)
  int64_t head_runs = 1;  // ceil(Hk / heads): work items per (sequence, split)
  bool bias = false;    // an additive bias (each tile loads its rows' entries)
};

// Returns whether a validated forward call takes the decode path: Config.decode is on and every
// sequence has at most kDecodeMaxRows / g query rows. Depends on the shapes only.
bool decode_applies(const ForwardArgs& a, const Config& c, const Plan& p);

// Returns the decode plan of a call for which decode_applies holds; `requested_splits` is the
// caller's num_splits (0: chosen from the shape).
DecodePlan make_decode_plan(const ForwardArgs& a, const Config& c, const Plan& p, int64_t requested_splits);

// Returns the splits num_splits == 0 chooses for `sequences` sequences, `head_runs` work items per
// sequence and split, and at most `max_k` keys per sequence.
int64_t auto_splits(int64_t sequences, int64_t head_runs, int64_t max_k);

// Returns the first key of chunk c of a sequence with n keys cut into `splits` chunks (c == splits:
// n). Chunks are equal up to a multiple of block_k, so a chunk's tiles start where an unsplit
// call's would.
inline int64_t split_begin(int64_t n, int64_t splits, int64_t block_k, int64_t c) {
  const int64_t len = round_up(ceil_div(n, splits), block_k);
  return std::min(c * len, n);
}

// One decode work item's scratch, for dp.heads key/value heads (head t of the item: rows r =
// i·g + hg of query row i, head hg of the group, at t·rows + r). Q, O and the K, V tiles are per
// head; the score rows, bias rows and key norms serve one head at a time. At the default sizes the
// tiles sit in L2 and one head's part of them in L1.
struct DecodeScratch {
  float* q;       // [heads x rows x dpad] the item's query rows in fp32, zero-padded
  float* o;       // [heads x rows x dvpad] output accumulators
  float* kt;      // [heads x block_k x dpad] the current key tile in fp32, zero-padded
  float* vt;      // [heads x block_k x dvpad] the current value tile
  const void** krow;  // [heads x block_k] where each key row of the tile is read: the cache (rows of
                      // whole vectors: f32, bf16, f16 widened, quantized codes dequantized in
                      // registers), or its copy in kt
  const void** vrow;  // [heads x block_k] the same for the value rows
  float* kscale;  // [heads x block_k] scales of quantized key rows read in place (times
                  // DequantizeScaleFactor), else unused
  float* vscale;  // [heads x block_k] the same for the value rows
  bool* coded;    // [heads] whether the head's quantized rows are read in place this tile (else
                  // they are dequantized into kt / vt)
  float* s;       // [rows x kpad] one head's scores, then P (keys along the lanes)
  double* sd;     // [rows x kpad] raw scores in fp64 (exact scores only, else null)
  float* m;       // [heads x rows] running max
  float* l;       // [heads x rows] running sum
  float* alpha;   // [rows] one head's factors exp(m − m') of the current tile
  float* knorm;   // [heads x block_k] squared norms of the tile's key rows (adaptive exact scores only)
  float* bias;    // [rows x kpad] one head's bias rows, keys along the lanes (DecodePlan::bias, else null)
  int64_t kpad;   // block_k rounded up to kMaxLanes

  DecodeScratch(Carver& c, const DecodePlan& dp, bool exact)
      : q(c.take<float>(dp.heads * dp.rows * dp.dpad, kVectorAlign)),
        o(c.take<float>(dp.heads * dp.rows * dp.dvpad, kVectorAlign)),
        kt(c.take<float>(dp.heads * dp.block_k * dp.dpad, kVectorAlign)),
        vt(c.take<float>(dp.heads * dp.block_k * dp.dvpad, kVectorAlign)),
        krow(c.take<const void*>(dp.heads * dp.block_k, kVectorAlign)),
        vrow(c.take<const void*>(dp.heads * dp.block_k, kVectorAlign)),
        kscale(c.take<float>(dp.heads * dp.block_k, kVectorAlign)),
        vscale(c.take<float>(dp.heads * dp.block_k, kVectorAlign)),
        coded(c.take<bool>(dp.heads, kVectorAlign)),
        s(c.take<float>(dp.rows * round_up(dp.block_k, kMaxLanes), kVectorAlign)),
        sd(exact ? c.take<double>(dp.rows * round_up(dp.block_k, kMaxLanes), kVectorAlign) : nullptr),
        m(c.take<float>(dp.heads * dp.rows, kVectorAlign)),
        l(c.take<float>(dp.heads * dp.rows, kVectorAlign)),
        alpha(c.take<float>(dp.rows, kVectorAlign)),
        knorm(exact ? c.take<float>(dp.heads * dp.block_k, kVectorAlign) : nullptr),
        bias(dp.bias ? c.take<float>(dp.rows * round_up(dp.block_k, kMaxLanes), kVectorAlign) : nullptr),
        kpad(round_up(dp.block_k, kMaxLanes)) {}
};

// Floats of one thread's decode scratch, and of the call-wide partials (0 without splits).
size_t decode_scratch_floats(const DecodePlan& dp, bool exact_scores);
size_t decode_partial_floats(const DecodePlan& dp, int64_t sequences, int64_t heads_k, int64_t dv);

// Runs a decode-shaped forward call on Highway target `target`.
void decode_on_target(int64_t target, const ForwardArgs& a, const Plan& p, const DecodePlan& dp);

}  // namespace flashattn::cpu::detail
