// Streaming-read microbenchmark (see read_bandwidth.hpp): a Highway kernel compiled per SIMD target
// and dispatched at run time, summing the buffer with independent vector accumulators so loads,
// not the add latency, bound it.
#include "read_bandwidth.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "read_bandwidth.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>

HWY_BEFORE_NAMESPACE();
namespace bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns the sum of n floats (n a multiple of 8 vectors; data aligned), read once.
float SumFloats(const float* HWY_RESTRICT data, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  auto a4 = hn::Zero(d), a5 = hn::Zero(d), a6 = hn::Zero(d), a7 = hn::Zero(d);
  for (int64_t i = 0; i + 8 * L <= n; i += 8 * L) {
    a0 = hn::Add(a0, hn::Load(d, data + i));
    a1 = hn::Add(a1, hn::Load(d, data + i + L));
    a2 = hn::Add(a2, hn::Load(d, data + i + 2 * L));
    a3 = hn::Add(a3, hn::Load(d, data + i + 3 * L));
    a4 = hn::Add(a4, hn::Load(d, data + i + 4 * L));
    a5 = hn::Add(a5, hn::Load(d, data + i + 5 * L));
    a6 = hn::Add(a6, hn::Load(d, data + i + 6 * L));
    a7 = hn::Add(a7, hn::Load(d, data + i + 7 * L));
  }
  const auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

}  // namespace HWY_NAMESPACE
}  // namespace bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bench {
HWY_EXPORT(SumFloats);

namespace {
constexpr int kTrials = 5;
constexpr size_t kAlign = 4096;
}  // namespace

double measure_read_bandwidth_gbps(int threads, size_t bytes, double seconds) {
  using clock = std::chrono::steady_clock;
  // Each thread's share: a whole number of 4 KiB blocks (so of 8 vectors of any target).
  const size_t share = bytes / static_cast<size_t>(threads) / kAlign * kAlign;
  const size_t total = share * static_cast<size_t>(threads);
  auto* data = static_cast<float*>(std::aligned_alloc(kAlign, total));
  if (!data) throw std::bad_alloc();
  const int64_t n = static_cast<int64_t>(share / sizeof(float));
#pragma omp parallel num_threads(threads)
  {
    float* mine = data + static_cast<int64_t>(omp_get_thread_num()) * n;
    for (int64_t i = 0; i < n; ++i) mine[i] = static_cast<float>(i & 1023) * 1e-3f;
  }
  double best = 0;
  volatile float sink = 0;
  const auto start = clock::now();
  for (int t = 0; t < kTrials || std::chrono::duration<double>(clock::now() - start).count() < seconds; ++t) {
    float sum = 0;
    const auto t0 = clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    sum += HWY_DYNAMIC_DISPATCH(SumFloats)(data + static_cast<int64_t>(omp_get_thread_num()) * n, n);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    sink = sink + sum;
    best = std::max(best, static_cast<double>(total) / s * 1e-9);
    if (t > 50) break;
  }
  std::free(data);
  return best;
}

}  // namespace bench
#endif  // HWY_ONCE
