// Tile shapes of every kernel, per head dim: the constexpr sizes the kernels and launchers share.
// Each shape keeps the fp32 accumulators of a thread in registers (checked with -Xptxas -v, see
// docs/gpu.md) and the shared memory of a block under sm_80's 163 KB opt-in limit.
#pragma once

#include "tile.cuh"

namespace flashattn::gpu::detail {

constexpr int kWarps = 4;  // warps per block of every attention kernel
constexpr int kThreadsPerBlock = kWarps * kWarpSize;
constexpr int kMaxSmemSm80 = 163 * 1024;  // largest dynamic shared memory a block may opt into on sm_80

// The quantized K/V forward (quantized_kernel.cuh): one warp per query row, head dims up to
// kQuantMaxDim; split-KV cuts each row's keys into runs of whole kQuantTileKeys-key tiles.
constexpr int kQuantTileKeys = 64;
constexpr int kQuantMaxDim = 256;

// Forward: each warp owns kRowTiles stacked 16-row m-tiles of the block's query rows (a slab of
// 16·kRowTiles rows); the kSplit warps of a slab each compute the slab's S (the same values) and
// accumulate kOCols = DV/kSplit columns of O, which bounds O to kRowTiles·DV/kSplit registers per
// thread (kSplit = 1 up to dv 256; 4 for MLA's dv 512). Two m-tiles per warp (dv ≤ 128: 128-row
// blocks) let every K and V fragment read by ldmatrix feed two HMMAs; d = 256 and dv = 512 keep one
// (their O alone takes 128 registers per m-tile), and so does the variant with the options' code
// (kExtras) above d = 64, where two m-tiles spill. K/V tiles of kBc keys, double-buffered: 64 up to
// d = 128 (FlashAttention-2's tile at d = 128: barriers, waits, row-maximum reductions and Q
// fragment reads per key halve against 32), 32 above, where O alone takes 128 registers per m-tile.
template <int D, int DV = D, bool kExtras = false>
struct ForwardTraits {
  static constexpr int kThreads = kThreadsPerBlock;
  static constexpr int kSplit = DV <= 256 ? 1 : 4;
  static constexpr int kRowTiles = (kExtras ? D <= 64 && DV <= 64 : D <= 128 && DV <= 128) ? 2 : 1;
  static constexpr int kBr = kWarps / kSplit * kMmaRows * kRowTiles;
  static constexpr int kOCols = DV / kSplit;
  static_assert(kOCols % 16 == 0, "each warp's O columns must be whole ldmatrix pairs");
  static constexpr int kBc = D <= 128 && DV <= 128 ? 64 : 32;
  static constexpr int kSmemBytes =
      TileLayout<kBr, D>::kBytes + 2 * TileLayout<kBc, D>::kBytes + 2 * TileLayout<kBc, DV>::kBytes;
  static_assert(kSmemBytes <= kMaxSmemSm80, "forward tiles exceed shared memory");
};

// The tiles of the sm_90a forward: kBr query rows (two consumer warpgroups of 64), kBc keys per
// stage, 16-bit elements in boxes of 64 columns (one 128-byte swizzle row each).
template <int D>
struct Sm90ForwardTraits {
  static_assert(D == 64 || D == 128, "the sm_90a forward has head dims 64 and 128");
  static constexpr int kBr = 128, kBc = 128, kStages = 2, kThreads = 384, kBoxCols = 64;
  static constexpr int kBoxes = D / kBoxCols;                     // boxes across a row
  static constexpr uint32_t kQBytes = kBr * D * 2, kKvBytes = kBc * D * 2;
  static constexpr uint32_t kBoxBytesQ = kBr * kBoxCols * 2, kBoxBytesKv = kBc * kBoxCols * 2;
  // Q, then K and V per stage, then the barriers; +1024 for aligning the base to the swizzle pattern.
  static constexpr uint32_t kBarOffset = kQBytes + 2 * kStages * kKvBytes;
  static constexpr int kSmemBytes = static_cast<int>(kBarOffset + 64 + 1024);
};

// The launch shape of a forward variant: query rows and keys per tile, dynamic shared memory.
struct ForwardShape {
  int br = 0, bc = 0, smem = 0;
};
// Returns the launch shape of the forward variant with (extras) or without the options' code.
template <int D, int DV>
constexpr ForwardShape forward_shape(bool extras) {
  using E = ForwardTraits<D, DV, true>;
  using P = ForwardTraits<D, DV, false>;
  return extras ? ForwardShape{E::kBr, E::kBc, E::kSmemBytes} : ForwardShape{P::kBr, P::kBc, P::kSmemBytes};
}

// Backward dK/dV kernel: a block owns kBc keys of one key/value head and walks every query block
// (of kBr rows) of every query head of its group. Warps form kBc/16 slabs of 16 keys; the kSplit
// warps of a slab each accumulate D/kSplit columns of dK and dV, which bounds the two accumulators
// to D/kSplit registers per thread.
//
// The plain variant (no options' code) at d = 96/128: kSplit 1 over 8 warps, so a block holds 128
// keys and adds each dQ element once per 128 keys (FlashAttention-2's count); each warp keeps all
// d columns of dK and dV (128 registers at d = 128) beside Sᵀ and dPᵀ of its 16 keys. The H100 run
// of the 64-key blocks (two warps per slab) found the backward issuing twice FA2's instructions per
// FLOP: every per-step cost (barriers, the element loop's setup, the dQ step's dSᵀ fragments) was
// paid per 64 keys.
//
// kShare (kSplit > 1 with whole 16-query steps per warp: the options' variants at d = 96, 128): the
// kSplit warps of a slab also split the slab's Sᵀ and dPᵀ by query columns (kQPart each) and
// exchange Pᵀ∘Z and dSᵀ through shared memory ([key][query], rounded to T as they enter the tensor
// cores), instead of each warp recomputing the slab's whole Sᵀ and dPᵀ; 8 warps hold 64 keys.
// Otherwise one warp holds all kBr query columns (kSplit 1: Pᵀ and dSᵀ stay in registers; d = 256:
// every split warp recomputes them; 8 warps hold 32 keys) and only dSᵀ goes to shared memory,
// for the dQ step.
//
// Query blocks of 64 rows up to d = 128 (32 above): the Q and dO fragments a warp reads for Sᵀ and
// dPᵀ then serve twice the HMMAs per key fragment, and the dQ step gives each warp 16 rows and
// D/kQSplit columns (docs/gpu.md, "Performance model"). The options' variants keep 64-key blocks
// (their code does not fit beside whole-d accumulators; block masks mark loaded rows in 64 bits),
// so a call's grid follows its variant (backward_shape).
template <int D, int DV = D, bool kExtras = false>
struct BackwardTraits {
  static constexpr bool kWide = D <= 128 && DV <= 128 && (D > 64 || DV > 64);  // d = 96, 128
  static constexpr int kSplit = D <= 64 && DV <= 64 ? 1 : kWide ? (kExtras ? 2 : 1) : 4;
  // Warps per block: 8 at d = 96/128 (128 keys, one warp per slab, without the options' code; 64
  // keys, two warps per slab, with it) and above d = 128 (32 keys, four warps per slab: 16 keys
  // per block left the atomic dQ, one reduction of the block's query rows per 16 keys, the model's
  // binding term); 4 at d = 32/64. (d = 32/64 with 8 warps and 128 keys ran 1-3 % slower on the
  // H100: one 8-warp block per SM stalls all its warps at each barrier, where two 4-warp blocks
  // cover each other's; that cost 17 %, halving the dQ reductions bought back 14 %.)
  static constexpr int kBlockWarps = kWide || kSplit == 4 ? 2 * kWarps : kWarps;
  static constexpr int kThreads = kBlockWarps * kWarpSize;
  static constexpr int kBc = kBlockWarps / kSplit * kMmaRows;
  static constexpr int kBr = D <= 128 && DV <= 128 ? 64 : 32;
  static constexpr bool kShare = kSplit > 1 && (kBr / kSplit) % kMmaRows == 0;
  static constexpr int kQPart = kShare ? kBr / kSplit : kBr;  // query columns of Sᵀ a warp computes
  static constexpr int kCols = D / kSplit;    // dK columns per warp
  static constexpr int kVCols = DV / kSplit;  // dV columns per warp
  static_assert(kCols % 16 == 0 && kVCols % 16 == 0, "each warp's dK/dV columns must be whole ldmatrix pairs");
  // The dQ step: warps form kBr/16 slabs of 16 query rows, kQSplit warps per slab split the columns.
  static constexpr int kQSlabs = kBr / kMmaRows;
  static constexpr int kQSplit = kBlockWarps / kQSlabs;
  static constexpr int kQCols = D / kQSplit;
  static_assert(kBlockWarps % kQSlabs == 0 && kQCols % 16 == 0, "dQ step must split evenly");
  using KL = TileLayout<kBc, D>;
  using VL = TileLayout<kBc, DV>;
  using QL = TileLayout<kBr, D>;
  using OL = TileLayout<kBr, DV>;   // dO
  using PL = TileLayout<kBc, kBr>;  // Pᵀ∘Z (kShare only) and dSᵀ, [key][query]
  static constexpr int kSmemBytes =
      KL::kBytes + VL::kBytes + 2 * QL::kBytes + 2 * OL::kBytes + 4 * kBr * 4 + (kShare ? 2 : 1) * PL::kBytes;
  static_assert(kSmemBytes <= kMaxSmemSm80, "backward tiles exceed shared memory");
};

// The launch shape of a dK/dV variant: keys per block, threads per block, dynamic shared memory.
struct BackwardShape {
  int bc = 0, threads = 0, smem = 0;
};
// Returns the launch shape of the dK/dV variant with (extras) or without the options' code.
template <int D, int DV>
constexpr BackwardShape backward_shape(bool extras) {
  using E = BackwardTraits<D, DV, true>;
  using P = BackwardTraits<D, DV, false>;
  return extras ? BackwardShape{E::kBc, E::kThreads, E::kSmemBytes} : BackwardShape{P::kBc, P::kThreads, P::kSmemBytes};
}

// Deterministic dQ kernel: like the forward, a block owns kBr query rows (16 per warp) and streams
// K/V tiles of kBc keys, double-buffered.
template <int D, int DV = D>
struct DqTraits {
  static constexpr int kThreads = kThreadsPerBlock;
  static constexpr int kBr = kWarps * kMmaRows;
  static constexpr int kBc = D <= 128 ? 64 : 16;  // d=256: dQ takes 128 registers; 32 keys spilled
  static constexpr int kSmemBytes = TileLayout<kBr, D>::kBytes + TileLayout<kBr, DV>::kBytes +
                                    2 * TileLayout<kBc, D>::kBytes + 2 * TileLayout<kBc, DV>::kBytes;
  static_assert(kSmemBytes <= kMaxSmemSm80, "dq tiles exceed shared memory");
};

}  // namespace flashattn::gpu::detail
