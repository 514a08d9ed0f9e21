// flashattn-tile-products: the CPU forward's two fp32 tile products timed alone, on one thread, hot
// in cache — Sᵀ = K·Qᵀ (K rows read in place, Qᵀ [d x W]) and Oᵀ += Vᵀ·Pᵀ (V rows read transposed,
// Pᵀ [block_k x W]), the calls cpu/forward.cc makes through cpu/gemm-inl.h — for several register
// blocks (rows of A x vectors of B) of the dispatched Highway target, against one thread's fp32 FMA
// peak measured in the same run. The library compiles one block per target (gemm-inl.h, kRowsA x
// kVecsB, marked "lib"); this separates the products' own rate from the rest of the tile loop.
// Each product is checked against a scalar fp64 sum (exit 1 when one differs).
//
// Usage: flashattn-tile-products [--block-k N] [--dim D] [--block-q W] [--seconds S] [--simd-target T]
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tile_products.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/gemm-inl.h"
#include "hwy/highway.h"

#ifndef FLASHATTN_BENCH_TILE_PRODUCTS_ONCE
#define FLASHATTN_BENCH_TILE_PRODUCTS_ONCE
namespace bench {
// One register block's rates; rows and columns are what its blocks cover (the tails a block
// shape leaves are not run: the steady state is what is compared).
struct ShapeRate {
  int rows_a = 0, vecs_b = 0;
  bool library = false;
  double s_gflops = 0, pv_gflops = 0;
  double max_rel_error = 0;
};
// The operands: K, V [nk x d] rows; Qᵀ [d x w], Pᵀ [nk x w]; results Sᵀ [nk x w], Oᵀ [d x w].
struct Operands {
  const float *k, *v, *qt, *pt;
  float *st, *ot;
  int64_t nk, d, w;
};
}  // namespace bench
#endif

HWY_BEFORE_NAMESPACE();
namespace bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace fc = ::flashattn::cpu::HWY_NAMESPACE;

// C[na x W] (=|+=) A·B over blocks of MA rows and NV vectors (gemm-inl.h's GemmBlock), rows and
// vectors past the last whole block left out; returns the FLOPs done.
template <int MA, int NV, fc::AStep kStep>
HWY_NOINLINE double Product(const float* A, int64_t sa, int64_t sb, const float* B, int64_t nb, float* C,
                            int64_t na, int64_t W, bool accumulate) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t rows = na - na % MA, cols = W - W % (NV * L);
  for (int64_t v = 0; v < cols; v += NV * L) {
    for (int64_t a = 0; a < rows; a += MA) {
      const float* Ab = A + a * (kStep == fc::AStep::unit_col ? sa : 1);
      fc::GemmBlock<MA, NV, kStep>(d, Ab, sa, sb, B + v, W, nb, C + a * W + v, W, accumulate,
                                   static_cast<float*>(nullptr), static_cast<const float*>(nullptr));
    }
  }
  return 2.0 * static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(nb);
}

// Largest |C(r, c) - exact| / (sum of |terms| + tiny) over rows [0, na) and columns [0, cols) of
// C = C0 + Σ_k A(r, k)·B(k, c) (C0 = 0 when c0 is null); A's rows at stride sa, steps at sb.
double RelError(const float* A, int64_t sa, int64_t sb, const float* B, int64_t nb, const float* C,
                const float* c0, int64_t na, int64_t cols, int64_t W) {
  double worst = 0;
  for (int64_t r = 0; r < na; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double s = c0 ? c0[r * W + c] : 0.0, m = 1e-30 + std::fabs(s);
      for (int64_t k = 0; k < nb; ++k) {
        const double t = static_cast<double>(A[r * sa + k * sb]) * B[k * W + c];
        s += t, m += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(C[r * W + c] - s) / m);
    }
  return worst;
}

// Times both products with one block shape for about `seconds` each (best of 3 trials).
template <int MA, int NV>
ShapeRate Time(const Operands& o, double seconds) {
  using clock = std::chrono::steady_clock;
  ShapeRate r;
  r.rows_a = MA, r.vecs_b = NV, r.library = MA == fc::kRowsA && NV == fc::kVecsB;
  const int64_t L = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  const auto s_once = [&] {
    return Product<MA, NV, fc::AStep::unit_col>(o.k, o.d, 1, o.qt, o.d, o.st, o.nk, o.w, false);
  };
  const auto pv_once = [&] {
    return Product<MA, NV, fc::AStep::unit_row>(o.v, 1, o.d, o.pt, o.nk, o.ot, o.d, o.w, true);
  };
  // Checks first: Sᵀ from scratch, Oᵀ accumulated onto its current values.
  s_once();
  const std::vector<float> ot0(o.ot, o.ot + o.d * o.w);
  pv_once();
  const int64_t cols = o.w - o.w % (NV * L);
  r.max_rel_error = std::max(RelError(o.k, o.d, 1, o.qt, o.d, o.st, nullptr, o.nk - o.nk % MA, cols, o.w),
                             RelError(o.v, 1, o.d, o.pt, o.nk, o.ot, ot0.data(), o.d - o.d % MA, cols, o.w));
  const auto rate = [&](const auto& once) {
    double best = 0;
    for (int trial = 0; trial < 3; ++trial) {
      double flops = 0;
      const auto t0 = clock::now();
      double s = 0;
      do {
        flops += once();
        s = std::chrono::duration<double>(clock::now() - t0).count();
      } while (s < seconds / 3);
      best = std::max(best, flops / s * 1e-9);
    }
    return best;
  };
  r.s_gflops = rate(s_once);
  std::fill(o.ot, o.ot + o.d * o.w, 0.0f);  // Oᵀ keeps accumulating: restart from 0, values stay small
  r.pv_gflops = rate(pv_once);
  return r;
}

// The shapes compared on this target: the library's first, then others that fit its registers
// (accumulators + B vectors + one broadcast <= 16 on AVX2/SSE4, 32 on AVX-512).
std::vector<ShapeRate> RunShapes(const Operands& o, double seconds) {
  std::vector<ShapeRate> out;
  out.push_back(Time<fc::kRowsA, fc::kVecsB>(o, seconds));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL  // the targets gemm-inl.h gives 32 registers
  out.push_back(Time<8, 3>(o, seconds));
  out.push_back(Time<4, 6>(o, seconds));
  out.push_back(Time<5, 4>(o, seconds));
#elif HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  out.push_back(Time<4, 3>(o, seconds));
  out.push_back(Time<5, 2>(o, seconds));
  out.push_back(Time<2, 4>(o, seconds));
#endif
  return out;
}

}  // namespace HWY_NAMESPACE
}  // namespace bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cstdio>
#include <cstdlib>

#include "hwy/aligned_allocator.h"
#include "peak.hpp"
#include "simd_kernels.hpp"

namespace bench {
HWY_EXPORT(RunShapes);
}  // namespace bench

int main(int argc, char** argv) {
  int64_t nk = 64, d = 128, w = 64;
  double seconds = 0.3;
  std::string target;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--block-k" && has_value) nk = std::atoll(argv[++i]);
    else if (a == "--dim" && has_value) d = std::atoll(argv[++i]);
    else if (a == "--block-q" && has_value) w = std::atoll(argv[++i]);
    else if (a == "--seconds" && has_value) seconds = std::atof(argv[++i]);
    else if (a == "--simd-target" && has_value) target = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--block-k N (64)] [--dim D (128)] [--block-q W (64)] [--seconds S (0.3)] "
                   "[--simd-target T]\n",
                   argv[0]);
      return 2;
    }
  }
  if (nk < 1 || d < 1 || w < 1 || w % 16 != 0 || !(seconds > 0)) {
    std::fprintf(stderr, "tile-products: --block-k and --dim must be >= 1, --block-q a positive multiple of 16, "
                         "--seconds > 0 (got %lld, %lld, %lld, %g)\n",
                 static_cast<long long>(nk), static_cast<long long>(d), static_cast<long long>(w), seconds);
    return 2;
  }
  if (!target.empty()) {
    const std::string why = bench::limit_simd_target(target);
    if (!why.empty()) {
      std::fprintf(stderr, "tile-products: %s\n", why.c_str());
      return 2;
    }
  }
  auto k = hwy::AllocateAligned<float>(nk * d), v = hwy::AllocateAligned<float>(nk * d);
  auto qt = hwy::AllocateAligned<float>(d * w), pt = hwy::AllocateAligned<float>(nk * w);
  auto st = hwy::AllocateAligned<float>(nk * w), ot = hwy::AllocateAligned<float>(d * w);
  for (int64_t i = 0; i < nk * d; ++i) k[i] = 0.01f * static_cast<float>(i % 7 - 3), v[i] = 0.01f * static_cast<float>(i % 5 - 2);
  for (int64_t i = 0; i < d * w; ++i) qt[i] = 0.1f * static_cast<float>(i % 3), ot[i] = 0;
  for (int64_t i = 0; i < nk * w; ++i) pt[i] = 0.01f * static_cast<float>(i % 11), st[i] = 0;
  const bench::Operands o{k.get(), v.get(), qt.get(), pt.get(), st.get(), ot.get(), nk, d, w};

  const double peak = bench::measure_fma_peak_gflops(1, 0.6);
  const std::vector<bench::ShapeRate> rates = HWY_DYNAMIC_DISPATCH(bench::RunShapes)(o, seconds);
  const double peak_after = bench::measure_fma_peak_gflops(1, 0.6);
  const double ref = std::max(peak, peak_after);
  std::printf("tile products, 1 thread, SIMD %s: block_k %lld, d %lld, block_q %lld; fp32 FMA peak %.1f GFLOP/s "
              "before, %.1f after (%% uses %.1f)\n",
              bench::simd_target_name().c_str(), static_cast<long long>(nk), static_cast<long long>(d),
              static_cast<long long>(w), peak, peak_after, ref);
  std::printf("block      S = K.Qt GFLOP/s  %%peak   Ot += Vt.Pt GFLOP/s  %%peak   max rel. error\n");
  bool ok = true;
  for (const auto& r : rates) {
    std::printf("%dx%d%-5s  %16.1f  %5.1f  %19.1f  %5.1f   %.1e\n", r.rows_a, r.vecs_b, r.library ? " lib" : "",
                r.s_gflops, 100 * r.s_gflops / ref, r.pv_gflops, 100 * r.pv_gflops / ref, r.max_rel_error);
    if (!(r.max_rel_error < 1e-5)) ok = false;
  }
  if (!ok) std::fprintf(stderr, "tile-products: a product differs from the fp64 sum by more than 1e-5 relative\n");
  return ok ? 0 : 1;
}
#endif  // HWY_ONCE
