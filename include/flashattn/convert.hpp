// Conversions between fp32 and the 16-bit storage types, with round-to-nearest-even.
//
// Every part of flashattn (oracle, CPU, GPU, tests) rounds through these functions, so "rounded to
// the output dtype" means the same bits everywhere. Highway 1.0.3's DemoteTo(bf16) truncates; do not
// use it for results.
#pragma once

#include <cstdint>
#include <cstring>

#include "flashattn/config.hpp"
#include "flashattn/types.hpp"

namespace flashattn {

// 16-bit storage types: bit containers without arithmetic. Convert with to_float / from_float.
struct bf16_t { uint16_t bits = 0; };
struct f16_t { uint16_t bits = 0; };

// Returns the IEEE-754 bit pattern of x.
FLASHATTN_HD inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Returns the float with bit pattern u.
FLASHATTN_HD inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Returns x rounded to bfloat16 with round-to-nearest-even. NaN stays NaN (quiet, sign kept);
// values beyond the largest finite bf16 round to ±inf as IEEE requires. Exact for every input.
FLASHATTN_HD inline uint16_t bf16_bits_from_float(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // ties go to the even neighbour; overflow carries into inf
  return static_cast<uint16_t>(u >> 16);
}

// Returns the bfloat16 value with bit pattern b as a float (exact).
FLASHATTN_HD inline float float_from_bf16_bits(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Returns x rounded to IEEE half precision with round-to-nearest-even, including the subnormal
// range (below 2^-14) and overflow to ±inf (at or above 65520). NaN stays a quiet NaN, sign kept.
FLASHATTN_HD inline uint16_t f16_bits_from_float(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (or inf): inf
  if (a < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    if (a < 0x33000000u) return sign;  // below 2^-25: rounds to zero (2^-25 itself ties to 0)
    const uint32_t exp = a >> 23;                       // 102 .. 112
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // 24-bit significand
    const uint32_t shift = 126u - exp;                  // 14 .. 24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias the exponent (127 -> 15) and round 13 bits away; a carry may roll into inf.
  uint32_t r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

// Returns the half-precision value with bit pattern h as a float (exact, subnormals included).
FLASHATTN_HD inline float float_from_f16_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  // Subnormal: value = mant * 2^-24, exact in float.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

FLASHATTN_HD inline float to_float(float x) { return x; }
FLASHATTN_HD inline float to_float(bf16_t x) { return float_from_bf16_bits(x.bits); }
FLASHATTN_HD inline float to_float(f16_t x) { return float_from_f16_bits(x.bits); }

// Returns x rounded (round-to-nearest-even) to the storage type T (float, bf16_t or f16_t).
template <class T>
FLASHATTN_HD inline T from_float(float x);
template <>
FLASHATTN_HD inline float from_float<float>(float x) { return x; }
template <>
FLASHATTN_HD inline bf16_t from_float<bf16_t>(float x) { return bf16_t{bf16_bits_from_float(x)}; }
template <>
FLASHATTN_HD inline f16_t from_float<f16_t>(float x) { return f16_t{f16_bits_from_float(x)}; }

// Returns the value of the OCP 8-bit float E4M3FN with bit pattern b (sign, 4 exponent bits with bias
// 7, 3 mantissa bits; no infinities; S.1111.111 is NaN; largest finite ±448) as a float (exact).
FLASHATTN_HD inline float float_from_e4m3_bits(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 0x7u;
  if (e == 0xfu && m == 0x7u) return bits_float(sign | 0x7fc00000u);                      // NaN
  if (e == 0) return bits_float(sign | float_bits(static_cast<float>(m) * 0x1p-9f));      // subnormal: m·2^-9
  return bits_float(sign | ((e + 120u) << 23) | (m << 20));                               // 2^(e-7)·(1 + m/8)
}

// Returns the value of the OCP 8-bit float E5M2 with bit pattern b (IEEE-style: 5 exponent bits with
// bias 15, 2 mantissa bits, infinities and NaNs) as a float (exact): the top byte of an f16.
FLASHATTN_HD inline float float_from_e5m2_bits(uint8_t b) { return float_from_f16_bits(static_cast<uint16_t>(b << 8)); }

// Returns the code of an 8-bit float format (sign, E exponent bits with bias `Bias`, M mantissa
// bits) nearest to x, ties to the even code, finite magnitudes past the largest finite value `MaxCode`
// and infinities saturating to it (as cvt.rn.satfinite), NaN to `NanCode` (sign kept).
template <int Bias, int M, uint8_t MaxCode, uint8_t NanCode>
FLASHATTN_HD inline uint8_t fp8_bits_from_float(float x) {
  const uint32_t u = float_bits(x), a = u & 0x7fffffffu;
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | NanCode);
  const uint32_t exp32 = a >> 23;
  const uint32_t max_bits = static_cast<uint32_t>(((MaxCode >> M) + 127 - Bias) << 23) | ((MaxCode & ((1u << M) - 1u)) << (23 - M));
  if (a >= max_bits) return static_cast<uint8_t>(sign | MaxCode);
  if (exp32 >= static_cast<uint32_t>(128 - Bias)) {
    // Normal: rebias the exponent and round 23 - M bits away, ties to even; a carry may roll into the
    // next binade (never past MaxCode: anything that rounds there was saturated above).
    uint32_t r = a - (static_cast<uint32_t>(127 - Bias) << 23);
    r += (1u << (22 - M)) - 1u + ((r >> (23 - M)) & 1u);
    return static_cast<uint8_t>(sign | (r >> (23 - M)));
  }
  // Subnormal of the format: the value in units of its spacing 2^(1 - Bias - M), rounded half to even
  // (a result of 2^M is the smallest normal, whose code is the same integer).
  if (exp32 == 0) return sign;  // fp32 subnormals are far below half the spacing
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 151u - exp32 - static_cast<uint32_t>(Bias + M);
  if (shift > 24u) return sign;
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint8_t>(sign | h);
}

// Returns the E4M3FN code nearest to x (ties to even; beyond ±448, infinities included: ±448; NaN:
// S.1111.111).
FLASHATTN_HD inline uint8_t e4m3_bits_from_float(float x) { return fp8_bits_from_float<7, 3, 0x7e, 0x7f>(x); }

// Returns the E5M2 code nearest to x (ties to even; beyond ±57344, infinities included: ±57344;
// NaN: S.11111.10).
FLASHATTN_HD inline uint8_t e5m2_bits_from_float(float x) { return fp8_bits_from_float<15, 2, 0x7b, 0x7e>(x); }

// Returns the integer nearest to x (ties to even), saturated to [-127, 127]; NaN gives 0 (callers
// reject NaN before: an i8 cache cannot hold it).
FLASHATTN_HD inline int8_t i8_from_float(float x) {
  const uint32_t u = float_bits(x), a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0;
  int32_t h;
  if (a >= 0x42fe0000u) {  // |x| >= 127
    h = 127;
  } else if ((a >> 23) < 126u) {  // |x| < 0.5
    h = 0;
  } else {
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u, shift = 150u - (a >> 23);  // shift in [17, 24]
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    h = static_cast<int32_t>(q);
  }
  return static_cast<int8_t>((u >> 31) ? -h : h);
}

// The largest finite magnitude of quantized dtype t (i8: 127, the symmetric range an append writes).
constexpr float quantized_max(DType t) { return t == DType::i8 ? 127.0f : t == DType::e4m3 ? 448.0f : 57344.0f; }

// Returns the code of quantized dtype t nearest to x (docs/semantics.md, "Appending to a quantized
// cache"), as the byte stored.
FLASHATTN_HD inline uint8_t quantize_bits(DType t, float x) {
  switch (t) {
    case DType::i8: return static_cast<uint8_t>(i8_from_float(x));
    case DType::e4m3: return e4m3_bits_from_float(x);
    default: return e5m2_bits_from_float(x);
  }
}

// Returns x rounded to dtype t and widened back to float (the value a tensor of dtype t would hold).
FLASHATTN_HD inline float round_to(DType t, float x) {
  switch (t) {
    case DType::bf16: return float_from_bf16_bits(bf16_bits_from_float(x));
    case DType::f16: return float_from_f16_bits(f16_bits_from_float(x));
    default: return x;
  }
}

// Reads element i of a buffer of dtype t as float. A quantized element is decoded, not scaled
// (flashattn::dequantize in problem.hpp applies its scale).
inline float load_as_float(const void* data, DType t, int64_t i) {
  switch (t) {
    case DType::bf16: return float_from_bf16_bits(static_cast<const uint16_t*>(data)[i]);
    case DType::f16: return float_from_f16_bits(static_cast<const uint16_t*>(data)[i]);
    case DType::i8: return static_cast<float>(static_cast<const int8_t*>(data)[i]);
    case DType::e4m3: return float_from_e4m3_bits(static_cast<const uint8_t*>(data)[i]);
    case DType::e5m2: return float_from_e5m2_bits(static_cast<const uint8_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

// Writes x, rounded to nearest even, to element i of a buffer of dtype t.
inline void store_from_float(void* data, DType t, int64_t i, float x) {
  switch (t) {
    case DType::bf16: static_cast<uint16_t*>(data)[i] = bf16_bits_from_float(x); break;
    case DType::f16: static_cast<uint16_t*>(data)[i] = f16_bits_from_float(x); break;
    case DType::f32: static_cast<float*>(data)[i] = x; break;
    default: break;  // quantized types are never written (no output has one)
  }
}

// Unit roundoff of dtype t: half the distance from 1 to the next representable value.
constexpr double unit_roundoff(DType t) {
  return t == DType::bf16 ? 0x1p-8 : t == DType::f16 ? 0x1p-11 : 0x1p-24;
}

// Returns the spacing of dtype t's subnormals (its smallest positive value): no value of that dtype
// is closer than this to another, whatever its magnitude.
constexpr double smallest_spacing(DType t) {
  return t == DType::bf16 ? 0x1p-133 : t == DType::f16 ? 0x1p-24 : 0x1p-149;
}

}  // namespace flashattn
