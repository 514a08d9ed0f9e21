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

// Whether this target decodes rows of quantized dtype t in registers (LoadCodes): i8 on
// every vector target; e4m3 and e5m2 through f16 where f16 widens in vectors (WidensInVectors).
inline bool DequantizesInVectors(DType t) {
#if HWY_TARGET == HWY_SCALAR
  static_cast<void>(t);
  return false;
#else
  return t == DType::i8 || ((t == DType::e4m3 || t == DType::e5m2) && WidensInVectors(DType::f16));
#endif
}

// The factor a row's scale carries besides its own when the row is read in place (LoadCodes): e4m3
// codes are decoded as f16 values 2^-8 times their own (below), so their scale is multiplied by 2^8
// (exactly, or to infinity, which the caller must not use: ScaledCodesUsable).
inline float DequantizeScaleFactor(DType t) { return t == DType::e4m3 ? 256.0f : 1.0f; }

// The largest magnitude of a finite decoded value of quantized dtype t.
inline float MaxCodeMagnitude(DType t) {
  switch (t) {
    case DType::e4m3:
      return 448.0f;
    case DType::e5m2:
      return 57344.0f;
    default:
      return 128.0f;  // i8
  }
}

// Whether rows of a quantized dtype whose largest decoded magnitude is `largest` (MaxCodeMagnitude)
// with scale `s` (finite, > 0) may be read in place (LoadCodes), their scale applied to each
// finished dot product and probability instead of to each element: that computes the products of
// the dequantized values fl32(decode · s) up to rounding, provided no decode · s overflows (the
// dequantized copy would hold an infinity there); s times DequantizeScaleFactor is then finite too.
inline bool ScaledCodesUsable(float s, float largest) { return std::isfinite(s * largest); }

// Whether the n e4m3 codes at p hold a NaN (S.1111.111), which LoadCodes does not decode.
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

// Returns decode(code) / DequantizeScaleFactor for the Lanes(d) codes at p, exactly (docs/semantics.md,
// "Quantized K/V"): i8 converts exactly to fp32; an e5m2 code is the top byte of the f16 of the
// same value; an e4m3 code S.EEEE.MMM shifted to S.0EEEE.MMM0000000 is the f16 of its value times
// 2^-8 (subnormals too), which the scale's factor 2^8 undoes exactly. NaN e4m3 codes are not decoded
// (HasE4M3NaN). The row's scale is applied by the caller: once per dot product or probability.
template <class D>
HWY_INLINE hn::Vec<D> LoadCodes(D d, const int8_t* HWY_RESTRICT p) {
  const hn::RebindToSigned<D> di;
  return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, D>(), p)));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadCodes(D d, const E5M2Bits* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, D> d16;
  const auto bits = hn::ShiftLeft<8>(hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, D>(), reinterpret_cast<const uint8_t*>(p))));
  return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), bits));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadCodes(D d, const E4M3Bits* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, D> d16;
  const auto t = hn::ShiftLeft<7>(hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, D>(), reinterpret_cast<const uint8_t*>(p))));
  const auto bits = hn::Add(t, hn::And(t, hn::Set(d16, 0x4000)));  // the sign from bit 14 to bit 15
  return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), bits));
}

// Whether rows of element type T are quantized codes (LoadCodes).
template <class T>
inline constexpr bool kCodeRow = std::is_same_v<T, int8_t> || std::is_same_v<T, E4M3Bits> || std::is_same_v<T, E5M2Bits>;

// Returns the Lanes(d) elements at p of a row read where it lives as fp32: LoadWide, or for
// quantized codes LoadCodes (their values without the row's scale).
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadInPlace(D d, const T* HWY_RESTRICT p) {
  if constexpr (kCodeRow<T>) {
    return LoadCodes(d, p);
  } else {
    return LoadWide(d, p);
  }
}

// x times row j's scale for rows of type T read in place: scales[j] for quantized codes (their
// scale times DequantizeScaleFactor), x itself otherwise (scales is not read).
template <class T>
HWY_INLINE float Scaled(float x, const float* HWY_RESTRICT scales, int64_t j) {
  if constexpr (kCodeRow<T>) {
    return x * scales[j];
  } else {
    static_cast<void>(scales);
    static_cast<void>(j);
    return x;
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
