// Ceiling microbenchmarks. See peak.hpp.
#include "peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "bf16_peak.hpp"
#include "simd_kernels.hpp"

namespace bench {

namespace {
constexpr int kTrials = 3;
constexpr int64_t kCalibrationIters = 1 << 16;

// Runs `loop` (iterations -> FLOPs) on `threads` threads for about `seconds` in kTrials trials and
// returns the best rate in GFLOP/s.
template <typename Loop>
double measure_peak(Loop loop, int threads, double seconds) {
  using clock = std::chrono::steady_clock;
  // Calibrate iterations per trial from one single-thread run.
  const auto c0 = clock::now();
  loop(kCalibrationIters);
  const double cal = std::chrono::duration<double>(clock::now() - c0).count();
  const double per_trial = seconds / kTrials;
  const int64_t iters = std::max<int64_t>(kCalibrationIters, static_cast<int64_t>(kCalibrationIters * per_trial / std::max(cal, 1e-9)));
  double best = 0;
  for (int t = 0; t < kTrials; ++t) {
    double flops = 0;
    const auto t0 = clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += loop(iters);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, flops / s * 1e-9);
  }
  return best;
}
}  // namespace

bool bf16_dot_supported() { return __builtin_cpu_supports("avx512bf16") && avx512_enabled(); }

double measure_fma_peak_gflops(int threads, double seconds) { return measure_peak(fma_loop, threads, seconds); }

double measure_bf16_peak_gflops(int threads, double seconds) {
  return bf16_dot_supported() ? measure_peak(bf16_dot_loop, threads, seconds) : 0;
}

}  // namespace bench
