// Highway kernels of the benchmark, compiled once per SIMD target and dispatched at run time.
#include "simd_kernels.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>
#include "flashattn/mask.hpp"
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Independent FMA chains: two FMA pipes × 4-cycle latency need ≥ 8 in flight; 12 leaves margin
// and still fits the 16 (AVX2) or 32 (AVX-512) vector registers.
constexpr int kFmaChains = 12;

double FmaLoop(int64_t iters) {
  const hn::ScalableTag<float> d;
  // a ← a·m + c converges to c / (1 − m): values stay finite for any iteration count.
  const auto m = hn::Set(d, 0.999999f);
  const auto c = hn::Set(d, 1e-6f);
  auto a0 = hn::Set(d, 0.0f), a1 = hn::Set(d, 0.1f), a2 = hn::Set(d, 0.2f), a3 = hn::Set(d, 0.3f);
  auto a4 = hn::Set(d, 0.4f), a5 = hn::Set(d, 0.5f), a6 = hn::Set(d, 0.6f), a7 = hn::Set(d, 0.7f);
  auto a8 = hn::Set(d, 0.8f), a9 = hn::Set(d, 0.9f), a10 = hn::Set(d, 1.0f), a11 = hn::Set(d, 1.1f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, c); a1 = hn::MulAdd(a1, m, c); a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c); a4 = hn::MulAdd(a4, m, c); a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c); a7 = hn::MulAdd(a7, m, c); a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c); a10 = hn::MulAdd(a10, m, c); a11 = hn::MulAdd(a11, m, c);
  }
  auto sum = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  sum = hn::Add(sum, hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  volatile float sink = hn::GetLane(hn::SumOfLanes(d, sum));
  (void)sink;
  return 2.0 * static_cast<double>(kFmaChains) * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iters);
}

int64_t Target() { return HWY_TARGET; }

HWY_INLINE float SoftmaxRow(float* s, int64_t n, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (begin >= end) {
    for (int64_t j = 0; j < n; ++j) s[j] = 0.0f;
    return neg_inf;
  }
  // Tail lanes are padded with -inf: max ignores them and Exp(-inf) = 0.
  HWY_ALIGN float tail[hn::MaxLanes(d)];
  auto load_tail = [&](int64_t j) {
    for (int64_t l = 0; l < N; ++l) tail[l] = j + l < end ? s[j + l] : neg_inf;
    return hn::Load(d, tail);
  };
  auto vmax = hn::Set(d, neg_inf);
  int64_t j = begin;
  for (; j + N <= end; j += N) vmax = hn::Max(vmax, hn::LoadU(d, s + j));
  if (j < end) vmax = hn::Max(vmax, load_tail(j));
  const float mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
  const auto vm = hn::Set(d, mx);

  auto vsum = hn::Zero(d);
  for (j = begin; j + N <= end; j += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vm));
    hn::StoreU(e, d, s + j);
    vsum = hn::Add(vsum, e);
  }
  if (j < end) {
    const auto e = hn::Exp(d, hn::Sub(load_tail(j), vm));
    vsum = hn::Add(vsum, e);
    hn::Store(e, d, tail);
    for (int64_t l = 0; j + l < end; ++l) s[j + l] = tail[l];
  }
  const float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
  const auto inv = hn::Set(d, 1.0f / sum);
  for (j = begin; j + N <= end; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, s + j), inv), d, s + j);
  for (; j < end; ++j) s[j] *= 1.0f / sum;
  for (j = 0; j < begin; ++j) s[j] = 0.0f;
  for (j = end; j < n; ++j) s[j] = 0.0f;
  return mx + std::log(sum);
}

HWY_INLINE void SoftmaxGradRow(float* dp, const float* p, float D, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vD = hn::Set(d, D);
  int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::Mul(hn::LoadU(d, p + j), hn::Sub(hn::LoadU(d, dp + j), vD)), d, dp + j);
  for (; j < n; ++j) dp[j] = p[j] * (dp[j] - D);
}

void SoftmaxRows(float* s, int64_t rows, int64_t n, const flashattn::Mask* m, float* lse) {
  for (int64_t i = 0; i < rows; ++i) lse[i] = SoftmaxRow(s + i * n, n, m->key_begin(i), m->key_end(i));
}

void SoftmaxGradRows(float* dp, const float* p, const float* D, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows; ++i) SoftmaxGradRow(dp + i * n, p + i * n, D[i], n);
}

}  // namespace HWY_NAMESPACE
}  // namespace bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bench {
HWY_EXPORT(FmaLoop);
HWY_EXPORT(Target);
HWY_EXPORT(SoftmaxRows);
HWY_EXPORT(SoftmaxGradRows);

double fma_loop(int64_t iters) { return HWY_DYNAMIC_DISPATCH(FmaLoop)(iters); }
std::string simd_target_name() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(Target)()); }

std::string limit_simd_target(const std::string& name) {
  const int64_t usable = HWY_TARGETS & hwy::SupportedTargets();
  std::string known;
  for (int64_t rest = HWY_TARGETS; rest != 0; rest &= rest - 1) {
    const int64_t bit = rest & -rest;
    if (name != hwy::TargetName(bit)) {
      known += std::string(known.empty() ? "" : ", ") + hwy::TargetName(bit);
      continue;
    }
    if (!(usable & bit)) return "SIMD target " + name + " is compiled in but this CPU does not support it";
    // A lower bit is a better target. Not DisableTargets: in Highway 1.0.3 every SupportedTargets()
    // call without a mock re-points HWY_DYNAMIC_DISPATCH at the CPU's best target, so the FMA peak
    // measured after a library call would run AVX-512 again; the mock has no such side effect.
    hwy::SetSupportedTargetsForTest(hwy::SupportedTargets() & ~(bit - 1));
    return "";
  }
  return "unknown SIMD target '" + name + "' (compiled: " + known + ")";
}

bool avx512_enabled() { return (hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX3_DL)) != 0; }
void softmax_rows(float* s, int64_t rows, int64_t n, const flashattn::Mask& m, float* lse) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRows)(s, rows, n, &m, lse);
}
void softmax_grad_rows(float* dp, const float* p, const float* D, int64_t rows, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradRows)(dp, p, D, rows, n);
}
}  // namespace bench
#endif
