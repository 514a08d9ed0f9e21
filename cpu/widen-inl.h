// Widening rows of 16-bit inputs to fp32 with vector instructions where the conversion is exact:
// bf16 -> f32 is a 16-bit shift on every vector target; f16 -> f32 uses F16C on AVX2/AVX-512
// (exact for every value, subnormals included). Other targets, and row tails, use the scalar
// flashattn/convert.hpp functions (rows.h), so every target widens to the same values.
#if defined(FLASHATTN_CPU_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_WIDEN_INL_H_
#undef FLASHATTN_CPU_WIDEN_INL_H_
#else
#define FLASHATTN_CPU_WIDEN_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "flashattn/problem.hpp"
#include "flashattn/types.hpp"
#include "hwy/highway.h"
#include "rows.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether this target loads dtype t as fp32 vectors exactly (LoadWide): f32 as is, bf16 (a 16-bit
// shift) on every vector target, f16 with F16C (AVX2 / AVX-512). Elsewhere rows go through the
// scalar flashattn/convert.hpp functions.
inline bool WidensInVectors(DType t) {
  if (t == DType::f32) return true;
#if HWY_TARGET == HWY_SCALAR
  return false;
#else
  return t == DType::bf16 || (t == DType::f16 && HWY_TARGET <= HWY_AVX2);
#endif
}

// Returns the fp32 vector of the Lanes(d) elements at p: f32 as is, bf16 / f16 widened (for the
// dtypes WidensInVectors allows on this target).
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadWide(D d, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, p);
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p));
  }
}

// Quantized rows read where they live (the decode path): the element types a row pointer is cast
// to. int8_t is the i8 code itself; the 8-bit floats get their own types so the loads below pick
// their decoding.
struct E4M3Bits {
  uint8_t bits;
};
struct E5M2Bits {
  uint8_t bits;
};

// Whether this target dequantizes rows of quantized dtype t in registers (LoadDequantized): i8 on
// every vector target; e4m3 and e5m2 through f16 where f16 widens in vectors (WidensInVectors).
inline bool DequantizesInVectors(DType t) {
#if HWY_TARGET == HWY_SCALAR
  static_cast<void>(t);
  return false;
#else
  return t == DType::i8 || ((t == DType::e4m3 || t == DType::e5m2) && WidensInVectors(DType::f16));
#endif
}

// The factor LoadDequantized's scale carries besides the row's scale: e4m3 codes are decoded as
// f16 values 2^-8 times their own (below), so their scale is multiplied by 2^8 (exactly, or to
// infinity, which the caller must not use: ScaledCodesUsable).
inline float DequantizeScaleFactor(DType t) { return t == DType::e4m3 ? 256.0f : 1.0f; }

// Whether a row scale `s` (finite, > 0) times DequantizeScaleFactor(t) is finite, so that
// LoadDequantized reproduces fl32(decode · s).
inline bool ScaledCodesUsable(DType t, float s) { return std::isfinite(s * DequantizeScaleFactor(t)); }

// Whether the n e4m3 codes at p hold a NaN (S.1111.111), which LoadDequantized does not decode.
inline bool HasE4M3NaN(const uint8_t* HWY_RESTRICT p, int64_t n) {
  int64_t x = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<uint8_t> d8;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d8));
  const auto low7 = hn::Set(d8, 0x7f);
  for (; x + L <= n; x += L) {
    if (!hn::AllFalse(d8, hn::Eq(hn::And(hn::LoadU(d8, p + x), low7), low7))) return true;
  }
#endif
  for (; x < n; ++x) {
    if ((p[x] & 0x7f) == 0x7f) return true;
  }
  return false;
}

// Returns fl32(decode(code) · s) for the Lanes(d) codes at p, given `scale` = s ·
// DequantizeScaleFactor (docs/semantics.md, "Quantized K/V"): bit for bit DequantizeRow's values.
// i8 converts exactly to fp32; an e5m2 code is the top byte of the f16 of the same value; an e4m3
// code S.EEEE.MMM shifted to S.0EEEE.MMM0000000 is the f16 of its value times 2^-8 (subnormals
// too), which the scale's 2^8 undoes exactly, so each lane's product rounds once, as the
// definition's. NaN e4m3 codes are not decoded (HasE4M3NaN).
template <class D>
HWY_INLINE hn::Vec<D> LoadDequantized(D d, const int8_t* HWY_RESTRICT p, hn::Vec<D> scale) {
  const hn::RebindToSigned<D> di;
  return hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, D>(), p))), scale);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadDequantized(D d, const E5M2Bits* HWY_RESTRICT p, hn::Vec<D> scale) {
  const hn::Rebind<uint16_t, D> d16;
  const auto bits = hn::ShiftLeft<8>(hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, D>(), reinterpret_cast<const uint8_t*>(p))));
  return hn::Mul(hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), bits)), scale);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadDequantized(D d, const E4M3Bits* HWY_RESTRICT p, hn::Vec<D> scale) {
  const hn::Rebind<uint16_t, D> d16;
  const auto t = hn::ShiftLeft<7>(hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, D>(), reinterpret_cast<const uint8_t*>(p))));
  const auto bits = hn::Add(t, hn::And(t, hn::Set(d16, 0x4000)));  // the sign from bit 14 to bit 15
  return hn::Mul(hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), bits)), scale);
}

// Whether rows of element type T are quantized codes (LoadDequantized).
template <class T>
inline constexpr bool kCodeRow = std::is_same_v<T, int8_t> || std::is_same_v<T, E4M3Bits> || std::is_same_v<T, E5M2Bits>;

// Returns the Lanes(d) elements at p of a row read where it lives as fp32: LoadWide, or for
// quantized codes LoadDequantized with the row's `scale` (ignored otherwise).
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadInPlace(D d, const T* HWY_RESTRICT p, hn::Vec<D> scale) {
  if constexpr (kCodeRow<T>) {
    return LoadDequantized(d, p, scale);
  } else {
    static_cast<void>(scale);
    return LoadWide(d, p);
  }
}

// The scale vector LoadInPlace takes for row j of rows of type T: scales[j] for quantized codes
// (scales is not read otherwise).
template <class T, class D>
HWY_INLINE hn::Vec<D> RowScale(D d, const float* HWY_RESTRICT scales, int64_t j) {
  if constexpr (kCodeRow<T>) {
    return hn::Set(d, scales[j]);
  } else {
    static_cast<void>(scales);
    static_cast<void>(j);
    return hn::Zero(d);
  }
}

// Writes the n elements at element offset `off` of `data` (dtype t) to dst as floats: 16-bit rows
// by LoadWide where WidensInVectors, the rest (f32, row tails) by the scalar rows.h loop.
inline void WidenRow(const void* data, DType t, int64_t off, int64_t n, float* HWY_RESTRICT dst) {
  int64_t x = 0;
  if (t != DType::f32 && WidensInVectors(t)) {
    const hn::ScalableTag<float> df;
    const int64_t L = static_cast<int64_t>(hn::Lanes(df));
    auto widen = [&](const auto* s) {
      for (; x + L <= n; x += L) hn::StoreU(LoadWide(df, s + x), df, dst + x);
    };
    if (t == DType::bf16) {
      widen(static_cast<const hwy::bfloat16_t*>(data) + off);
    } else {
      widen(static_cast<const hwy::float16_t*>(data) + off);
    }
  }
  ::flashattn::cpu::detail::load_row(data, t, off + x, n - x, dst + x);
}

// Writes the n elements at element offset `off` of a quantized row (i8, e4m3, e5m2) to dst as their
// decoded values times `scale` (docs/semantics.md, "Quantized K/V"): bit for bit
// flashattn::dequantize(load_as_float(...), scale), decoded with integer vector operations on every
// vector target (the 8-bit floats' bits moved into fp32 fields; subnormals as m·2^-9 or m·2^-16),
// the tail (and the scalar target) by rows.h's load_row.
inline void DequantizeRow(const void* data, DType t, int64_t off, int64_t n, float scale, float* HWY_RESTRICT dst) {
  int64_t x = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  if (t == DType::i8) {
    const hn::Rebind<int8_t, decltype(df)> d8;
    const int8_t* p = static_cast<const int8_t*>(data) + off;
    for (; x + L <= n; x += L) hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p + x))), vs), df, dst + x);
  } else {
    const hn::Rebind<uint8_t, decltype(df)> d8;
    const hn::RebindToUnsigned<decltype(df)> du;
    const uint8_t* p = static_cast<const uint8_t*>(data) + off;
    const bool e4 = t == DType::e4m3;
    const auto low7 = hn::Set(di, 0x7f), sign_bit = hn::Set(di, 0x80);
    const auto bias = hn::Set(di, e4 ? 120 << 23 : 112 << 23);     // exponent bias 7 / 15 -> 127
    const auto sub_limit = hn::Set(di, e4 ? 8 : 4);                  // zero exponent field
    const auto sub_unit = hn::Set(df, e4 ? 0x1p-9f : 0x1p-16f);     // one subnormal step
    for (; x + L <= n; x += L) {
      const auto b = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, p + x)));
      const auto mag = hn::And(b, low7);
      const auto normal = hn::Add(e4 ? hn::ShiftLeft<20>(mag) : hn::ShiftLeft<21>(mag), bias);
      const auto sub = hn::BitCast(di, hn::Mul(hn::ConvertTo(df, mag), sub_unit));
      auto bits = hn::IfThenElse(hn::Lt(mag, sub_limit), sub, normal);
      if (e4) {  // S.1111.111: NaN (no infinities)
        bits = hn::IfThenElse(hn::Eq(mag, low7), hn::Set(di, 0x7fc00000), bits);
      } else {   // exponent field 31: infinity or NaN, as IEEE
        bits = hn::IfThenElse(hn::Gt(mag, hn::Set(di, 0x7b)),
                              hn::Or(hn::Set(di, 0x7f800000), hn::ShiftLeft<21>(hn::And(mag, hn::Set(di, 3)))), bits);
      }
      bits = hn::Or(bits, hn::ShiftLeft<24>(hn::And(b, sign_bit)));
      hn::StoreU(hn::Mul(hn::BitCast(df, bits), vs), df, dst + x);
    }
  }
#endif
  ::flashattn::cpu::detail::load_row(data, t, off + x, n - x, dst + x);  // the scalar decodings (rows.h)
  for (; x < n; ++x) dst[x] = dequantize(dst[x], scale);
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_WIDEN_INL_H_
