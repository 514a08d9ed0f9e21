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
    case DType::i8: {
      const int8_t* s = static_cast<const int8_t*>(data) + off;
      for (int64_t x = 0; x < n; ++x) dst[x] = static_cast<float>(s[x]);
      break;
    }
    case DType::e4m3: {
      const uint8_t* s = static_cast<const uint8_t*>(data) + off;
      for (int64_t x = 0; x < n; ++x) dst[x] = float_from_e4m3_bits(s[x]);
      break;
    }
    case DType::e5m2: {
      const uint8_t* s = static_cast<const uint8_t*>(data) + off;
      for (int64_t x = 0; x < n; ++x) dst[x] = float_from_e5m2_bits(s[x]);
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
    default: break;  // quantized types are never written (no output has one)
  }
}

// What a prefetched row is for.
enum class PrefetchFor : uint8_t {
  read_now,   // read next: into L1
  read_soon,  // read by the next work item, a tile or more from now: into L2 (leaves L1 to the tiles)
  write,      // to be written
};

// Asks the CPU to start loading the cache line holding p, for `how`.
inline void prefetch_line(const char* p, PrefetchFor how) {
  switch (how) {
    case PrefetchFor::read_now: __builtin_prefetch(p, 0, 3); break;
    case PrefetchFor::read_soon: __builtin_prefetch(p, 0, 2); break;
    case PrefetchFor::write: __builtin_prefetch(p, 1, 3); break;
  }
}

// Asks the CPU to start loading the cache lines of the n elements at element offset `off` of `data`
// (dtype t). A work item reads its q rows (and writes its out rows) once, cold: issuing every miss
// of a block of rows early overlaps them with each other and with the tile loop, instead of meeting
// them one row at a time (measured: forward f32 d = 128, N = 1024, ~3-6 % when issued just before
// use; docs/cpu-design.md, "Work items", for issuing them a tile ahead).
inline void prefetch_row(const void* data, DType t, int64_t off, int64_t n, PrefetchFor how = PrefetchFor::read_now) {
  constexpr int64_t kLine = 64;
  const int64_t size = t == DType::f32 ? 4 : 2;
  const char* p = static_cast<const char*>(data) + off * size;
  // Four lines per loop step: a loop of one line per step cost a tenth of the instructions of a
  // decode call that streamed its K/V rows through here.
  const auto line = [&](int64_t b) { prefetch_line(p + b, how); };
  const int64_t bytes = n * size;
  int64_t b = 0;
  for (; b + 4 * kLine <= bytes; b += 4 * kLine) {
    line(b);
    line(b + kLine);
    line(b + 2 * kLine);
    line(b + 3 * kLine);
  }
  for (; b < bytes; b += kLine) line(b);
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
