// Internal interface of flashattn::cpu: the per-call plan (tile sizes, threads, target) and the
// per-thread scratch layout shared by the kernels and workspace_bytes. Includes only hwy/base.h
// (no per-target SIMD code here, so any file can include it); the SIMD code lives in forward.cc /
// backward.cc.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "flashattn/args.hpp"
#include "flashattn/cpu.hpp"
#include "hwy/base.h"

namespace flashattn::cpu::detail {

// Widest float vector of any compiled target (AVX-512: 16 lanes). Tile rows and padded head dims are
// rounded up to it, so the scratch layout does not depend on the target that runs.
constexpr int64_t kMaxLanes = 16;

// Default query rows per tile: 4 AVX-512 vectors, exactly one panel of the micro-kernel (gemm-inl.h);
// not a cache size: narrower panels measured 25 % slower (docs/cpu-design.md, "Tile sizes").
constexpr int kDefaultBlockQ = 64;

// Per-core cache sizes the default key tile is derived from (default_block_k).
using ::flashattn::cpu::CacheSizes;
// Used when the sizes cannot be read: the smaller L1d of the development hosts (Zen 4) and their L2.
constexpr CacheSizes kFallbackCaches{32 << 10, 1 << 20};
// The default key tile is a power of two in [kMinDefaultBlockK, kMaxDefaultBlockK]: below 64 keys the
// per-tile softmax and mask work dominates; above 256 no measured shape gained.
constexpr int64_t kMinDefaultBlockK = 64;
constexpr int64_t kMaxDefaultBlockK = 256;

// Returns this machine's per-core L1d and L2 sizes (cache_sizes()), kFallbackCaches' for a size
// that cannot be read.
CacheSizes detected_caches();

// Returns the default key rows per tile for a padded head dim dpad (docs/cpu-design.md, "Tile sizes"):
// the largest power of two in [kMinDefaultBlockK, kMaxDefaultBlockK] such that
//   (L1) the P tile the O product streams from L1, block_k x kDefaultBlockQ elements, takes at most
//        2/3 of the L1d (the rest holds the broadcast rows and the output panel), and
//   (L2) one step's K and V blocks, 2 x block_k x dpad elements, take at most 1/8 of the L2 (the
//        Qᵀ, S, P and Oᵀ tiles, the next blocks in flight and the other pass's data share it),
// with elements of `element_bytes`: 4 (fp32 products), or 2 for the bf16 tile products (Plan::
// bf16_dot), whose P and K/V operands are bf16 pairs.
// fp32, 48 KiB L1d, 1 MiB L2 (Zen 5, where the tiles were tuned): 128 for d <= 128, 64 for d in
// (128, 256]; 32 KiB L1d (Zen 4): 64, and 128 for bf16. A function of the caches, d and the
// products only, never of the thread count, so results stay bitwise the same for any number of
// threads on one machine (other tiles round differently).
int64_t default_block_k(const CacheSizes& caches, int64_t dpad, int64_t element_bytes = 4);


// The backward's default key rows per tile under a causal mask with at most kShortCausalKeys keys is
// at most this: there the masked-off part of the diagonal tiles is a visible share of the work, and
// halving the key tile halves it (N = 1024, d = 128: 5-6 % faster on Zen 5; tile sweep in
// benchmarks/RESULTS.md). Longer sequences and the forward measure best (within noise) with the
// default_block_k tiles.
constexpr int64_t kBackwardCausalBlockK = 64;
constexpr int64_t kShortCausalKeys = 2048;

// Query rows whose dK, dV contributions the backward sums in a group accumulator before adding them
// to the head's: every fp32 dK, dV element otherwise takes one FMA per query row into one running
// sum, and a 16.8M-row sequence of same-sign terms lost 5 % of dv to that chain
// (tests/reliability/huge.cpp); with groups the chains are at most this many FMAs plus one add per
// group. Only sequences longer than one group get the extra accumulators (backward_grouped).
constexpr int64_t kAccumulateGroupRows = 16384;

// Most query blocks one backward pass over the keys may carry (Config::backward_blocks), and the
// default for a head whose fp32 K, V, dK and dV (4·seqlen_k·dpad floats) outgrow kBackwardHeadBytes:
// the pass then streams them from memory (or L3) once per kDefaultPassBlocks query blocks instead of
// once per block (docs/cpu-design.md, "The backward"). Smaller heads stay in cache; one block
// per pass keeps their P cache small.
constexpr int64_t kMaxPassBlocks = 16;

// Most key/value heads one decode work item reads together (Config::decode_heads; decode.h).
constexpr int64_t kMaxDecodeHeads = 16;
constexpr int64_t kDefaultPassBlocks = 4;
constexpr int64_t kBackwardHeadBytes = 4 << 20;

// Returns n rounded up to a multiple of m (m > 0).
constexpr int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Returns ceil(n / m) (m > 0).
constexpr int64_t ceil_div(int64_t n, int64_t m) { return (n + m - 1) / m; }

// Row stride in floats of the fp32 k, v head copies (kv.h) of head dim `dim`: whole 64-byte lines,
// an odd number of them. The products read a key block a line per row at a time (Vᵀ's broadcasts
// step down the rows); rows an even number of lines apart share a fraction of the L1 sets (a
// 512-byte stride: one in 8), and on an 8-way 32 KiB L1d (Zen 3) a 64-key block of d = 128 filled
// those sets by itself and evicted the other operand at every step. Padding never read.
constexpr int64_t kv_copy_stride(int64_t dim) {
  const int64_t lines = ceil_div(dim, 16);
  return (lines % 2 == 0 ? lines + 1 : lines) * 16;
}

// Everything a kernel needs besides the arguments: chosen once per call.
struct Plan {
  int64_t block_q = 0;   // query rows per tile
  int64_t block_k = 0;   // key rows per tile
  int64_t pass_blocks = 1;  // backward: query blocks per pass over the keys (<= kMaxPassBlocks)
  int64_t qpad = 0;      // block_q rounded up to kMaxLanes: row stride of the transposed tiles
  int64_t dpad = 0;      // head dim rounded up to kMaxLanes: row stride of row-major padded tiles
  int64_t dim = 0;       // head dim
  int threads = 1;       // OpenMP threads
  int64_t max_q = 0;     // most query rows of one sequence
  int64_t max_k = 0;     // most key rows of one sequence
  int64_t group = 1;     // query heads per key/value head
  int64_t sequences = 0; // num_sequences of the call
  int64_t heads_q = 0;   // query heads
  bool copy_kv = false;     // k, v are 16-bit or not contiguous per head: copied to fp32 rows (kv.h)
  int64_t kv_ld = 0;        // row stride (floats) of those copies: kv_copy_stride(dim)
  bool softcap = false;     // soft-capping is on (the backward caches tanh beside P)
  bool exact_scores = false;  // fp32 inputs: tiles may accumulate S = Q·Kᵀ in fp64 (score-inl.h, "Exact scores")
  ScorePrecision scores = ScorePrecision::adaptive;  // which tiles do (exact_tile)
  bool renormalize = true;  // backward: Config::renormalize
  bool bf16_dot = false;    // bf16 inputs on kTargetAvx3Bf16: bf16 tile products (bf16_dot.h), both passes
  bool bias = false;        // an additive bias: tiles load theirs (bias-inl.h)
  bool dropout = false;     // dropout_p > 0: P dropped per tile (dropout-inl.h)
  bool dbias = false;       // backward: dbias is requested (the dbias pass, backward.cc)
  uint64_t call_id = 0;     // unique per call: invalidates per-thread caches of converted k, v
};

// Returns whether a tile of an fp32-input call accumulates its scores in fp64, given a bound on the
// magnitude of its scores (score_bound; NaN or ∞ for non-finite inputs, which take the fp64 path).
// Soft-capped fp32 scores always do: the fp32 path's tanh (Highway's, up to 4 ulp, after a
// multiplication by a rounded 1/softcap) put several roundings of the capped score into P and into
// the derivative 1 − t², where a naive fp32 implementation has one each — dq 1.8x and out 1.1x the
// tolerance bound in 20,000-case runs (docs/reliability.md). The fp64 path rounds S once.
inline bool exact_tile(const Plan& p, float score_bound) {
  if (!p.exact_scores || p.scores == ScorePrecision::fp32) return false;
  return p.scores == ScorePrecision::fp64 || p.softcap || !(score_bound <= kExactScoreBound);
}

// Returns the query blocks of one backward accumulation group (kAccumulateGroupRows rows, at least one).
inline int64_t group_blocks(const Plan& p) { return std::max<int64_t>(kAccumulateGroupRows / p.block_q, 1); }

// Returns whether a sequence's query blocks outnumber one accumulation group, so the backward sums
// dK, dV per group first.
inline bool backward_grouped(const Plan& p) { return ceil_div(p.max_q, p.block_q) > group_blocks(p); }

// The key tile of a call whose Config leaves block_k at 0: default_block_k on this machine's caches,
// capped for a short causal backward (kBackwardCausalBlockK).
int64_t default_key_tile(const AttentionArgs& a, const Plan& p, bool backward, int64_t element_bytes);

// Makes the tiles of a call with a block mask divide the mask's blocks (block_q and block_k become
// their largest divisors not above the chosen tiles), so a tile lies inside one block: tiles of
// unlisted blocks are skipped whole and never read, and a tile is one block-kind lookup. Speed
// needs block sizes with a divisor near the tiles (multiples of 16 or 64, as FlexAttention's 128).
void align_to_block_mask(Plan& p, const AttentionArgs& a);

// Throws Error naming the first field of c that is out of range (make_plan calls it).
void check_config(const Config& c);

// Returns the plan of a validated forward or backward call (tile sizes from the config or the
// defaults, which differ by pass).
Plan make_plan(const AttentionArgs& a, const Config& c, bool backward);

// Slots of the forward's shared fp32 k, v head copies (kv.h SharedKv): one per thread. A thread
// releases its slot before it looks for another head, so it always finds a free one.
inline int shared_kv_slots(const Plan& p) { return p.threads; }

// Floats of the forward's call-wide buffer of shared k, v head copies (0 when read in place).
size_t forward_shared_floats(const Plan& p);

// Floats of per-thread scratch the forward and backward kernels use, counted from the layouts they
// place (scratch.h), used both to allocate and to report.
size_t forward_scratch_floats(const Plan& p);
size_t backward_scratch_floats(const Plan& p);
// Floats of the call-wide fp32 buffer of per-query-head dK, dV partials the backward sums over
// each group in fixed order (0 without GQA/MQA).
size_t backward_partial_floats(const Plan& p);

// Returns per-thread scratch of at least `floats` floats, aligned to 64 bytes. The buffer belongs to
// the calling thread and is reused by later calls on that thread (first-touch page faults are costly).
float* thread_scratch(size_t floats);

// Returns a buffer of at least `floats` floats for one call's shared data, owned by the calling
// thread (separate from thread_scratch, which the calling thread also uses as an OpenMP worker).
float* call_scratch(size_t floats);

// Runs the forward / backward of a validated call on Highway target `target` (one bit).
void forward_on_target(int64_t target, const ForwardArgs& a, const Plan& p);
void backward_on_target(int64_t target, const BackwardArgs& a, const Plan& p);

// The target bit of the AVX512_BF16 path (Config::target, targets()): not a Highway target but
// flashattn's own, in a bit Highway 1.0.3 reserves (targets.cc checks that no compiled Highway target
// uses it). It runs the best AVX-512 Highway target (avx512_base_target) with the tile products of
// bf16 inputs, forward and backward, done by vdpbf16ps (Plan::bf16_dot); every other call on it
// (f32, f16) is exactly that Highway target's.
constexpr int64_t kTargetAvx3Bf16 = int64_t{1} << 1;

// Returns the Highway target a call on `target` runs: avx512_base_target() for kTargetAvx3Bf16, else
// `target` itself.
int64_t hwy_target_of(int64_t target);

// Sets the plan of a call on kTargetAvx3Bf16: bf16 forwards and backwards use the bf16 tile
// products, which read the 16-bit k, v rows themselves (no fp32 head copy), with the default key
// tile of 2-byte operands when c.block_k is 0.
void use_bf16_dot(Plan& p, const AttentionArgs& a, const Config& c, bool backward);

// Returns the index of `target` in a HWY_EXPORT dispatch table of this library (for
// kTargetAvx3Bf16, its Highway target's).
size_t dispatch_index(int64_t target);

}  // namespace flashattn::cpu::detail
