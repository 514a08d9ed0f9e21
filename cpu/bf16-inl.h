// Operand packing of the bf16 tile products of the forward and the backward (Plan::bf16_dot; kernel
// in bf16_dot.h): bf16 rows copied as uint32 "pairs" of consecutive elements, pairs of consecutive
// rows interleaved, and fp32 tiles (Pᵀ, dSᵀ) rounded to bf16 (nearest even, as flashattn/convert.hpp
// and the GPU kernels) and paired along either dimension. The packers of inputs also report whether
// they saw a "tiny" value: nonzero with |x| < 2⁻⁵⁶ (subnormals included). Tiles without one can use
// vdpbf16ps, whose DAZ/FTZ cannot then change a product of two inputs (S = Q·Kᵀ, dP = dO·Vᵀ): every
// product is >= 2⁻¹¹² and a multiple of 2⁻¹²⁶, so every partial sum is 0 or normal. Tiles with one
// use the exact (widening) kernel.
//
// Per-target include guard (Highway's toggle idiom): re-included once per target by foreach_target.
#if defined(FLASHATTN_CPU_BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_BF16_INL_H_
#undef FLASHATTN_CPU_BF16_INL_H_
#else
#define FLASHATTN_CPU_BF16_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether this target compiles the bf16 tile products (Plan::bf16_dot): the AVX-512 ones, which
// kTargetAvx3Bf16 runs on (targets.cc).
constexpr bool kBf16Path = HWY_TARGET <= HWY_AVX3;

// bf16 bit patterns (magnitude bits) at or above this are >= 2⁻⁵⁶ (biased exponent 71).
constexpr uint32_t kBf16TinyBelow = 71u << 7;

// Returns whether bf16 pattern b is tiny (nonzero, |x| < 2⁻⁵⁶).
inline bool TinyBf16(uint16_t b) {
  const uint32_t m = b & 0x7fffu;
  return m != 0 && m < kBf16TinyBelow;
}

// Mask of the lanes of v (bf16 patterns widened to u32 lanes) that are tiny.
template <class DU>
HWY_INLINE hn::Mask<DU> TinyLanes(DU du, hn::Vec<DU> v) {
  const hn::RebindToSigned<DU> di;
  const auto m = hn::BitCast(di, hn::And(v, hn::Set(du, 0x7fffu)));
  return hn::RebindMask(du, hn::And(hn::Gt(m, hn::Zero(di)), hn::Lt(m, hn::Set(di, static_cast<int32_t>(kBf16TinyBelow)))));
}

// Copies n bf16 values from src to dst as ceil(n/2) pairs (a zero after an odd n). Returns whether
// one is tiny.
inline bool PackBf16Row(const uint16_t* HWY_RESTRICT src, int64_t n, uint32_t* HWY_RESTRICT dst) {
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(du));
  auto* out = reinterpret_cast<uint16_t*>(dst);
  auto tiny = hn::Zero(du);  // lanes that saw a tiny value: all ones
  int64_t x = 0;
  for (; x + L <= n; x += L) {
    const auto v = hn::LoadU(d16, src + x);
    tiny = hn::Or(tiny, hn::VecFromMask(du, TinyLanes(du, hn::PromoteTo(du, v))));
    hn::StoreU(v, d16, out + x);
  }
  bool any = !hn::AllFalse(du, hn::Ne(tiny, hn::Zero(du)));
  for (; x < n; ++x) {
    out[x] = src[x];
    any |= TinyBf16(src[x]);
  }
  if (n % 2) out[n] = 0;
  return any;
}

// dst[x] = pair (a[x], b[x]) for x < n (b null: zeros), a and b rows of bf16. Returns whether a
// value is tiny.
inline bool PackBf16RowPair(const uint16_t* HWY_RESTRICT a, const uint16_t* HWY_RESTRICT b, int64_t n,
                            uint32_t* HWY_RESTRICT dst) {
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(du));
  auto tiny = hn::Zero(du);  // lanes that saw a tiny value: all ones
  int64_t x = 0;
  for (; x + L <= n; x += L) {
    const auto lo = hn::PromoteTo(du, hn::LoadU(d16, a + x));
    const auto hi = b ? hn::PromoteTo(du, hn::LoadU(d16, b + x)) : hn::Zero(du);
    tiny = hn::Or(tiny, hn::VecFromMask(du, hn::Or(TinyLanes(du, lo), TinyLanes(du, hi))));
    hn::StoreU(hn::Or(lo, hn::ShiftLeft<16>(hi)), du, dst + x);
  }
  bool any = !hn::AllFalse(du, hn::Ne(tiny, hn::Zero(du)));
  for (; x < n; ++x) {
    const uint16_t hi = b ? b[x] : 0;
    dst[x] = a[x] | static_cast<uint32_t>(hi) << 16;
    any |= TinyBf16(a[x]) || TinyBf16(hi);
  }
  return any;
}

// bf16 patterns (low 16 bits of each lane) of the floats v, rounded to nearest even; NaN stays a
// quiet NaN (flashattn/convert.hpp bf16_bits_from_float, lane-wise).
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> RoundToBf16Bits(DF /*df*/, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), lsb)));
  const auto nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x0040u));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
}

// pp[t][i] = pair (bf16(Pᵀ[2t][i]), bf16(Pᵀ[2t+1][i])) for t < ceil(nk/2), i < W (a zero after an
// odd nk); pt is [nk x W] fp32 with stride ld, pp [. x W] with stride ld, both vector-aligned. pp may
// be pt itself (in place: row t is written after rows 2t and 2t + 1 are read, column by column).
// Also pairs rows of bf16-valued fp32 tiles exactly (Qᵀ, dOᵀ, Q, dO in the backward).
template <class DF>
HWY_INLINE void PackProbabilityPairs(DF df, const float* pt, int64_t ld, int64_t nk, int64_t W, uint32_t* pp) {
  const hn::RebindToUnsigned<DF> du;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j < nk; j += 2) {
    const float* r0 = pt + j * ld;
    const float* r1 = j + 1 < nk ? r0 + ld : nullptr;
    uint32_t* out = pp + (j / 2) * ld;
    for (int64_t i = 0; i < W; i += L) {
      const auto lo = RoundToBf16Bits(df, hn::Load(df, r0 + i));
      const auto hi = r1 ? RoundToBf16Bits(df, hn::Load(df, r1 + i)) : hn::Zero(du);
      hn::Store(hn::Or(lo, hn::ShiftLeft<16>(hi)), du, out + i);
    }
  }
}

// Row j of dst (stride ldd uint32) = row j of the fp32 tile src (stride ld) rounded to bf16, as pairs
// of consecutive elements (element 2t in the low half of pair t), for j < n and W elements (a
// multiple of the lane count, even).
template <class DF>
HWY_INLINE void RoundRowsToBf16Pairs(DF df, const float* HWY_RESTRICT src, int64_t ld, int64_t n, int64_t W,
                                     uint32_t* HWY_RESTRICT dst, int64_t ldd) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> d16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j < n; ++j) {
    auto* out = reinterpret_cast<uint16_t*>(dst + j * ldd);
    for (int64_t i = 0; i < W; i += L) {
      const auto bits = hn::BitCast(di, RoundToBf16Bits(df, hn::Load(df, src + j * ld + i)));
      hn::StoreU(hn::DemoteTo(d16, bits), d16, out + i);  // patterns < 2¹⁶: no saturation
    }
  }
}

// Returns whether one of the n floats at x (n a multiple of the lane count) is tiny: nonzero with
// |x| < 2⁻⁵⁶ (the bf16 test of TinyBf16 on the widened values).
template <class DF>
HWY_INLINE bool AnyTinyFloat(DF df, const float* HWY_RESTRICT x, int64_t n) {
  const hn::RebindToSigned<DF> di;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const auto below = hn::Set(di, static_cast<int32_t>(kBf16TinyBelow << 16));
  auto tiny = hn::Zero(di);
  for (int64_t i = 0; i < n; i += L) {
    const auto m = hn::And(hn::BitCast(di, hn::Load(df, x + i)), hn::Set(di, 0x7fffffff));
    tiny = hn::Or(tiny, hn::VecFromMask(di, hn::And(hn::Gt(m, hn::Zero(di)), hn::Lt(m, below))));
  }
  return !hn::AllFalse(di, hn::Ne(tiny, hn::Zero(di)));
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_BF16_INL_H_
