// The primitives of mma.cuh for the host emulator (emu.hpp), written from the PTX ISA's
// definitions: ldmatrix (lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of each 8x8 matrix,
// whose 8 row addresses come from lanes 8i..8i+7; .trans transposes each matrix), and
// mma.sync.m16n8k16 with the A/B/C fragment layouts listed in mma.cuh.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "emu.hpp"
#include "flashattn/convert.hpp"

namespace flashattn::gpu::detail {

template <class T>
struct Elem;
template <>
struct Elem<__half> {
  static uint32_t pack(float lo, float hi) {
    return uint32_t{f16_bits_from_float(lo)} | (uint32_t{f16_bits_from_float(hi)} << 16);
  }
  static float unpack(uint16_t b) { return float_from_f16_bits(b); }
  static float to_float(__half x) { return float_from_f16_bits(static_cast<__half_raw>(x).x); }
  static __half from_float(float x) {
    __half_raw r;
    r.x = f16_bits_from_float(x);
    return __half(r);
  }
};
template <>
struct Elem<__nv_bfloat16> {
  static uint32_t pack(float lo, float hi) {
    return uint32_t{bf16_bits_from_float(lo)} | (uint32_t{bf16_bits_from_float(hi)} << 16);
  }
  static float unpack(uint16_t b) { return float_from_bf16_bits(b); }
  static float to_float(__nv_bfloat16 x) { return float_from_bf16_bits(static_cast<__nv_bfloat16_raw>(x).x); }
  static __nv_bfloat16 from_float(float x) {
    __nv_bfloat16_raw r;
    r.x = bf16_bits_from_float(x);
    return __nv_bfloat16(r);
  }
};

// The wrappers take their call site as default arguments (the program points of the checks'
// reports; check.hpp). cp.async: the copy is queued and lands when a wait_group retires its group.
inline void cp_async_16(void* dst, const void* src, bool valid, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  emu::cp_async(dst, src, valid, emu::Site{file, line});
}
inline void cp_async_4(void* dst, const void* src, bool valid, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  emu::cp_async(dst, src, valid, emu::Site{file, line}, 4);
}
inline void cp_async_commit(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu::cp_async_commit(emu::Site{file, line});
}
template <int N>
inline void cp_async_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu::cp_async_wait(N, emu::Site{file, line});
}

// Plain loads and stores (mma.cuh): checked as shared accesses when p is in the block's shared
// memory, else as global accesses, both at their natural alignment.
template <class T>
inline T ld(const T* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  T v;
  emu::plain_load(&v, p, sizeof(T), emu::Site{file, line});
  return v;
}
template <class T>
struct Stored {
  using type = T;
};
template <class T>
inline void st(T* p, const typename Stored<T>::type& v, const char* file = __builtin_FILE(),
               int line = __builtin_LINE()) {
  emu::plain_store(p, &v, sizeof(T), emu::Site{file, line});
}

// atomic_add_pair (mma.cuh): checked and performed by emu::atomic_add_pair (check.hpp).
inline void atomic_add_pair(float* p, float a, float b, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
  emu::atomic_add_pair(p, a, b, emu::Site{file, line});
}

inline uint16_t u16_at(const void* row, int i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const unsigned char*>(row) + 2 * i, 2);
  return v;
}

// Each lane's row address: 16 bytes of shared memory, 16-byte aligned (checked as a read by the
// lane that supplies it).
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  emu::smem_read(row, 16, 16, "ldmatrix", emu::Site{file, line});
  emu::WarpExchange& w = emu::warp_exchange();
  const int l = emu::lane();
  w.ptr[l] = row;
  emu::sync_warp();
  for (int i = 0; i < 4; ++i) {
    const void* src = w.ptr[8 * i + l / 4];
    r[i] = uint32_t{u16_at(src, 2 * (l % 4))} | (uint32_t{u16_at(src, 2 * (l % 4) + 1)} << 16);
  }
  emu::sync_warp();
}

inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  emu::smem_read(row, 16, 16, "ldmatrix.trans", emu::Site{file, line});
  emu::WarpExchange& w = emu::warp_exchange();
  const int l = emu::lane();
  w.ptr[l] = row;
  emu::sync_warp();
  for (int i = 0; i < 4; ++i) {
    const void* r0 = w.ptr[8 * i + 2 * (l % 4)];
    const void* r1 = w.ptr[8 * i + 2 * (l % 4) + 1];
    r[i] = uint32_t{u16_at(r0, l / 4)} | (uint32_t{u16_at(r1, l / 4)} << 16);
  }
  emu::sync_warp();
}

// FLASHATTN_EMU_NUMERICS=hardware: the emulator rounds like the hardware is documented or measured
// to, where that can lose accuracy, instead of correctly (docs/gpu.md, "Numerics"): mma.sync adds the
// 16 exact products and c exactly, then truncates toward zero to fp32 (the tensor cores align the
// addends and truncate; NVIDIA documents no rounding mode), and ex2.approx is off by up to 2 ulp
// (a deterministic offset in [-2, 2] ulp per input). Read once.
inline bool hardware_numerics() {
  static const bool on = [] {
    const char* v = std::getenv("FLASHATTN_EMU_NUMERICS");
    return v != nullptr && std::strcmp(v, "hardware") == 0;
  }();
  return on;
}

// Returns x rounded toward zero to fp32.
inline float round_toward_zero(double x) {
  const float f = static_cast<float>(x);
  return std::fabs(static_cast<double>(f)) > std::fabs(x) ? std::nextafter(f, 0.0f) : f;
}

// Each lane unpacks only what its four results read: rows g and g + 8 of A (from lanes 4g..4g+3)
// and columns 2t and 2t + 1 of B (from lanes 8t..8t+7), with g = lane / 4, t = lane % 4.
template <class T>
inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu::WarpExchange& w = emu::warp_exchange();
  const int l = emu::lane();
  for (int i = 0; i < 4; ++i) w.word[l][i] = a[i];
  w.word[l][4] = b0;
  w.word[l][5] = b1;
  emu::sync_warp();
  auto lo = [](uint32_t x) { return Elem<T>::unpack(static_cast<uint16_t>(x & 0xffffu)); };
  auto hi = [](uint32_t x) { return Elem<T>::unpack(static_cast<uint16_t>(x >> 16)); };
  const int g = l / 4, t = l % 4;
  float A[2][16], B[2][16];  // A[r][k]: row g + 8r; B[j][k]: column 2t + j
  for (int u = 0; u < 4; ++u) {  // lane 4g + u holds A[g (+8)][2u, 2u+1, 2u+8, 2u+9]
    const uint32_t* f = w.word[4 * g + u];
    A[0][2 * u] = lo(f[0]), A[0][2 * u + 1] = hi(f[0]);
    A[1][2 * u] = lo(f[1]), A[1][2 * u + 1] = hi(f[1]);
    A[0][2 * u + 8] = lo(f[2]), A[0][2 * u + 9] = hi(f[2]);
    A[1][2 * u + 8] = lo(f[3]), A[1][2 * u + 9] = hi(f[3]);
  }
  for (int j = 0; j < 2; ++j)
    for (int u = 0; u < 4; ++u) {  // lane 4n + u holds B[2u, 2u+1, 2u+8, 2u+9][n]
      const uint32_t* f = w.word[4 * (2 * t + j) + u];
      B[j][2 * u] = lo(f[4]), B[j][2 * u + 1] = hi(f[4]);
      B[j][2 * u + 8] = lo(f[5]), B[j][2 * u + 9] = hi(f[5]);
    }
  for (int e = 0; e < 4; ++e) {  // c[e]: row g + 8 (e / 2), column 2t + e % 2
    const float* ar = A[e / 2];
    const float* bc = B[e % 2];
    if (hardware_numerics()) {  // products of 16-bit values are exact in double, the sum nearly so
      double s = c[e];
      for (int k = 0; k < 16; ++k) s += static_cast<double>(ar[k]) * bc[k];
      c[e] = round_toward_zero(s);
      continue;
    }
    float s = c[e];
    for (int k = 0; k < 16; ++k) s += ar[k] * bc[k];
    c[e] = s;
  }
  emu::sync_warp();
}

// ex2.approx.ftz.f32 (mma.cuh): 2^x with subnormal inputs and results flushed to zero (the
// emulator computes the correctly rounded power; the hardware's is within about 2 ulp of it).
inline float exp2_ftz(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
  float y = std::exp2(x);
  if (hardware_numerics() && std::isnormal(y)) {  // ex2.approx: up to 2 ulp off
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    bits = (bits ^ (bits >> 15)) * 0x2c1b3c6du;
    const int ulps = static_cast<int>((bits >> 16) % 5u) - 2;
    for (int i = 0; i < (ulps < 0 ? -ulps : ulps); ++i) y = std::nextafter(y, ulps < 0 ? 0.0f : INFINITY);
  }
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
}

template <class T>
inline void pack_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = Elem<T>::pack(lo[0], lo[1]);
  a[1] = Elem<T>::pack(lo[2], lo[3]);
  a[2] = Elem<T>::pack(hi[0], hi[1]);
  a[3] = Elem<T>::pack(hi[2], hi[3]);
}

}  // namespace flashattn::gpu::detail
