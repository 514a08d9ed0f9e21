// flashattn::cpu — cache-tiled, SIMD (Highway, dynamic dispatch) and OpenMP attention.
//
// Forward uses online softmax and writes only out and lse; backward recomputes P tile by tile from
// lse. Extra memory never grows with seqlen_q · seqlen_k (workspace_bytes reports it): forward
// O(threads · tile · d), plus one fp32 copy of a k/v head per thread when k, v are 16-bit or their
// rows are not contiguous per head (bshd); backward O(threads · seqlen_k · (block_q + d)), plus fp32
// dK/dV partials per query head with GQA/MQA. Results are bitwise identical for any thread count and
// across repeated calls.
//
// Targets: every Highway target compiled in and supported by the CPU, plus "AVX3_BF16" where the
// CPU has AVX512_BF16 (checked at run time with CPUID; listed first, so it is the default there).
// AVX3_BF16 runs the best AVX-512 Highway target, except that the forward of bf16 inputs computes
// S = Q·Kᵀ and O += P·V with vdpbf16ps (bf16 products, fp32 accumulation) and P rounded to bf16
// (nearest even) first, as GPU flash kernels do; f32/f16 inputs and the backward are that AVX-512
// target's, bit for bit. Tiles with a nonzero bf16 input below 2^-56 in magnitude (subnormals
// included) use an exact widening kernel instead, so vdpbf16ps's denormals-are-zero cannot change
// a result (cpu/README.md, "Accuracy notes").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/args.hpp"

namespace flashattn::cpu {

// How fp32 inputs accumulate the scores S = Q·Kᵀ (16-bit inputs always use fp32: their outputs
// round far above its error). An fp32 dot product errs by ~2^-24·Σ|q_x·k_x| in S, an error in the
// exponent of P: harmless at ordinary score magnitudes, dominant at |S| ~ 1e2..1e4.
enum class ScorePrecision : uint8_t {
  adaptive,  // fp32, except tiles whose score bound |scale|·max‖q‖·max‖k‖ (+ ALiBi) exceeds
             // kExactScoreBound, and every tile of a soft-capped call (whose fp32 tanh rounds the
             // capped score several times), which accumulate in fp64
  fp64,      // every tile in fp64 (most accurate; fp32 forward ~1.5x slower)
  fp32,      // never fp64 (fastest; at large scores as wrong as a naive fp32 implementation)
};

// The score bound above which ScorePrecision::adaptive accumulates a tile's scores in fp64.
inline constexpr float kExactScoreBound = 64.0f;

struct Config {
  int block_q = 0;     // query rows per tile; 0: chosen from the cache sizes
  int block_k = 0;     // key rows per tile; 0: chosen from the cache sizes
  int threads = 0;     // OpenMP threads; 0: omp_get_max_threads()
  int64_t target = 0;  // one target bit to force (a Target::bit of targets()); 0: the first of targets()
  ScorePrecision scores = ScorePrecision::adaptive;  // fp32 inputs only (see above)
  int backward_blocks = 0;  // backward: query blocks that share one pass over the keys (1..16, each
                            // adds a P cache of seqlen_k x block_q floats); 0: 4 for long heads
                            // (fp32 K, V, dK, dV over 4 MiB), else 1. Results do not depend on it.
  bool renormalize = true;  // backward, fp32 inputs (ScorePrecision adaptive/fp64): P = exp(S − lse) is
                            // scaled by 1/Σ_j P over the call's keys, removing lse's rounding; exact
                            // when lse is this call's own. false: P as exp(S − lse) only — needed when
                            // lse covers more keys than the call (one block of a longer row, as
                            // flashattn::ring computes it)
  bool decode = true;  // forward: calls with at most 64 rows (query rows x query heads per key/value
                       // head) per sequence and key head take the decode path (one read of K/V for
                       // the whole GQA group, split-KV); false: always the general tiled path
  int decode_heads = 0;  // decode path: key/value heads one work item reads together, key by key in
                         // the cache's order (1..16); 0: as many as its tiles keep in L2. Each head's
                         // results do not depend on it, except through the split count num_splits = 0
                         // chooses (which follows the number of work items)
};

// A SIMD target compiled into the library and supported by this CPU.
struct Target {
  int64_t bit = 0;   // Highway target bit (HWY_AVX3, HWY_AVX2, ..., HWY_SCALAR), or flashattn's own
                     // bit of "AVX3_BF16" (1 << 1, a bit Highway 1.0.3 reserves)
  std::string name;  // e.g. "AVX3", "AVX3_BF16"
};

// Returns the compiled targets this CPU can run, best first. The CPU is asked once per process, at
// the first call into the library (Highway's target mask for tests, hwy::SetSupportedTargetsForTest,
// must be set before it to take effect).
std::vector<Target> targets();

// This machine's per-core L1 data and L2 cache sizes in bytes as the library reads them (sysconf,
// else cpu0's entries in /sys/devices/system/cpu/cpu0/cache), 0 where neither says. The default key
// tile is derived from them (cpu/README.md; an unknown size is taken as 32 KiB L1d / 1 MiB L2).
// Read once per process.
struct CacheSizes {
  int64_t l1d = 0;
  int64_t l2 = 0;
};
CacheSizes cache_sizes();

// Validates `a` and computes out (and lse if set).
void forward(const ForwardArgs& a, const Config& c = {});

// Validates `a` and computes dq, dk, dv from q, k, v, out, lse and dout.
void backward(const BackwardArgs& a, const Config& c = {});

// Returns the bytes of scratch memory a call with these arguments allocates beyond its inputs and
// outputs (0 once per-thread scratch has been allocated and is reused, is not assumed).
size_t workspace_bytes(const ForwardArgs& a, const Config& c = {});
size_t workspace_bytes(const BackwardArgs& a, const Config& c = {});

}  // namespace flashattn::cpu
