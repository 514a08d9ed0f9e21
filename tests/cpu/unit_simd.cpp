// The CPU backend's SIMD helpers on every compiled Highway target this CPU supports:
// - FastExp (cpu/exp-inl.h), the exp every softmax score and recomputed P goes through, against
//   fp64 exp: the error bound its comment states, on a sample of every float of its range, and its
//   results outside the range (0 below, +∞ above, NaN kept);
// - Transpose (cpu/transpose-inl.h), which moves rows in and out of the transposed tiles: every
//   element lands where it should, and nothing is written past the requested columns;
// - Gemm (cpu/gemm-inl.h), every tile product: C (+)= A·B with A row-major and Transposed, both
//   accumulation modes, the column max, fp32 and fp64 outputs, over shapes crossing the register
//   blocks (integer-valued inputs, so every sum is exact and must match the naive product).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/unit_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"

#include "exp-inl.h"
#include "gemm-inl.h"
#include "transpose-inl.h"

// Defined once (this file is compiled once per target).
#ifndef FLASHATTN_TEST_EXP_REPORT_
#define FLASHATTN_TEST_EXP_REPORT_
namespace flashattn_test {
// What one target's FastExp did.
struct ExpReport {
  double max_ulp = 0;        // worst error in units of the last place of the fp64 result
  float worst_x = 0;         // where
  int64_t checked = 0;       // arguments compared
  int special_failures = 0;  // special arguments with a wrong result
};
}  // namespace flashattn_test
#endif

HWY_BEFORE_NAMESPACE();
namespace flashattn_test::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace fc = ::flashattn::cpu::HWY_NAMESPACE;

// Returns the error of `got` against `want` in ulp of `want` as an fp32: 2^(e-24) for normal
// results, the subnormal spacing 2^-149 below 2^-126.
double UlpError(float got, double want) {
  int e = 0;
  std::frexp(want, &e);
  return std::fabs(static_cast<double>(got) - want) / std::max(std::ldexp(1.0, e - 24), std::ldexp(1.0, -149));
}

// Returns whether a and b are the same value (NaN equals NaN).
bool Same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Compares FastExp with fp64 exp on every `stride`-th float of [kFastExpMin, kFastExpMax] (both
// signs walked outwards from ±0; subnormal results below kFastExpNormalMin included), and on the
// special arguments.
ExpReport CheckFastExp(uint32_t stride) {
  const hn::ScalableTag<float> d;
  const size_t L = hn::Lanes(d);
  HWY_ALIGN float in[hn::MaxLanes(d)];
  HWY_ALIGN float out[hn::MaxLanes(d)];
  ExpReport r;
  for (const uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t bits = 0;; bits += stride * static_cast<uint32_t>(L)) {
      for (size_t k = 0; k < L; ++k) {
        const uint32_t b = sign | (bits + stride * static_cast<uint32_t>(k));
        std::memcpy(&in[k], &b, sizeof(float));
      }
      hn::Store(fc::FastExp(d, hn::Load(d, in)), d, out);
      bool past = false;
      for (size_t k = 0; k < L; ++k) {
        if (!(in[k] >= fc::kFastExpMin && in[k] <= fc::kFastExpMax)) {
          past = true;
          continue;
        }
        const double want = std::exp(static_cast<double>(in[k]));
        const double err = UlpError(out[k], want);
        ++r.checked;
        if (err > r.max_ulp) {
          r.max_ulp = err;
          r.worst_x = in[k];
        }
      }
      if (past) break;
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float args[] = {nan, -inf, inf, -1000.0f, -104.5f, 88.31f, 1000.0f, 0.0f, -0.0f};
  const float want[] = {nan, 0.0f, inf, 0.0f, 0.0f, inf, inf, 1.0f, 1.0f};
  for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); ++i) {
    for (size_t k = 0; k < L; ++k) in[k] = args[i];
    hn::Store(fc::FastExp(d, hn::Load(d, in)), d, out);
    for (size_t k = 0; k < L; ++k) r.special_failures += Same(out[k], want[i]) ? 0 : 1;
  }
  return r;
}

// Returns how many elements Transpose got wrong over shapes crossing the lane count (rows a
// multiple of it, any column count), counting a write past the requested columns as wrong.
int64_t CheckTranspose() {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  constexpr float kCanary = -12345.0f;
  int64_t wrong = 0;
  for (const int64_t rows : {L, 2 * L, 4 * L}) {
    for (const int64_t cols : {int64_t{1}, L - 1, L, L + 1, 3 * L + 5}) {
      if (cols < 1) continue;
      const int64_t ld_src = ((cols + L - 1) / L) * L + L;  // readable past cols, as required
      const int64_t ld_dst = rows + 3;
      std::vector<float> src(static_cast<size_t>(rows * ld_src));
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
      const int64_t dst_rows = ((cols + L - 1) / L) * L;
      std::vector<float> dst(static_cast<size_t>(dst_rows * ld_dst), kCanary);
      fc::Transpose(d, src.data(), ld_src, rows, cols, dst.data(), ld_dst);
      for (int64_t c = 0; c < dst_rows; ++c) {
        for (int64_t r = 0; r < ld_dst; ++r) {
          const float got = dst[static_cast<size_t>(c * ld_dst + r)];
          const float want = c < cols && r < rows ? src[static_cast<size_t>(r * ld_src + c)] : kCanary;
          wrong += got == want ? 0 : 1;
        }
      }
    }
  }
  return wrong;
}


// Returns how many outputs of Gemm differ from the naive product, over shapes crossing the register
// blocks and the unrolled inner loop (rows 1..13: every tail of 6- and 4-row blocks; inner 0..9:
// every remainder of 4 steps; 1..9 vectors), with A given row-major and as Transposed(Aᵀ),
// Accumulate::no and yes, with and without col_max, for C of lane type T (fp32, or fp64 scores).
template <typename T>
int64_t CheckGemmOf() {
  const hn::ScalableTag<T> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  using ::flashattn::cpu::detail::Accumulate;
  using ::flashattn::cpu::detail::ConstMatrix;
  using ::flashattn::cpu::detail::Matrix;
  using ::flashattn::cpu::detail::Transposed;
  int64_t wrong = 0;
  for (const int64_t na : {1, 2, 3, 4, 5, 7, 13}) {
    for (const int64_t nb : {0, 1, 2, 3, 9}) {
      for (const int64_t nv : {1, 2, 3, 5, 9}) {
        const int64_t W = nv * L, ldb = W + L, ldc = W + 2 * L, lda = nb + 3, ldat = na + 2;
        auto a = hwy::AllocateAligned<float>(static_cast<size_t>(na * lda));    // A [na x nb]
        auto at = hwy::AllocateAligned<float>(static_cast<size_t>((nb + 1) * ldat));  // Aᵀ [nb x na]
        auto b = hwy::AllocateAligned<float>(static_cast<size_t>((nb + 1) * ldb));
        auto c = hwy::AllocateAligned<T>(static_cast<size_t>(na * ldc));
        auto col_max = hwy::AllocateAligned<T>(static_cast<size_t>(W));
        for (int64_t i = 0; i < na; ++i) {
          for (int64_t k = 0; k < nb; ++k) {
            a[i * lda + k] = at[k * ldat + i] = static_cast<float>((i * 7 + k * 3) % 11 - 5);
          }
        }
        for (int64_t k = 0; k < nb; ++k) {
          for (int64_t j = 0; j < W; ++j) b[k * ldb + j] = static_cast<float>((k * 5 + j) % 9 - 4);
        }
        for (int mode = 0; mode < 8; ++mode) {
          const bool transposed = mode & 1, accumulate = mode & 2, with_max = mode & 4;
          const auto init = [&](int64_t i, int64_t j) { return static_cast<T>((i + 2 * j) % 7 - 3); };
          for (int64_t i = 0; i < na; ++i) {
            for (int64_t j = 0; j < W; ++j) c[i * ldc + j] = init(i, j);
          }
          for (int64_t j = 0; j < W; ++j) col_max[j] = static_cast<T>(j % 5 == 0 ? 1000 : -1000);
          const Matrix<T> cm{c.get(), na, W, ldc};
          const ConstMatrix bm{b.get(), nb, W, ldb};
          const Accumulate acc = accumulate ? Accumulate::yes : Accumulate::no;
          T* cmax = with_max ? col_max.get() : nullptr;
          if (transposed) {
            fc::Gemm(d, cm, Transposed(ConstMatrix{at.get(), nb, na, ldat}), bm, acc, cmax);
          } else {
            fc::Gemm(d, cm, ConstMatrix{a.get(), na, nb, lda}, bm, acc, cmax);
          }
          for (int64_t j = 0; j < W; ++j) {
            T want_max = static_cast<T>(j % 5 == 0 ? 1000 : -1000);
            for (int64_t i = 0; i < na; ++i) {
              T want = accumulate ? init(i, j) : T{0};
              for (int64_t k = 0; k < nb; ++k) want += static_cast<T>(a[i * lda + k]) * static_cast<T>(b[k * ldb + j]);
              wrong += c[i * ldc + j] == want ? 0 : 1;
              want_max = std::max(want_max, want);
            }
            if (with_max) wrong += col_max[j] == want_max ? 0 : 1;
          }
        }
      }
    }
  }
  return wrong;
}

int64_t CheckGemm() { return CheckGemmOf<float>() + CheckGemmOf<double>(); }

}  // namespace flashattn_test::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <doctest/doctest.h>

#include "flashattn/cpu.hpp"
#include "plan.h"

namespace flashattn_test {
HWY_EXPORT(CheckFastExp);

TEST_CASE("cpu FastExp: within 1.01 ulp of fp64 exp on its range (subnormal results too), 0 / inf / NaN outside, on every target") {
  constexpr uint32_t kStride = 61;  // ~37 million arguments per target; the bound was set exhaustively
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    const ExpReport r = HWY_DISPATCH_TABLE(CheckFastExp)[flashattn::cpu::detail::dispatch_index(t.bit)](kStride);
    INFO("target ", t.name, ": ", r.checked, " arguments, worst ", r.max_ulp, " ulp at x = ", r.worst_x);
    CHECK(r.checked > 30000000);
    CHECK(r.max_ulp <= 1.01);
    CHECK(r.special_failures == 0);
  }
}

HWY_EXPORT(CheckTranspose);

TEST_CASE("cpu Transpose: every element in place, nothing past the requested columns, on every target") {
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    INFO("target ", t.name);
    CHECK(HWY_DISPATCH_TABLE(CheckTranspose)[flashattn::cpu::detail::dispatch_index(t.bit)]() == 0);
  }
}

HWY_EXPORT(CheckGemm);

TEST_CASE("cpu Gemm: C (+)= A·B exact for A row-major and Transposed, both accumulation modes, col_max, fp32 and fp64, on every target") {
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    INFO("target ", t.name);
    CHECK(HWY_DISPATCH_TABLE(CheckGemm)[flashattn::cpu::detail::dispatch_index(t.bit)]() == 0);
  }
}

}  // namespace flashattn_test
#endif  // HWY_ONCE
