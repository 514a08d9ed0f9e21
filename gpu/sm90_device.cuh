// The sm_90a primitives of sm90.cuh as inline PTX; their contracts are written there. Include
// sm90.cuh, not this file. Only code compiled for sm_90a may call these: ptxas rejects wgmma,
// setmaxnreg and the rest for any other target, so a translation unit built for several
// architectures calls them only under `#if defined(__CUDA_ARCH_FEAT_SM90_ALL)`.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "sm90_layout.hpp"

namespace flashattn::gpu::detail::sm90 {

// cvta.to.shared: the shared state-space address of p.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- Warpgroup MMA --------------------------------------------------------------------------------

// wgmma.fence.sync.aligned
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// wgmma.commit_group.sync.aligned
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// wgmma.wait_group.sync.aligned N
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(N >= 0 && N <= 7, "wgmma_wait: N (the groups left pending) must be in [0, 7]");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// An empty asm that takes and returns every accumulator register: the compiler may not move
// ordinary reads or writes of d across it (the wgmma statements hand d back as if complete). Call
// it on the accumulators after wgmma_wait and before wgmma_fence where other code touches them.
template <int R>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#include "sm90_wgmma.inc"  // WgmmaSS / WgmmaRS: one asm statement per (T, N)

template <class T>
inline constexpr bool wgmma_elem = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T with A and B from descriptors
template <class T, int N, bool TransA, bool TransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(wgmma_elem<T>, "wgmma_ss: T must be __half or __nv_bfloat16");
  static_assert(wgmma_shape_supported(N),
                "wgmma_ss: N must be one of " FLASHATTN_SM90_WGMMA_SHAPES " (add it there, in sm90_layout.hpp)");
  WgmmaSS<T, N>::template mma<TransA ? 1 : 0, TransB ? 1 : 0>(d, a, b, accumulate);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T with A from registers and B from a descriptor
template <class T, int N, bool TransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  static_assert(wgmma_elem<T>, "wgmma_rs: T must be __half or __nv_bfloat16");
  static_assert(wgmma_shape_supported(N),
                "wgmma_rs: N must be one of " FLASHATTN_SM90_WGMMA_SHAPES " (add it there, in sm90_layout.hpp)");
  WgmmaRS<T, N>::template mma<TransB ? 1 : 0>(d, a, b, accumulate);
}

// ---- mbarriers --------------------------------------------------------------------------------------

// mbarrier.init.shared::cta.b64
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// fence.mbarrier_init.release.cluster
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// mbarrier.arrive.shared::cta.b64 (the returned state is not needed: waits go by parity)
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// mbarrier.arrive.expect_tx.shared::cta.b64
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// mbarrier.try_wait.parity.shared::cta.b64, repeated until it reports the phase complete (each try
// may suspend the thread for a system-dependent time before it returns false).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (done == 0);
}

// ---- TMA ----------------------------------------------------------------------------------------------
// The map operand is its generic address (a __grid_constant__ parameter's or global memory's).

// cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0,
                                            int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

// cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// fence.proxy.async.shared::cta
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- Register reallocation --------------------------------------------------------------------------

// setmaxnreg.inc.sync.aligned.u32 R
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg_inc: R must be a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

// setmaxnreg.dec.sync.aligned.u32 R
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg_dec: R must be a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

// ---- stmatrix -----------------------------------------------------------------------------------------

// stmatrix.sync.aligned.m8n8.x4.shared.b16
__device__ __forceinline__ void stmatrix_x4(void* row, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row)), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// stmatrix.sync.aligned.m8n8.x4.trans.shared.b16
__device__ __forceinline__ void stmatrix_x4_trans(void* row, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row)),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

}  // namespace flashattn::gpu::detail::sm90
