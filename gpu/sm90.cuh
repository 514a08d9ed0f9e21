// Hopper (sm_90a) primitives: warpgroup MMA (wgmma) with operands in shared memory or A in
// registers, mbarriers, TMA tiled loads, the async-proxy fence, register reallocation and stmatrix.
// Thin wrappers over the PTX (sm90_device.cuh) with one emulated twin each (emu/sm90_emu.hpp, chosen
// by FLASHATTN_GPU_EMULATE), as mma.cuh is for the sm_80 primitives. Layouts and descriptors:
// sm90_layout.hpp; tensor maps: sm90_tensor_map.hpp. Section names are the PTX ISA's.
//
// Only code compiled for sm_90a may call them (ptxas rejects these instructions for any other
// target): a translation unit built for several architectures calls them under
// `#if defined(__CUDA_ARCH_FEAT_SM90_ALL)`.
//
// The functions, all in flashattn::gpu::detail::sm90:
//
//   uint32_t smem_addr(const void* p)
//       The shared state-space address of p (cvta.to.shared), as descriptors, mbarriers and TMA
//       take it.
//
//   Warpgroup MMA ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"). Every
//   call is made by all 128 threads of a warpgroup (4 consecutive warps, the first a multiple of 4)
//   with the same descriptors:
//   void wgmma_fence()                  wgmma.fence.sync.aligned: orders earlier register and shared
//                                       accesses before the next wgmma.mma_async
//   void wgmma_commit()                 wgmma.commit_group.sync.aligned: closes the group of the
//                                       uncommitted wgmma.mma_async of this warpgroup
//   template <int N> void wgmma_wait()  wgmma.wait_group.sync.aligned N (0..7): waits until at most
//                                       N committed groups are pending; the accumulators of retired
//                                       groups may be read, their shared operands rewritten
//   template <int R> void wgmma_fence_operand(float (&d)[R])
//       no instruction: keeps the compiler from moving ordinary reads and writes of d across it
//       (the wgmma statements hand d back as if complete); between wgmma_wait and code that
//       touches the accumulators, and between that code and the next wgmma_fence
//   template <class T, int N, bool TransA, bool TransB>
//   void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate)
//       wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T: D (64 x N, fp32) = A·B (+ D if accumulate),
//       A 64 x 16 and B (stored N x 16) from descriptors a and b; TransA / TransB: MN-major operand
//       (imm-trans 1). T is __half or __nv_bfloat16; N one of FLASHATTN_SM90_WGMMA_SHAPES
//       (sm90_layout.hpp).
//   template <class T, int N, bool TransB>
//   void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, bool accumulate)
//       The same with A from registers: the warp w of the warpgroup holds rows 16w..16w+15 in the
//       mma.m16n8k16 A-fragment layout (mma.cuh).
//   The accumulator layout ("Register Fragments", m64nNk16 D): thread (warp w, lane l), g = l / 4,
//   t = l % 4, register i < N/2 holds D[16w + g + 8·((i / 2) % 2)][8·(i / 4) + 2t + i % 2] — the
//   mma.m16n8k16 C fragment repeated over the N/8 column blocks.
//
//   mbarriers ("Parallel Synchronization and Communication Instructions: mbarrier"), an 8-byte
//   aligned uint64_t in shared memory:
//   void mbarrier_init(uint64_t* bar, uint32_t arrivals)   mbarrier.init.shared::cta.b64
//   void mbarrier_init_fence()          fence.mbarrier_init.release.cluster: the inits become visible
//                                       to the async proxy (TMA); then a __syncthreads
//   void mbarrier_arrive(uint64_t* bar)                    mbarrier.arrive.shared::cta.b64
//   void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes)
//       mbarrier.arrive.expect_tx.shared::cta.b64: arrives and adds `bytes` to the phase's
//       expected transaction count (the TMA loads completing on it)
//   void mbarrier_wait(uint64_t* bar, uint32_t parity)
//       loops on mbarrier.try_wait.parity.shared::cta.b64 until the phase of parity `parity` has
//       completed (a phase completes when all its arrivals came and its transaction count is 0;
//       a fresh barrier is in phase 0, so waiting for parity 1 returns at once)
//
//   TMA ("Data Movement and Conversion Instructions: cp.async.bulk.tensor"):
//   void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1)
//   void tma_load_3d(..., int32_t c0, int32_t c1, int32_t c2)
//   void tma_load_4d(..., int32_t c0, int32_t c1, int32_t c2, int32_t c3)
//       cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes: copies
//       the box at element coordinates (c0 innermost, ...) of the map's tensor into dst (128-byte
//       aligned; the box dense, innermost first, swizzled by the map's mode; elements outside the
//       tensor read as 0) and completes the box's bytes on bar's transaction count. One thread
//       issues it. `map` is a __grid_constant__ kernel parameter or global memory.
//   void fence_proxy_async()            fence.proxy.async.shared::cta: shared-memory writes of this
//                                       thread by ordinary stores become visible to the async proxy
//                                       (wgmma operands, TMA stores) — needed between such writes
//                                       and a wgmma reading them
//
//   template <int R> void setmaxnreg_inc() / setmaxnreg_dec()
//       setmaxnreg.{inc,dec}.sync.aligned.u32 R: the warpgroup's registers per thread become R (a
//       multiple of 8 in [24, 256]); every thread of the warpgroup calls it. ptxas honours it only
//       when the kernel's register count is fixed at entry (__launch_bounds__ with a minimum
//       number of blocks, or maxrregcount)
//   void stmatrix_x4(void* row, const uint32_t (&r)[4]) / stmatrix_x4_trans(...)
//       stmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: the inverse of ldmatrix_x4{_trans}
//       (mma.cuh): lane l supplies the 16-byte row address of row l % 8 of matrix l / 8
#pragma once

#include "sm90_layout.hpp"

#ifdef FLASHATTN_GPU_EMULATE
#include "emu/sm90_emu.hpp"  // the same functions for the host emulator
#else
#include "sm90_device.cuh"
#endif
