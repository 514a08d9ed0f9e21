// The bf16 dot-product ceiling loop. Its own translation unit, compiled with -mavx512bf16 (see
// CMakeLists.txt): the instruction is not part of the Highway targets the rest of the benchmark is
// built for, and the caller runs it only after bf16_dot_supported() says the CPU has it.
#include "bf16_peak.hpp"

#include <immintrin.h>

namespace bench {

namespace {
// Independent accumulator chains: like the FMA loop, two pipes × a few cycles of latency need at
// least 8 in flight; 12 fits the 32 AVX-512 registers with the two operands.
constexpr int kDotChains = 12;
// FLOPs of one 512-bit vdpbf16ps: 16 fp32 lanes, each adds two bf16 products (2 multiplies + 2 adds).
constexpr double kFlopsPerDot = 64;
}  // namespace

double bf16_dot_loop(int64_t iters) {
  // Every pair contributes 2^-10 · 2^-10 · 2 = 2^-19 per lane and step: the accumulators grow
  // linearly and stay finite (and far from subnormal) for any iteration count.
  const __m512 ones = _mm512_set1_ps(1.0f / 1024);
  const __m512bh a = _mm512_cvtne2ps_pbh(ones, ones);
  const __m512bh b = a;
  __m512 acc[kDotChains];
  for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  for (int64_t i = 0; i < iters; ++i) {
    // Fully unrolled by the compiler (constant trip count): 12 independent vdpbf16ps per step.
    for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kDotChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  // A plain store rather than _mm512_reduce_add_ps, whose GCC 12 header trips -Wuninitialized.
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  volatile float sink = lanes[0] + lanes[15];
  (void)sink;
  return kFlopsPerDot * kDotChains * static_cast<double>(iters);
}

}  // namespace bench
