// The primitives of sm90.cuh for the host emulator (emu.hpp): each wrapper hands its operands and
// call site to the model of the asynchronous proxy (async.hpp), which checks and performs it.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "emu/async.hpp"
#include "emu/emu.hpp"
#include "sm90_layout.hpp"
#include "sm90_tensor_map.hpp"

namespace flashattn::gpu::detail::sm90 {

// The spec stored by the emulator's encode_tensor_map (emu/async.cpp).
TensorMapSpec decode_tensor_map(const CUtensorMap* map);

inline uint32_t smem_addr(const void* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<uint32_t>(emu::detail::shared_offset(p, 1, 1, "cvta.to.shared", emu::Site{file, line}));
}

inline void wgmma_fence(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu::wgmma_fence(emu::Site{file, line});
}
inline void wgmma_commit(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu::wgmma_commit(emu::Site{file, line});
}
template <int N>
inline void wgmma_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(N >= 0 && N <= 7, "wgmma_wait: N (the groups left pending) must be in [0, 7]");
  emu::wgmma_wait(N, emu::Site{file, line});
}
// Registers are not reordered here: nothing to fence.
template <int R>
inline void wgmma_fence_operand(float (&)[R]) {}

// The model's description of one wgmma of element type T and N columns (checked at compile time as
// the device wrappers are).
template <class T, int N>
inline emu::Wgmma wgmma_call(bool a_in_registers, bool trans_a, bool trans_b, uint64_t a, uint64_t b, bool accumulate) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "wgmma: f16 or bf16 operands");
  static_assert(wgmma_shape_supported(N), "wgmma: N must be one of " FLASHATTN_SM90_WGMMA_SHAPES);
  emu::Wgmma w;
  w.n = N;
  w.f16 = std::is_same_v<T, __half>;
  w.a_in_registers = a_in_registers;
  w.trans_a = trans_a;
  w.trans_b = trans_b;
  w.desc_a = a;
  w.desc_b = b;
  w.accumulate = accumulate;
  return w;
}

template <class T, int N, bool TransA, bool TransB>
inline void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  emu::wgmma(wgmma_call<T, N>(false, TransA, TransB, a, b, accumulate), d, nullptr, emu::Site{file, line});
}

template <class T, int N, bool TransB>
inline void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, bool accumulate,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu::wgmma(wgmma_call<T, N>(true, false, TransB, 0, b, accumulate), d, a, emu::Site{file, line});
}

inline void mbarrier_init(uint64_t* bar, uint32_t arrivals, const char* file = __builtin_FILE(),
                          int line = __builtin_LINE()) {
  emu::mbarrier_init(bar, arrivals, emu::Site{file, line});
}
// The emulator's inits are visible to everything at once.
inline void mbarrier_init_fence() {}
inline void mbarrier_arrive(uint64_t* bar, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu::mbarrier_arrive(bar, 0, emu::Site{file, line});
}
inline void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes, const char* file = __builtin_FILE(),
                                      int line = __builtin_LINE()) {
  emu::mbarrier_arrive(bar, bytes, emu::Site{file, line});
}
inline void mbarrier_wait(uint64_t* bar, uint32_t parity, const char* file = __builtin_FILE(),
                          int line = __builtin_LINE()) {
  emu::mbarrier_wait(bar, parity, emu::Site{file, line});
}

inline void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int32_t c[2] = {c0, c1};
  emu::tma_load(dst, decode_tensor_map(map), bar, c, emu::Site{file, line});
}
inline void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1, int32_t c2,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int32_t c[3] = {c0, c1, c2};
  emu::tma_load(dst, decode_tensor_map(map), bar, c, emu::Site{file, line});
}
inline void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1, int32_t c2,
                        int32_t c3, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int32_t c[4] = {c0, c1, c2, c3};
  emu::tma_load(dst, decode_tensor_map(map), bar, c, emu::Site{file, line});
}

inline void fence_proxy_async(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu::fence_proxy_async(emu::Site{file, line});
}

template <int R>
inline void setmaxnreg_inc(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg_inc: R must be a multiple of 8 in [24, 256]");
  emu::setmaxnreg(R, true, emu::Site{file, line});
}
template <int R>
inline void setmaxnreg_dec(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg_dec: R must be a multiple of 8 in [24, 256]");
  emu::setmaxnreg(R, false, emu::Site{file, line});
}

namespace detail_emu {
inline uint16_t half_of(uint32_t x, int h) { return static_cast<uint16_t>(h ? x >> 16 : x & 0xFFFFu); }

// stmatrix: lane l writes the 16-byte row it addresses (row l % 8 of matrix l / 8), gathered from
// the lanes holding it: without .trans element (j, k) of matrix i is half k % 2 of register i of
// lane 4j + k / 2 (ldmatrix's layout); with .trans half j % 2 of register i of lane 4k + j / 2.
inline void stmatrix(const void* row, const uint32_t (&r)[4], bool trans, emu::Site site) {
  emu::WarpExchange& w = emu::warp_exchange();
  const int l = emu::lane();
  for (int i = 0; i < 4; ++i) w.word[l][i] = r[i];
  emu::sync_warp();
  const int i = l / 8, j = l % 8;
  uint16_t out[8];
  for (int k = 0; k < 8; ++k)
    out[k] = trans ? half_of(w.word[4 * k + j / 2][i], j % 2) : half_of(w.word[4 * j + k / 2][i], k % 2);
  emu::sync_warp();
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
    emu::detail::fail("emu: stmatrix at " + emu::detail::site_name(site) + ": row address not 16-byte aligned");
  for (int k = 0; k < 8; k += 2) {
    uint32_t pair = uint32_t{out[k]} | uint32_t{out[k + 1]} << 16;
    emu::plain_store(const_cast<unsigned char*>(static_cast<const unsigned char*>(row)) + 2 * k, &pair, 4, site);
  }
}
}  // namespace detail_emu

inline void stmatrix_x4(void* row, const uint32_t (&r)[4], const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  detail_emu::stmatrix(row, r, false, emu::Site{file, line});
}
inline void stmatrix_x4_trans(void* row, const uint32_t (&r)[4], const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  detail_emu::stmatrix(row, r, true, emu::Site{file, line});
}

}  // namespace flashattn::gpu::detail::sm90
