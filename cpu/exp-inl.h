// exp for fp32 lanes, the one transcendental of the softmax: every score of the forward and every
// recomputed P of the backward goes through it, so its cost is a visible fraction of a tile at
// d <= 128 (CPU-NOTES.md). About 19 vector operations per call against ~28 for Highway's Exp plus
// the NaN guard it needs (Exp(NaN) returns 0 there): no float->int conversion, and NaN propagates
// through the arithmetic by itself.
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

// Below this argument FastExp returns 0: e^x would be subnormal (< 2^-126 · 1.41). A softmax
// probability that small is below one rounding of any row sum (which is >= 1).
constexpr float kFastExpMin = -87.3f;
// Above this argument FastExp returns +∞ (2^127 · e^0.347 < FLT_MAX; the true overflow is at
// 88.72). Softmax arguments are <= 0 up to rounding.
constexpr float kFastExpMax = 88.3f;

// Returns e^x lane-wise for fp32 lanes: e^x = 2^n · e^r with n = round(x·log2 e) and
// r = x − n·ln 2 (Cody-Waite: ln 2 split in two constants so n·C1 is exact), |r| <= ln2/2, e^r from
// Cephes' expf polynomial (degree 7). Error against fp64 exp: at most 1.01 ulp for every float in
// [kFastExpMin, kFastExpMax] (checked exhaustively on the AVX3, SSSE3 and SCALAR targets;
// tests/unit_cpu_simd.cpp samples it on every compiled target), as Highway's Exp. Returns 0 below
// that range (−∞ included), +∞ above it, NaN for NaN.
template <class D>
HWY_INLINE hn::Vec<D> FastExp(D d, hn::Vec<D> x) {
  static_assert(sizeof(hn::TFromD<D>) == 4, "FastExp is for fp32 lanes");
  using V = hn::Vec<D>;
  const hn::RebindToUnsigned<D> du;
  // Adding 1.5·2^23 rounds x·log2 e to an integer held in the low mantissa bits (|x·log2 e| < 2^22).
  constexpr float kShifter = 12582912.0f;
  constexpr uint32_t kShifterBits = 0x4B400000u;  // the bits of kShifter
  constexpr uint32_t kExponentBias = 127;
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
  const V y = hn::Mul(er, hn::BitCast(d, hn::ShiftLeft<23>(biased)));
  const V low = hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, kFastExpMin)), y);
  return hn::IfThenElse(hn::Gt(x, hn::Set(d, kFastExpMax)), hn::Set(d, std::numeric_limits<float>::infinity()), low);
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_EXP_INL_H_
