// The bf16-pair micro-kernel of bf16_dot.h, with AVX-512 intrinsics: Highway 1.0.3 has no
// vdpbf16ps (its AVX3 bf16 paths widen to fp32). This file alone is compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (cpu/CMakeLists.txt), and its kernel runs only
// after cpu_has_avx512_bf16() (targets.cc lists kTargetAvx3Bf16 only then).
//
// Same register blocking as gemm-inl.h on AVX-512: 6 rows of A (broadcast pairs) x 4 vectors of B,
// 24 accumulators; each vdpbf16ps does two products per fp32 lane, so a pair step costs what one
// fp32 FMA step costs for twice the work.
//
// Other architectures (aarch64) compile only the stubs at the end: cpu_has_avx512_bf16() is false
// there, so targets() never lists kTargetAvx3Bf16 and the kernels are never called.
#include "bf16_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cassert>
#include <cstring>

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593); nothing here is uninitialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace flashattn::cpu::detail {
namespace {

constexpr int kRowsA = 6;
constexpr int kVecsB = 4;
constexpr int64_t kLanes = 16;

// The bf16 halves of pair p as exact floats.
inline float HighOf(uint32_t p) {
  const uint32_t bits = p & 0xffff0000u;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float LowOf(uint32_t p) {
  const uint32_t bits = p << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <int MA, int NV, bool Exact>
inline void Block(const uint32_t* A, int64_t sa, int64_t sb, const uint32_t* B, int64_t ldb, int64_t np, float* C,
                  int64_t ldc, bool accumulate, float* col_max) {
  __m512 acc[MA][NV];
  for (int r = 0; r < MA; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = accumulate ? _mm512_load_ps(C + r * ldc + v * kLanes) : _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < np; ++t) {
    const uint32_t* at = A + t * sb;
    if constexpr (Exact) {
      // Widened exactly (mask / shift), then FMAs in vdpbf16ps's order (high product first), so
      // subnormal inputs and results stay what IEEE fp32 makes them.
      const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
      __m512 bhi[NV], blo[NV];
      for (int v = 0; v < NV; ++v) {
        const __m512i b = _mm512_load_si512(B + t * ldb + v * kLanes);
        bhi[v] = _mm512_castsi512_ps(_mm512_and_si512(b, hi_mask));
        blo[v] = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
      }
      for (int r = 0; r < MA; ++r) {
        const __m512 ahi = _mm512_set1_ps(HighOf(at[r * sa]));
        const __m512 alo = _mm512_set1_ps(LowOf(at[r * sa]));
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(alo, blo[v], _mm512_fmadd_ps(ahi, bhi[v], acc[r][v]));
      }
    } else {
      __m512i bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(B + t * ldb + v * kLanes);
      for (int r = 0; r < MA; ++r) {
        const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(at[r * sa])));
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, reinterpret_cast<__m512bh>(bv[v]));
      }
    }
  }
  for (int r = 0; r < MA; ++r) {
    for (int v = 0; v < NV; ++v) _mm512_store_ps(C + r * ldc + v * kLanes, acc[r][v]);
  }
  if (col_max) {
    for (int v = 0; v < NV; ++v) {
      __m512 m = _mm512_load_ps(col_max + v * kLanes);
      for (int r = 0; r < MA; ++r) m = _mm512_max_ps(m, acc[r][v]);
      _mm512_store_ps(col_max + v * kLanes, m);
    }
  }
}

// Rows [0, na) of one panel of NV vectors.
template <int NV, bool Exact>
void Panel(int64_t na, const uint32_t* A, int64_t sa, int64_t sb, const uint32_t* B, int64_t ldb, int64_t np, float* C,
           int64_t ldc, bool accumulate, float* col_max) {
  int64_t a = 0;
  for (; a + kRowsA <= na; a += kRowsA) {
    Block<kRowsA, NV, Exact>(A + a * sa, sa, sb, B, ldb, np, C + a * ldc, ldc, accumulate, col_max);
  }
  const uint32_t* At = A + a * sa;
  float* Ct = C + a * ldc;
  switch (na - a) {
    case 1: Block<1, NV, Exact>(At, sa, sb, B, ldb, np, Ct, ldc, accumulate, col_max); break;
    case 2: Block<2, NV, Exact>(At, sa, sb, B, ldb, np, Ct, ldc, accumulate, col_max); break;
    case 3: Block<3, NV, Exact>(At, sa, sb, B, ldb, np, Ct, ldc, accumulate, col_max); break;
    case 4: Block<4, NV, Exact>(At, sa, sb, B, ldb, np, Ct, ldc, accumulate, col_max); break;
    case 5: Block<5, NV, Exact>(At, sa, sb, B, ldb, np, Ct, ldc, accumulate, col_max); break;
    default: break;  // 0 left
  }
}

template <bool Exact>
void Kernel(int64_t na, int64_t W, const uint32_t* A, int64_t sa, int64_t sb, const uint32_t* B, int64_t ldb,
            int64_t np, float* C, int64_t ldc, bool accumulate, float* col_max) {
  const int64_t nvec = W / kLanes;
  int64_t v = 0;
  for (; v + kVecsB <= nvec; v += kVecsB) {
    Panel<kVecsB, Exact>(na, A, sa, sb, B + v * kLanes, ldb, np, C + v * kLanes, ldc, accumulate,
                         col_max ? col_max + v * kLanes : nullptr);
  }
  float* const cm = col_max ? col_max + v * kLanes : nullptr;
  const uint32_t* Bv = B + v * kLanes;
  float* Cv = C + v * kLanes;
  switch (nvec - v) {
    case 1: Panel<1, Exact>(na, A, sa, sb, Bv, ldb, np, Cv, ldc, accumulate, cm); break;
    case 2: Panel<2, Exact>(na, A, sa, sb, Bv, ldb, np, Cv, ldc, accumulate, cm); break;
    case 3: Panel<3, Exact>(na, A, sa, sb, Bv, ldb, np, Cv, ldc, accumulate, cm); break;
    default: break;  // 0 left
  }
}

}  // namespace

void RoundRowsToBf16PairsFast(const float* src, int64_t ld, int64_t n, int64_t W, uint32_t* dst, int64_t ldd) {
  for (int64_t j = 0; j < n; ++j) {
    const float* s = src + j * ld;
    uint32_t* o = dst + j * ldd;
    int64_t i = 0;
    for (; i + 2 * kLanes <= W; i += 2 * kLanes) {  // 32 floats: the first 16 in the low half
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_load_ps(s + i + kLanes), _mm512_load_ps(s + i));
      _mm512_storeu_si512(o + i / 2, (__m512i)v);
    }
    if (i < W) {
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_load_ps(s + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i / 2), (__m256i)v);
    }
  }
}

void PairRowsToBf16Fast(const float* src, int64_t ld, int64_t n, int64_t W, uint32_t* dst) {
  for (int64_t j = 0; j < n; j += 2) {
    const float* r0 = src + j * ld;
    const float* r1 = j + 1 < n ? r0 + ld : nullptr;
    uint32_t* o = dst + (j / 2) * ld;
    for (int64_t i = 0; i < W; i += kLanes) {
      const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(r0 + i)));
      const __m512i hi = r1 ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(r1 + i)))
                            : _mm512_setzero_si512();
      _mm512_store_si512(o + i, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

bool cpu_has_avx512_bf16() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

void GemmBf16Pairs(const Matrix<float>& C, const PairOperand& A, const PairMatrix& B, Accumulate accumulate,
                   Bf16Products products, float* col_max) {
  assert(A.rows == C.rows && A.cols == B.rows && B.cols == C.cols && C.cols % kLanes == 0);
  const bool acc = accumulate == Accumulate::yes;
  if (products == Bf16Products::exact) {
    Kernel<true>(C.rows, C.cols, A.data, A.row_step, A.col_step, B.data, B.stride, A.cols, C.data, C.stride, acc, col_max);
  } else {
    Kernel<false>(C.rows, C.cols, A.data, A.row_step, A.col_step, B.data, B.stride, A.cols, C.data, C.stride, acc, col_max);
  }
}

}  // namespace flashattn::cpu::detail

#else  // not x86

#include <cstdlib>

namespace flashattn::cpu::detail {

bool cpu_has_avx512_bf16() { return false; }

// Unreachable: only a call on kTargetAvx3Bf16 (which targets() lists only after
// cpu_has_avx512_bf16()) uses these.
void GemmBf16Pairs(const Matrix<float>&, const PairOperand&, const PairMatrix&, Accumulate, Bf16Products, float*) {
  std::abort();
}
void RoundRowsToBf16PairsFast(const float*, int64_t, int64_t, int64_t, uint32_t*, int64_t) { std::abort(); }
void PairRowsToBf16Fast(const float*, int64_t, int64_t, int64_t, uint32_t*) { std::abort(); }

}  // namespace flashattn::cpu::detail

#endif  // x86
