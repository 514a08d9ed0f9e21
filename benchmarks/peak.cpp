// FMA ceiling microbenchmark. See peak.hpp.
#include "peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "simd_kernels.hpp"

namespace bench {

namespace {
constexpr int kTrials = 3;
constexpr int64_t kCalibrationIters = 1 << 16;
}  // namespace

double measure_fma_peak_gflops(int threads, double seconds) {
  using clock = std::chrono::steady_clock;
  // Calibrate iterations per trial from one single-thread run.
  const auto c0 = clock::now();
  fma_loop(kCalibrationIters);
  const double cal = std::chrono::duration<double>(clock::now() - c0).count();
  const double per_trial = seconds / kTrials;
  const int64_t iters = std::max<int64_t>(kCalibrationIters, static_cast<int64_t>(kCalibrationIters * per_trial / std::max(cal, 1e-9)));
  double best = 0;
  for (int t = 0; t < kTrials; ++t) {
    double flops = 0;
    const auto t0 = clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += fma_loop(iters);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, flops / s * 1e-9);
  }
  return best;
}

}  // namespace bench
