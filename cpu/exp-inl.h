// exp for fp32 lanes, the one transcendental of the softmax: every score of the forward and every
// recomputed P of the backward goes through it, so its cost is a visible fraction of a tile at
// d <= 128 (docs/cpu-design.md, "The softmax and the exp"). About 18 vector operations per call in
// the usual range against ~28 for Highway's Exp plus the NaN guard it needs (Exp(NaN) returns 0
// there): no float->int conversion, and NaN propagates through the arithmetic by itself.
//
// Per-target include guard (Highway's toggle idiom): re-included once per target by foreach_target.
#if defined(FLASHATTN_CPU_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_EXP_INL_H_
#undef FLASHATTN_CPU_EXP_INL_H_
#else
#define FLASHATTN_CPU_EXP_INL_H_
#endif

#include <cstdint>
#include <limits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Below this argument e^x is subnormal (< 2^-126 · 1.41): FastExp scales in two steps there.
constexpr float kFastExpNormalMin = -87.3f;
// Below this argument FastExp returns 0 (e^-104 = 6.8e-46 rounds to 0 in fp32, as in Highway's Exp).
constexpr float kFastExpMin = -104.0f;
// Above this argument FastExp returns +∞ (2^127 · e^0.347 < FLT_MAX; the true overflow is at
// 88.72). Softmax arguments are <= 0 up to rounding.
constexpr float kFastExpMax = 88.3f;

// Returns e^x lane-wise for fp32 lanes: e^x = 2^n · e^r with n = round(x·log2 e) and
// r = x − n·ln 2 (Cody-Waite: ln 2 split in two constants so n·C1 is exact), |r| <= ln2/2, e^r from
// Cephes' expf polynomial (degree 7). Vectors with a lane outside [kFastExpNormalMin, kFastExpMax]
// (rare in a softmax, whose arguments are <= 0 and mostly far above -87) take a second path: 2^n in
// two factors for subnormal results, 0 below kFastExpMin (−∞ included), +∞ above kFastExpMax. Error
// against fp64 exp: at most 1.01 ulp for every float in [kFastExpNormalMin, kFastExpMax]
// (checked exhaustively on the AVX3, SSSE3 and SCALAR targets; tests/cpu/unit_simd.cpp samples it on
// every compiled target, subnormal results included). NaN propagates through the arithmetic.
template <class D>
HWY_INLINE hn::Vec<D> FastExp(D d, hn::Vec<D> x) {
  static_assert(sizeof(hn::TFromD<D>) == 4, "FastExp is for fp32 lanes");
  using V = hn::Vec<D>;
  const hn::RebindToUnsigned<D> du;
  // Adding 1.5·2^23 rounds x·log2 e to an integer held in the low mantissa bits (|x·log2 e| < 2^22).
  constexpr float kShifter = 12582912.0f;
  constexpr uint32_t kShifterBits = 0x4B400000u;  // the bits of kShifter
  constexpr uint32_t kExponentBias = 127;
  constexpr uint32_t kSubnormalShift = 64;        // 2^n = 2^(n + 64) · 2^-64 below 2^-126
  const V t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), hn::Set(d, kShifter));
  const V n = hn::Sub(t, hn::Set(d, kShifter));
  // r = x − n·ln 2, ln 2 = 0.693359375 − 2.12194440e-4 (the first part has 9 significant bits)
  V r = hn::MulAdd(n, hn::Set(d, -0.693359375f), x);
  r = hn::MulAdd(n, hn::Set(d, 2.12194440e-4f), r);
  // e^r = 1 + r + r²·q(r)
  V q = hn::Set(d, 1.9875691500e-4f);
  q = hn::MulAdd(q, r, hn::Set(d, 1.3981999507e-3f));
  q = hn::MulAdd(q, r, hn::Set(d, 8.3334519073e-3f));
  q = hn::MulAdd(q, r, hn::Set(d, 4.1665795894e-2f));
  q = hn::MulAdd(q, r, hn::Set(d, 1.6666665459e-1f));
  q = hn::MulAdd(q, r, hn::Set(d, 5.0000001201e-1f));
  const V er = hn::Add(hn::MulAdd(q, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  // 2^n: n + 127 in the exponent field. t's bits are kShifterBits + n; unsigned arithmetic wraps
  // (no overflow for any input, NaN included), and the bits only matter inside the range.
  const auto biased = hn::Add(hn::BitCast(du, t), hn::Set(du, kExponentBias - kShifterBits));
  const auto low = hn::Lt(x, hn::Set(d, kFastExpNormalMin));
  const auto high = hn::Gt(x, hn::Set(d, kFastExpMax));
  if (HWY_LIKELY(hn::AllFalse(d, hn::Or(low, high)))) {
    return hn::Mul(er, hn::BitCast(d, hn::ShiftLeft<23>(biased)));
  }
  const auto shifted = hn::Add(biased, hn::IfThenElseZero(hn::RebindMask(du, low), hn::Set(du, kSubnormalShift)));
  const V unit = hn::IfThenElse(low, hn::Set(d, 0x1p-64f), hn::Set(d, 1.0f));
  const V y = hn::Mul(hn::Mul(er, hn::BitCast(d, hn::ShiftLeft<23>(shifted))), unit);
  const V zero_below = hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, kFastExpMin)), y);
  return hn::IfThenElse(high, hn::Set(d, std::numeric_limits<float>::infinity()), zero_below);
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_EXP_INL_H_
