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

// Asks the CPU to start loading the cache lines of the n elements at element offset `off` of `data`
// (dtype t), to be written when `for_write`. A work item reads its q rows (and writes its out rows)
// once, cold: issuing every miss of a block of rows first overlaps them, instead of meeting them
// one row at a time (measured: forward f32 d = 128, N = 1024, ~3-6 % faster).
inline void prefetch_row(const void* data, DType t, int64_t off, int64_t n, bool for_write = false) {
  constexpr int64_t kLine = 64;
  const int64_t size = t == DType::f32 ? 4 : 2;
  const char* p = static_cast<const char*>(data) + off * size;
  for (int64_t b = 0; b < n * size; b += kLine) {
    if (for_write) {
      __builtin_prefetch(p + b, 1);
    } else {
      __builtin_prefetch(p + b, 0);
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
