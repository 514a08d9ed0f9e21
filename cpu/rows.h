// Reading and writing one contiguous row of a tensor in its dtype, through fp32. Loads widen
// exactly; stores round to nearest even with the shared flashattn/convert.hpp functions, so the CPU
// rounds its outputs exactly like the oracle. The dtype switch sits outside the element loop.
#pragma once

#include <cstdint>

#include "flashattn/convert.hpp"
#include "flashattn/types.hpp"

namespace flashattn::cpu::detail {

// Writes the n elements at element offset `off` of `data` (dtype t) to dst as floats.
inline void load_row(const void* data, DType t, int64_t off, int64_t n, float* dst) {
  switch (t) {
    case DType::f32: {
      const float* s = static_cast<const float*>(data) + off;
      for (int64_t x = 0; x < n; ++x) dst[x] = s[x];
      break;
    }
    case DType::bf16: {
      const uint16_t* s = static_cast<const uint16_t*>(data) + off;
      for (int64_t x = 0; x < n; ++x) dst[x] = float_from_bf16_bits(s[x]);
      break;
    }
    case DType::f16: {
      const uint16_t* s = static_cast<const uint16_t*>(data) + off;
      for (int64_t x = 0; x < n; ++x) dst[x] = float_from_f16_bits(s[x]);
      break;
    }
  }
}

// Writes src[0, n) rounded to dtype t to the n elements at element offset `off` of `data`.
inline void store_row(void* data, DType t, int64_t off, int64_t n, const float* src) {
  switch (t) {
    case DType::f32: {
      float* s = static_cast<float*>(data) + off;
      for (int64_t x = 0; x < n; ++x) s[x] = src[x];
      break;
    }
    case DType::bf16: {
      uint16_t* s = static_cast<uint16_t*>(data) + off;
      for (int64_t x = 0; x < n; ++x) s[x] = bf16_bits_from_float(src[x]);
      break;
    }
    case DType::f16: {
      uint16_t* s = static_cast<uint16_t*>(data) + off;
      for (int64_t x = 0; x < n; ++x) s[x] = f16_bits_from_float(src[x]);
      break;
    }
  }
}

// Writes n zeros of dtype t at element offset `off` of `data`.
inline void store_zero_row(void* data, DType t, int64_t off, int64_t n) {
  if (t == DType::f32) {
    float* s = static_cast<float*>(data) + off;
    for (int64_t x = 0; x < n; ++x) s[x] = 0.0f;
  } else {
    uint16_t* s = static_cast<uint16_t*>(data) + off;
    for (int64_t x = 0; x < n; ++x) s[x] = 0;
  }
}

}  // namespace flashattn::cpu::detail
