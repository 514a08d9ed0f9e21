// Element-wise passes over a transposed score tile Sᵀ[j][i] (key j of the tile, query row i in the
// vector lanes; row stride `ld` floats, columns [0, W) with W a multiple of the lane count): the
// score transforms of docs/semantics.md (soft-capping, then ALiBi), the mask of partial tiles, and the online
// softmax update of the forward. Rows are lanes, so per-row reductions are lane-wise (no shuffles).
#if defined(FLASHATTN_CPU_SCORE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_SCORE_INL_H_
#undef FLASHATTN_CPU_SCORE_INL_H_
#else
#define FLASHATTN_CPU_SCORE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

#include "exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns tanh(x) lane-wise with NaN lanes kept NaN. Highway's Tanh goes through its Exp, which
// returns 0 for NaN (turning a NaN score into a silently finite row) and on the emulated targets
// converts NaN to an integer (undefined behaviour); NaN lanes are kept out of it.
template <class D, class V>
HWY_INLINE V TanhKeepNaN(D d, V x) {
  const auto nan = hn::IsNaN(x);
  return hn::IfThenElse(nan, x, hn::Tanh(d, hn::IfThenZeroElse(nan, x)));
}

// Where a tile sits in its sequence and which transforms are on.
struct TileScores {
  float scale = 1;     // multiplies the raw q·k first (TransformScores only)
  int64_t c0 = 0;      // key of tile row j = 0
  int64_t r0 = 0;      // query row of lane 0
  int64_t diag = 0;    // Mask::diag(): key aligned with query row 0
  float softcap = 0;   // > 0: S <- softcap·tanh(S/softcap)
  float slope = 0;     // != 0: S <- S − slope·|i + diag − j|
  const float* bias = nullptr;  // set: S <- S + bias[j·ld + i], the tile's transposed bias (bias-inl.h)
  float bias_bound = 0;         // largest finite |bias| of the tile (adaptive exact scores only)

  // Returns whether the scores need the TransformScores pass. Without soft-capping, ALiBi and a
  // bias the scale is fused into the exponent instead, except a zero scale: masked raw scores are
  // made ±∞ before the product, and 0·∞ would be NaN.
  bool needs_transform() const { return softcap > 0 || slope != 0 || scale == 0 || bias; }
};

// Turns raw q·k into scores: S = scale·st, then soft-capping, then ALiBi, then the bias, on
// st[0, nk) x [0, W).
// When `tanh_out` is set (backward with soft-capping) it receives t = tanh(S/softcap), from which
// the derivative 1 − t² follows. (Without soft-capping and ALiBi the scale is fused into the
// exponent instead: exp(scale·s − m) with one rounding, and this pass is skipped.)
template <class D>
HWY_INLINE void TransformScores(D d, float* HWY_RESTRICT st, int64_t ld, int64_t nk, int64_t W,
                                const TileScores& ts, float* HWY_RESTRICT tanh_out) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto scale = hn::Set(d, ts.scale);
  if (ts.softcap > 0) {
    const auto cap = hn::Set(d, ts.softcap);
    const auto inv_cap = hn::Set(d, 1.0f / ts.softcap);
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t w = 0; w < W; w += L) {
        const auto sv = hn::Mul(hn::Load(d, st + j * ld + w), scale);
        const auto t = TanhKeepNaN(d, hn::Mul(sv, inv_cap));
        if (tanh_out) hn::Store(t, d, tanh_out + j * ld + w);
        hn::Store(hn::Mul(cap, t), d, st + j * ld + w);
      }
    }
  } else {
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t w = 0; w < W; w += L) hn::Store(hn::Mul(hn::Load(d, st + j * ld + w), scale), d, st + j * ld + w);
    }
  }
  if (ts.slope != 0) {
    const auto slope = hn::Set(d, ts.slope);
    for (int64_t w = 0; w < W; w += L) {
      const auto row = hn::Iota(d, static_cast<float>(ts.r0 + w));  // query row of each lane
      for (int64_t j = 0; j < nk; ++j) {
        // |i + diag − j|, exact while sequences stay below 2^24 rows
        const auto dist = hn::Abs(hn::Add(row, hn::Set(d, static_cast<float>(ts.diag - (ts.c0 + j)))));
        float* s = st + j * ld + w;
        hn::Store(hn::NegMulAdd(slope, dist, hn::Load(d, s)), d, s);
      }
    }
  }
  if (ts.bias) {
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t w = 0; w < W; w += L) {
        float* s = st + j * ld + w;
        hn::Store(hn::Add(hn::Load(d, s), hn::Load(d, ts.bias + j * ld + w)), d, s);
      }
    }
  }
}

// Sets to `hidden` every entry whose key c0 + j is outside its row's visible interval
// [kbeg[i], kend[i]) (Mask::key_begin / key_end of the row: the shared definition of visibility).
// `hidden` is −∞ for final scores, or the raw value whose product with the pending scale is −∞
// (+∞ for a negative scale). Called for partial tiles only.
template <class D>
HWY_INLINE void MaskScores(D d, float* HWY_RESTRICT st, int64_t ld, int64_t nk, int64_t W, int64_t c0,
                           const int32_t* HWY_RESTRICT kbeg, const int32_t* HWY_RESTRICT kend, float hidden) {
  const hn::RebindToSigned<D> di;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto neg_inf = hn::Set(d, hidden);
  for (int64_t w = 0; w < W; w += L) {
    const auto kb = hn::Load(di, kbeg + w);
    const auto ke = hn::Load(di, kend + w);
    for (int64_t j = 0; j < nk; ++j) {
      const int32_t key = static_cast<int32_t>(c0 + j);
      // kbeg <= key < kend, written with Lt only
      const auto vis = hn::And(hn::Lt(kb, hn::Set(di, key + 1)), hn::Lt(hn::Set(di, key), ke));
      float* s = st + j * ld + w;
      hn::Store(hn::IfThenElse(hn::RebindMask(d, vis), hn::Load(d, s), neg_inf), d, s);
    }
  }
}

// Online softmax step over one tile of S = scale·st (scale 1 when TransformScores already applied
// it): per row (lane) m' = max(m, max_j S), P = exp(scale·st − m') with the product and difference
// rounded once (fused), l' = l·exp(m − m') + Σ_j P. Overwrites st with P and writes
// alpha = exp(m − m'), the factor the output accumulator must be rescaled by. A row that has seen
// only −∞ keeps m = −∞ and uses 0 in place of m' (the explicit max == −∞ guard), so it gets P = 0 and
// alpha = 0, never NaN. raw_max (optional, only for scale > 0): max_j st per row, taken by the S
// product (Gemm's col_max); the max sweep is then skipped (rounding is monotonic, so
// max_j rnd(scale·st) = rnd(scale·max_j st)).
template <class D>
HWY_INLINE void OnlineSoftmax(D d, float* HWY_RESTRICT st, int64_t ld, int64_t nk, int64_t W, float scale,
                              float* HWY_RESTRICT row_max, float* HWY_RESTRICT row_sum,
                              float* HWY_RESTRICT alpha, const float* HWY_RESTRICT raw_max = nullptr) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto sc = hn::Set(d, scale);
  for (int64_t w = 0; w < W; w += L) {
    const auto m_old = hn::Load(d, row_max + w);
    auto m_new = m_old;
    if (raw_max) {
      m_new = hn::Max(m_new, hn::Mul(hn::Load(d, raw_max + w), sc));
    } else {
      for (int64_t j = 0; j < nk; ++j) m_new = hn::Max(m_new, hn::Mul(hn::Load(d, st + j * ld + w), sc));
    }
    const auto m_use = hn::IfThenZeroElse(hn::Eq(m_new, neg_inf), m_new);
    const auto a = FastExp(d, hn::Sub(m_old, m_use));
    auto sum = hn::Zero(d);
    for (int64_t j = 0; j < nk; ++j) {
      float* s = st + j * ld + w;
      const auto pv = FastExp(d, hn::MulSub(hn::Load(d, s), sc, m_use));
      hn::Store(pv, d, s);
      sum = hn::Add(sum, pv);
    }
    hn::Store(hn::MulAdd(hn::Load(d, row_sum + w), a, sum), d, row_sum + w);
    hn::Store(m_new, d, row_max + w);
    hn::Store(a, d, alpha + w);
  }
}

// acc[x][i] *= alpha[i] for x in [0, rows), i in [0, W). Skips vectors whose factors are all 1
// (the running max did not change: the common case after the first key blocks).
template <class D>
HWY_INLINE void RescaleColumns(D d, float* HWY_RESTRICT acc, int64_t ld, int64_t rows, int64_t W,
                               const float* HWY_RESTRICT alpha) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  for (int64_t w = 0; w < W; w += L) {
    const auto a = hn::Load(d, alpha + w);
    if (hn::AllTrue(d, hn::Eq(a, one))) continue;
    for (int64_t x = 0; x < rows; ++x) {
      float* o = acc + x * ld + w;
      hn::Store(hn::Mul(hn::Load(d, o), a), d, o);
    }
  }
}

// ---- Which tiles need exact scores -----------------------------------------------------------
// Returns max over rows r in [0, n) of Σ_x a[r·ld + x]² (row r at a + r·ld, dim floats, any
// alignment), +∞ when it exceeds the float range. Rows holding a NaN or ±∞ are left out: their own
// results are non-finite whichever path computes them, and leaving them out keeps the choice of
// path (so the bits of the other rows) what it would be without them.
template <class D>
HWY_INLINE float MaxSquaredNorm(D d, const float* HWY_RESTRICT a, int64_t ld, int64_t n, int64_t dim) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  float best = 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    const float* row = a + r * ld;
    auto acc = hn::Zero(d);
    int64_t x = 0;
    for (; x + L <= dim; x += L) {
      const auto v = hn::LoadU(d, row + x);
      acc = hn::MulAdd(v, v, acc);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, acc));
    for (; x < dim; ++x) sum += row[x] * row[x];
    if (!std::isfinite(sum)) {  // a non-finite element, or finite values whose squares overflow
      double exact = 0;  // squares of floats cannot overflow a double
      for (int64_t y = 0; y < dim; ++y) exact += static_cast<double>(row[y]) * row[y];
      if (!std::isfinite(exact)) continue;
      sum = std::numeric_limits<float>::infinity();
    }
    best = std::max(best, sum);
  }
  return best;
}

// Writes norm2[r] = Σ_x a[r·ld + x]² for rows r in [0, n), each as MaxSquaredNorm of that one row
// (0 for a row holding NaN/±∞, +∞ when finite values overflow): computed once per head, so each
// tile's bound is a max over its key range (MaxOf) instead of another pass over K.
template <class D>
HWY_INLINE void RowSquaredNorms(D d, const float* HWY_RESTRICT a, int64_t ld, int64_t n, int64_t dim,
                                float* HWY_RESTRICT norm2) {
  for (int64_t r = 0; r < n; ++r) norm2[r] = MaxSquaredNorm(d, a + r * ld, ld, 1, dim);
}

// Returns max(v[0, n)), or 0 for n == 0 (values are squared norms, >= 0).
inline float MaxOf(const float* HWY_RESTRICT v, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, v[i]);
  return m;
}

// Returns a bound on |S| over the tile rows [ts.r0, r1) x keys [ts.c0, c1): by Cauchy-Schwarz
// |scale|·Σ_x|q_x·k_x| <= |scale|·‖q‖·‖k‖, which also bounds the fp32 rounding error of S (a multiple
// of 2^-24 times it), plus the largest ALiBi bias (whose fp32 rounding grows with it). Soft-capping
// only shrinks errors (tanh' <= 1); a bias likewise adds its largest finite entry (−∞ entries
// hide keys exactly). qmax2, kmax2: the largest squared row norms (MaxSquaredNorm).
inline float TileScoreBound(const TileScores& ts, float qmax2, float kmax2, int64_t r1, int64_t c1) {
  float bound = std::fabs(ts.scale) * std::sqrt(qmax2) * std::sqrt(kmax2);
  if (ts.slope != 0) {
    const int64_t near = std::abs(ts.r0 + ts.diag - (c1 - 1)), far = std::abs(r1 - 1 + ts.diag - ts.c0);
    bound += std::fabs(ts.slope) * static_cast<float>(std::max(near, far));
  }
  return bound + ts.bias_bound;
}

// ---- Exact scores (fp32 inputs) -------------------------------------------------------------
// For fp32 inputs, a tile whose score bound is large (plan.h exact_tile) accumulates its raw q·k
// tile in fp64 (Gemm with a double tag: every product of two floats is exact and each addition
// rounds at 2^-53), so the scores carry no fp32 rounding. This matters because any fp32 dot product
// errs by ~2^-24·Σ|q_x k_x| in S, i.e. in the exponent: with large scores that error dominates the
// whole result and is as large as the naive algorithm's own, so a "same-precision" S can never be
// reliably at least as accurate as the naive one. At ordinary magnitudes it is one error among
// the exp's and the sums', and the tile stays in fp32 (twice the speed). The passes
// below work on that fp64 tile (row stride ld doubles, lanes as in the fp32 tile) and round once
// where they leave it: the exponent argument of P, or tanh for the backward.

// Returns e^x in fp32 lanes for x given in fp64 lanes: e^hi · (1 + lo), hi the fp32 rounding of x
// and lo = x − hi (exact in fp64), so rounding the argument (|x|·2^-24 in the exponent: 1.8e-6
// relative at x = −60) does not reach P. The naive fp32 algorithm gets that for free when S and its
// row max are fp32 values within a factor 2 (their difference is exact), and its gradients of
// near-one-hot rows (dq ~ 1e-26 made of P ~ 1e-26) were then 8x more accurate than a once-rounded
// argument. Non-finite x: lo is 0 (e^±∞, NaN as FastExp).
template <class DD>
HWY_INLINE hn::Vec<hn::Rebind<float, DD>> ExpOfDouble(DD dd, hn::Vec<DD> x) {
  const hn::Rebind<float, DD> df;
  const auto hi = hn::DemoteTo(df, x);
  const auto lo = hn::IfThenElseZero(hn::IsFinite(hi), hn::DemoteTo(df, hn::Sub(x, hn::PromoteTo(dd, hi))));
  const auto e = FastExp(df, hi);
  return hn::MulAdd(e, lo, e);
}

// Scores from the fp64 raw tile, in fp64: soft-capping, ALiBi, then the bias of S = scale·s, like
// TransformScores (which see); tanh_out (fp32) receives t = tanh(S/softcap) when set.
template <class DD>
HWY_INLINE void TransformScoresExact(DD dd, double* HWY_RESTRICT sd, int64_t ld, int64_t nk, int64_t W,
                                     const TileScores& ts, float* HWY_RESTRICT tanh_out) {
  const hn::Rebind<float, DD> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto scale = hn::Set(dd, static_cast<double>(ts.scale));
  const auto cap = hn::Set(dd, static_cast<double>(ts.softcap));
  const auto inv_cap = hn::Set(dd, ts.softcap > 0 ? 1.0 / static_cast<double>(ts.softcap) : 0.0);
  const auto slope = hn::Set(dd, static_cast<double>(ts.slope));
  for (int64_t j = 0; j < nk; ++j) {
    for (int64_t w = 0; w < W; w += L) {
      double* s = sd + j * ld + w;
      auto sv = hn::Mul(hn::Load(dd, s), scale);
      if (ts.softcap > 0) {
        const auto t = TanhKeepNaN(dd, hn::Mul(sv, inv_cap));
        if (tanh_out) hn::Store(hn::DemoteTo(df, t), df, tanh_out + j * ld + w);
        sv = hn::Mul(cap, t);
      }
      if (ts.slope != 0) {
        // |i + diag − j| for the query row i of each lane (exact in fp64)
        const auto row = hn::Iota(dd, static_cast<double>(ts.r0 + w));
        const auto dist = hn::Abs(hn::Add(row, hn::Set(dd, static_cast<double>(ts.diag - (ts.c0 + j)))));
        sv = hn::NegMulAdd(slope, dist, sv);
      }
      if (ts.bias) sv = hn::Add(sv, hn::PromoteTo(dd, hn::LoadU(df, ts.bias + j * ld + w)));
      hn::Store(sv, dd, s);
    }
  }
}

// MaskScores on the fp64 tile: entries of keys outside [kbeg[i], kend[i]) become `hidden`.
template <class DD>
HWY_INLINE void MaskScoresExact(DD dd, double* HWY_RESTRICT sd, int64_t ld, int64_t nk, int64_t W, int64_t c0,
                                const int32_t* HWY_RESTRICT kbeg, const int32_t* HWY_RESTRICT kend, double hidden) {
  const hn::Rebind<int32_t, DD> di;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto hid = hn::Set(dd, hidden);
  for (int64_t w = 0; w < W; w += L) {
    const auto kb = hn::PromoteTo(dd, hn::LoadU(di, kbeg + w));
    const auto ke = hn::PromoteTo(dd, hn::LoadU(di, kend + w));
    for (int64_t j = 0; j < nk; ++j) {
      const auto key = hn::Set(dd, static_cast<double>(c0 + j));
      const auto vis = hn::And(hn::Le(kb, key), hn::Lt(key, ke));
      double* s = sd + j * ld + w;
      hn::Store(hn::IfThenElse(vis, hn::Load(dd, s), hid), dd, s);
    }
  }
}

// OnlineSoftmax from the fp64 tile S = scale·sd: per row m' = max(m, rnd(max_j S)) (m is kept in
// fp32; any shift cancels between P and l), P = exp(scale·sd − m') with the argument exact in fp64
// (ExpOfDouble), written to the fp32 tile st; l, alpha as in OnlineSoftmax.
template <class DD>
HWY_INLINE void OnlineSoftmaxExact(DD dd, const double* HWY_RESTRICT sd, float* HWY_RESTRICT st, int64_t ld,
                                   int64_t nk, int64_t W, double scale, float* HWY_RESTRICT row_max,
                                   float* HWY_RESTRICT row_sum, float* HWY_RESTRICT alpha) {
  const hn::Rebind<float, DD> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const auto sc = hn::Set(dd, scale);
  for (int64_t w = 0; w < W; w += L) {
    const auto m_old = hn::Load(df, row_max + w);
    auto mx = hn::Set(dd, -std::numeric_limits<double>::infinity());
    for (int64_t j = 0; j < nk; ++j) mx = hn::Max(mx, hn::Mul(hn::Load(dd, sd + j * ld + w), sc));
    const auto m_new = hn::Max(m_old, hn::DemoteTo(df, mx));
    const auto m_use = hn::IfThenZeroElse(hn::Eq(m_new, neg_inf), m_new);
    const auto a = FastExp(df, hn::Sub(m_old, m_use));
    const auto mu = hn::PromoteTo(dd, m_use);
    auto sum = hn::Zero(df);
    for (int64_t j = 0; j < nk; ++j) {
      const auto pv = ExpOfDouble(dd, hn::MulSub(hn::Load(dd, sd + j * ld + w), sc, mu));
      hn::Store(pv, df, st + j * ld + w);
      sum = hn::Add(sum, pv);
    }
    hn::Store(hn::MulAdd(hn::Load(df, row_sum + w), a, sum), df, row_sum + w);
    hn::Store(m_new, df, row_max + w);
    hn::Store(a, df, alpha + w);
  }
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_SCORE_INL_H_
