// Register-blocked fp32 micro-kernels for the tile products of forward and backward:
//   Gemm(d, C, A, B, Accumulate::no | yes [, col_max]):  C (+)= A·B,
//   GemmRescaled(d, C, A, B, alpha):                      C = C·diag(alpha) + A·B,
// with B and C row-major Matrix views (matrix.h) and A a ConstMatrix or Transposed(ConstMatrix):
// A is read as scalars (broadcast, any orientation, so K and V rows are used in place either way),
// B and C as full vectors: C's width is a multiple of the lane count and B, C are vector-aligned.
// A and B are fp32; C and the accumulation have the lane type T of the tag: fp32, or fp64 for the
// exact scores of fp32 inputs (each product of two floats is then exact and only the sum rounds; B
// vectors are widened on load, once per register block row, so no fp64 copy of B is needed).
// Every product of the algorithm has this shape, with C's columns running along query rows
// (S = Q·Kᵀ, O += P·V, dP = dO·Vᵀ, dQ += dS·K in the transposed layout) or along the head dim
// (dV += Pᵀ·dO, dK += dSᵀ·Q).
//
// Per-target include guard (Highway's toggle idiom): re-included once per target by foreach_target.
#if defined(FLASHATTN_CPU_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_GEMM_INL_H_
#undef FLASHATTN_CPU_GEMM_INL_H_
#else
#define FLASHATTN_CPU_GEMM_INL_H_
#endif

#include <cstdint>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "matrix.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using ::flashattn::cpu::detail::Accumulate;
using ::flashattn::cpu::detail::ConstMatrix;
using ::flashattn::cpu::detail::Matrix;
using ::flashattn::cpu::detail::ScalarOperand;

// Loads Lanes(d) floats at p (aligned to their size) as a vector of the tag's lane type.
template <class D>
HWY_INLINE hn::Vec<D> LoadWidened(D d, const float* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<hn::TFromD<D>, float>) {
    return hn::Load(d, p);
  } else {
    return hn::PromoteTo(d, hn::Load(hn::Rebind<float, D>(), p));
  }
}

// Register block: kRowsA rows of A times kVecsB vectors of B, kRowsA·kVecsB accumulators. AVX-512
// has 32 registers: 6 x 4 = 24 accumulators + 4 B vectors + 1 broadcast; two FMA pipes of latency 4
// need >= 8 independent accumulators. 16-register targets (AVX2, SSE4) use 6 x 2: 12 accumulators +
// 2 B vectors + 1 broadcast = 15 registers, 12 FMAs per 8 loads; 4 x 2 left only the 8 accumulators
// the pipes need and measured 5-8 % slower (AVX2 on Zen 5, benchmarks/RESULTS.md).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kRowsA = 6;
constexpr int kVecsB = 4;
#elif HWY_TARGET == HWY_SCALAR
constexpr int kRowsA = 4;
constexpr int kVecsB = 4;
#else
constexpr int kRowsA = 6;
constexpr int kVecsB = 2;
#endif

// How A is laid out in memory, as a compile-time fact of the inner loop: every A is a row-major
// matrix (element (a, b) at a·sa + b: the rows of K, dO, ...) or a transposed one (at a + b·sb: Vᵀ,
// Kᵀ, ...). With the unit step a template constant, the kRowsA broadcasts of one step are constant
// offsets from one or kRowsA pointers, not index arithmetic on runtime strides (which on AVX2 ran
// out of general registers and reloaded strides from the stack inside the loop).
enum class AStep { unit_col, unit_row };

// One register block: C[MA rows][NV vectors] (+)= A[MA rows] · B[nb][NV vectors]; then, when
// col_max is set, col_max[NV vectors] = max(col_max, max over the MA rows of C). With `alpha` (NV
// vectors, one factor per column; `accumulate` false) C = C·alpha + A·B instead, the product summed
// from zero and added to the scaled C by one fused multiply-add: C rounds once per call at its own size, not once per
// step (an output accumulator that many small products are added to keeps one rounding per key
// tile). The step loop is unrolled 4 times: its add/compare/branch and pointer updates then cost a
// quarter per step.
template <int MA, int NV, AStep kStep, class D, typename T = hn::TFromD<D>>
HWY_INLINE void GemmBlock(D d, const float* HWY_RESTRICT A, int64_t sa, int64_t sb,
                          const float* HWY_RESTRICT B, int64_t ldb, int64_t nb, T* HWY_RESTRICT C,
                          int64_t ldc, bool accumulate, T* HWY_RESTRICT col_max, const T* HWY_RESTRICT alpha) {
  using V = hn::Vec<D>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t step_a = kStep == AStep::unit_row ? 1 : sa;  // between rows of A
  const int64_t step_b = kStep == AStep::unit_col ? 1 : sb;  // between steps (columns of A)
#if HWY_HAVE_SCALABLE
  // SVE vectors are sizeless types, which cannot be array elements: one vector column of the block
  // at a time, its MA accumulators named. Every lane sums the same products in the same order as
  // the array version below, so the results are the same.
  static_assert(MA <= 6, "six named accumulators");
  for (int v = 0; v < NV; ++v) {
    T* HWY_RESTRICT Cv = C + v * L;
    const auto init = [&](int r) { return accumulate && r < MA ? hn::Load(d, Cv + r * ldc) : hn::Zero(d); };
    V a0 = init(0), a1 = init(1), a2 = init(2), a3 = init(3), a4 = init(4), a5 = init(5);
    for (int64_t b = 0; b < nb; ++b) {
      const V bv = LoadWidened(d, B + b * ldb + v * L);
      const float* HWY_RESTRICT ab = A + b * step_b;
      a0 = hn::MulAdd(hn::Set(d, static_cast<T>(ab[0])), bv, a0);
      if constexpr (MA > 1) a1 = hn::MulAdd(hn::Set(d, static_cast<T>(ab[step_a])), bv, a1);
      if constexpr (MA > 2) a2 = hn::MulAdd(hn::Set(d, static_cast<T>(ab[2 * step_a])), bv, a2);
      if constexpr (MA > 3) a3 = hn::MulAdd(hn::Set(d, static_cast<T>(ab[3 * step_a])), bv, a3);
      if constexpr (MA > 4) a4 = hn::MulAdd(hn::Set(d, static_cast<T>(ab[4 * step_a])), bv, a4);
      if constexpr (MA > 5) a5 = hn::MulAdd(hn::Set(d, static_cast<T>(ab[5 * step_a])), bv, a5);
    }
    if (alpha) {
      const V f = hn::Load(d, alpha + v * L);
      a0 = hn::MulAdd(hn::Load(d, Cv), f, a0);
      if constexpr (MA > 1) a1 = hn::MulAdd(hn::Load(d, Cv + ldc), f, a1);
      if constexpr (MA > 2) a2 = hn::MulAdd(hn::Load(d, Cv + 2 * ldc), f, a2);
      if constexpr (MA > 3) a3 = hn::MulAdd(hn::Load(d, Cv + 3 * ldc), f, a3);
      if constexpr (MA > 4) a4 = hn::MulAdd(hn::Load(d, Cv + 4 * ldc), f, a4);
      if constexpr (MA > 5) a5 = hn::MulAdd(hn::Load(d, Cv + 5 * ldc), f, a5);
    }
    hn::Store(a0, d, Cv);
    if constexpr (MA > 1) hn::Store(a1, d, Cv + ldc);
    if constexpr (MA > 2) hn::Store(a2, d, Cv + 2 * ldc);
    if constexpr (MA > 3) hn::Store(a3, d, Cv + 3 * ldc);
    if constexpr (MA > 4) hn::Store(a4, d, Cv + 4 * ldc);
    if constexpr (MA > 5) hn::Store(a5, d, Cv + 5 * ldc);
    if (col_max) {
      V m = hn::Max(hn::Load(d, col_max + v * L), a0);
      if constexpr (MA > 1) m = hn::Max(m, a1);
      if constexpr (MA > 2) m = hn::Max(m, a2);
      if constexpr (MA > 3) m = hn::Max(m, a3);
      if constexpr (MA > 4) m = hn::Max(m, a4);
      if constexpr (MA > 5) m = hn::Max(m, a5);
      hn::Store(m, d, col_max + v * L);
    }
  }
#else
  V acc[MA][NV];
  for (int r = 0; r < MA; ++r) {
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate ? hn::Load(d, C + r * ldc + v * L) : hn::Zero(d);
    }
  }
  const auto step = [&](int64_t b) HWY_ATTR {
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = LoadWidened(d, B + b * ldb + v * L);
    const float* HWY_RESTRICT ab = A + b * step_b;
    for (int r = 0; r < MA; ++r) {
      const V av = hn::Set(d, static_cast<T>(ab[r * step_a]));
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
  };
  int64_t b = 0;
  if constexpr (kStep == AStep::unit_col) {
    // A's rows are read along the steps, a new cache line per row every kLine steps, and they are
    // often out of L1 (a 64-key, d = 128 K tile is 32 KiB, a Zen 3's whole L1d): on a Zen 3 core a
    // third of the S product's time samples sat on the first step of a line (perf, d = 128). So
    // the next block's rows (A + MA·sa on; past the last block a harmless prefetch) are fetched a
    // line per row per kLine steps, a whole block ahead.
    constexpr int64_t kLine = 64 / sizeof(float);
    for (; b + kLine <= nb; b += kLine) {
      for (int r = 0; r < MA; ++r) hwy::Prefetch(A + (MA + r) * sa + b);
#pragma GCC unroll 4
      for (int64_t i = 0; i < kLine; ++i) step(b + i);
    }
  }
#pragma GCC unroll 4
  for (; b < nb; ++b) step(b);
  if (alpha) {
    for (int v = 0; v < NV; ++v) {
      const V f = hn::Load(d, alpha + v * L);
      for (int r = 0; r < MA; ++r) acc[r][v] = hn::MulAdd(hn::Load(d, C + r * ldc + v * L), f, acc[r][v]);
    }
  }
  for (int r = 0; r < MA; ++r) {
    for (int v = 0; v < NV; ++v) hn::Store(acc[r][v], d, C + r * ldc + v * L);
  }
  if (col_max) {
    for (int v = 0; v < NV; ++v) {
      V m = hn::Load(d, col_max + v * L);
      for (int r = 0; r < MA; ++r) m = hn::Max(m, acc[r][v]);
      hn::Store(m, d, col_max + v * L);
    }
  }
#endif  // HWY_HAVE_SCALABLE
}

// Runs the rows [0, na) of one column panel of NV vectors, kRowsA rows at a time.
template <int NV, AStep kStep, class D, typename T = hn::TFromD<D>>
HWY_INLINE void GemmPanel(D d, int64_t na, const float* A, int64_t sa, int64_t sb, const float* B,
                          int64_t ldb, int64_t nb, T* C, int64_t ldc, bool accumulate, T* col_max,
                          const T* alpha) {
  int64_t a = 0;
  for (; a + kRowsA <= na; a += kRowsA) {
    GemmBlock<kRowsA, NV, kStep>(d, A + a * sa, sa, sb, B, ldb, nb, C + a * ldc, ldc, accumulate, col_max, alpha);
  }
  const float* At = A + a * sa;
  T* Ct = C + a * ldc;
  switch (na - a) {
    case 1: GemmBlock<1, NV, kStep>(d, At, sa, sb, B, ldb, nb, Ct, ldc, accumulate, col_max, alpha); break;
    case 2: GemmBlock<2, NV, kStep>(d, At, sa, sb, B, ldb, nb, Ct, ldc, accumulate, col_max, alpha); break;
    case 3: GemmBlock<3, NV, kStep>(d, At, sa, sb, B, ldb, nb, Ct, ldc, accumulate, col_max, alpha); break;
    case 4: GemmBlock<4, NV, kStep>(d, At, sa, sb, B, ldb, nb, Ct, ldc, accumulate, col_max, alpha); break;
    case 5: GemmBlock<5, NV, kStep>(d, At, sa, sb, B, ldb, nb, Ct, ldc, accumulate, col_max, alpha); break;
    default: break;  // 0 left (kRowsA <= 6)
  }
  static_assert(kRowsA <= 6, "the tail switch covers at most 5 leftover rows");
}

// The kernel behind Gemm, on unpacked operands: C[na x W] (+)= A(na x nb) · B[nb x W] with
// A(a, b) = A[a·sa + b·sb], sa or sb equal to 1 as kStep says; W a multiple of Lanes(d); ldb in
// floats, ldc in T. Call Gemm instead.
template <AStep kStep, class D, typename T = hn::TFromD<D>>
HWY_NOINLINE void GemmKernel(D d, int64_t na, int64_t W, const float* A, int64_t sa, int64_t sb,
                             const float* B, int64_t ldb, int64_t nb, T* C, int64_t ldc, bool accumulate,
                             T* col_max, const T* alpha) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t nvec = W / L;
  int64_t v = 0;
  for (; v + kVecsB <= nvec; v += kVecsB) {
    GemmPanel<kVecsB, kStep>(d, na, A, sa, sb, B + v * L, ldb, nb, C + v * L, ldc, accumulate,
                             col_max ? col_max + v * L : nullptr, alpha ? alpha + v * L : nullptr);
  }
  // The last 1..kVecsB-1 vectors as one panel: wider panels load each broadcast once for more FMAs.
  T* const cm = col_max ? col_max + v * L : nullptr;
  const T* const al = alpha ? alpha + v * L : nullptr;
  switch (nvec - v) {
    case 1: GemmPanel<1, kStep>(d, na, A, sa, sb, B + v * L, ldb, nb, C + v * L, ldc, accumulate, cm, al); break;
    case 2: GemmPanel<2, kStep>(d, na, A, sa, sb, B + v * L, ldb, nb, C + v * L, ldc, accumulate, cm, al); break;
    case 3: GemmPanel<3, kStep>(d, na, A, sa, sb, B + v * L, ldb, nb, C + v * L, ldc, accumulate, cm, al); break;
    default: break;  // 0 left (kVecsB <= 4)
  }
  static_assert(kVecsB <= 4, "the tail switch covers at most 3 leftover vectors");
}

// GemmKernel on Matrix views, A's orientation taken from its steps. Call Gemm or GemmRescaled.
template <class D>
HWY_INLINE void GemmViews(D d, const Matrix<hn::TFromD<D>>& C, const ScalarOperand& A, const ConstMatrix& B,
                          bool accumulate, hn::TFromD<D>* col_max, const hn::TFromD<D>* alpha) {
  HWY_DASSERT(A.rows == C.rows && A.cols == B.rows && B.cols == C.cols);
  HWY_DASSERT(C.cols % static_cast<int64_t>(hn::Lanes(d)) == 0);
  HWY_DASSERT(A.col_step == 1 || A.row_step == 1);  // a row-major or a transposed matrix (matrix.h)
  if (A.col_step == 1) {
    GemmKernel<AStep::unit_col>(d, C.rows, C.cols, A.data, A.row_step, 1, B.data, B.stride, A.cols, C.data,
                                C.stride, accumulate, col_max, alpha);
  } else {
    GemmKernel<AStep::unit_row>(d, C.rows, C.cols, A.data, 1, A.col_step, B.data, B.stride, A.cols, C.data,
                                C.stride, accumulate, col_max, alpha);
  }
}

// C (+)= A·B: C [A.rows x C.cols] (C.cols a multiple of Lanes(d)), A [A.rows x A.cols] row-major or
// Transposed, B [A.cols x C.cols] row-major; B and C vector-aligned (rows and stride). With
// Accumulate::no C is overwritten (A.cols may be 0: C becomes 0). When col_max is set (C.cols
// values, vector-aligned) it becomes max(col_max, max over the rows of C): the row max of a
// transposed score tile, taken from the registers instead of another sweep over the tile. Inlined
// into a call of GemmKernel: the views cost nothing.
template <class D>
HWY_INLINE void Gemm(D d, const Matrix<hn::TFromD<D>>& C, const ScalarOperand& A, const ConstMatrix& B,
                     Accumulate accumulate, hn::TFromD<D>* col_max = nullptr) {
  GemmViews(d, C, A, B, accumulate == Accumulate::yes, col_max, nullptr);
}

// C = C·diag(alpha) + A·B (alpha: C.cols factors, vector-aligned): the online softmax's output
// update, O ← O·α + P·V, with P·V summed from zero and added to the rescaled O by one fused
// multiply-add per element, so O rounds once per key tile at its own size rather than once per key
// (docs/cpu-design.md, "What accuracy costs"). Replaces a rescale pass and an accumulating product.
template <class D>
HWY_INLINE void GemmRescaled(D d, const Matrix<hn::TFromD<D>>& C, const ScalarOperand& A, const ConstMatrix& B,
                             const hn::TFromD<D>* alpha) {
  GemmViews(d, C, A, B, false, nullptr, alpha);
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_GEMM_INL_H_
