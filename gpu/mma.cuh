// Warp-level tensor-core primitives for sm_80+: cp.async, ldmatrix and mma.sync m16n8k16.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4, t = lane % 4:
//   A 16x16 (row major), 4 registers of 2 elements:  a0 (g, 2t..2t+1)   a1 (g+8, 2t..)
//                                                     a2 (g, 2t+8..)    a3 (g+8, 2t+8..)
//   B 16x8  ("col"), 2 registers:                    b0 (k 2t..2t+1, n g)   b1 (k 2t+8.., n g)
//   C 16x8  fp32, 4 registers:                        c0,c1 (g, 2t..2t+1)    c2,c3 (g+8, 2t..)
// The C fragments of two adjacent 8-column blocks, rounded to 16 bits, are exactly the A fragment
// of one 16-column step (pack_a below): this is how P = softmax(S) feeds O += P·V from registers.
#pragma once

#ifdef FLASHATTN_GPU_EMULATE
#include "emu/mma_emu.hpp"  // the same functions for the host emulator
#else

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace flashattn::gpu::detail {

// Element traits: the storage type, its mma spelling and a round-to-nearest-even pack of 2 floats.
template <class T>
struct Elem;
template <>
struct Elem<__half> {
  // Returns {lo, hi} rounded to nearest even and packed as one 32-bit register (lo in the low half).
  __device__ static uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static float to_float(__half x) { return __half2float(x); }
  __device__ static __half from_float(float x) { return __float2half_rn(x); }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

// Returns the shared-memory address of p for PTX operands.
__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes from global src to shared dst asynchronously; when `valid` is false nothing is
// read and dst is filled with zeros (src-size 0), so out-of-range rows become zero rows.
__device__ inline void cp_async_16(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
// Copies 4 bytes (one fp32) from global src to shared dst asynchronously, both 4-byte aligned;
// zero-fill and nothing read when `valid` is false.
__device__ inline void cp_async_4(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N committed groups of this thread are still in flight.
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// A plain load (ld) or store (st) of one value in global or shared memory. Every access a kernel
// makes outside the wrappers of this file goes through these two (never `*p` or `p[i]` on a
// device array), so the host emulator checks each against the call's buffers, the block's shared
// memory, alignment, races and uninitialised bytes (emu/check.hpp); here they are the access itself.
template <class T>
__device__ __forceinline__ T ld(const T* p) {
  return *p;
}
template <class T>
struct Stored {  // st's value converts to the pointer's element type (not deduced from it)
  using type = T;
};
template <class T>
__device__ __forceinline__ void st(T* p, const typename Stored<T>::type& v) {
  *p = v;
}

// Adds a to p[0] and b to p[1] (fp32, global memory, p 8-byte aligned), each element atomically
// (not the pair as a whole). On sm_90 one vector reduction (red.global.add.v2.f32): the four lanes
// of a quad then fill one 32-byte sector per request, where two scalar atomics each used half of
// it; the H200 run found the atomic-dQ backward bound by L2 throughput on exactly those requests
// (docs/gpu.md). Two scalar atomics before sm_90.
__device__ __forceinline__ void atomic_add_pair(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// Loads four 8x8 16-bit matrices; lane l supplies the row address of matrix l / 8, row l % 8.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}
// As ldmatrix_x4, each matrix transposed on the way (lane gets stored rows 2t, 2t+1 of column g).
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

// c += a·b on one m16n8k16 tile with fp32 accumulation.
template <class T>
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ inline void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ inline void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Returns 2^x by the special-function unit (ex2.approx.ftz.f32: about 2 ulp, subnormal inputs and
// results flushed to 0; exp2f adds a range check and a rescale around the same instruction to keep
// subnormal results). The forward's softmax uses it: P ≤ 1 and a P below 2^-126 is 0 next to the
// row maximum's 1 (docs/gpu.md, "Numerics").
__device__ inline float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Returns the A fragment of one 16-column step built from the fp32 C fragments of its two 8-column
// halves (lo: columns 0-7, hi: columns 8-15), rounded to T.
template <class T>
__device__ inline void pack_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = Elem<T>::pack(lo[0], lo[1]);
  a[1] = Elem<T>::pack(lo[2], lo[3]);
  a[2] = Elem<T>::pack(hi[0], hi[1]);
  a[3] = Elem<T>::pack(hi[2], hi[3]);
}

}  // namespace flashattn::gpu::detail

#endif  // FLASHATTN_GPU_EMULATE

namespace flashattn::gpu::detail {

// The element reader the kernels give the shared flashattn/ helpers (flashattn::ElementRead's
// role): a plain load (ld), so that the emulator checks the helpers' reads of device arrays like the
// kernels' own. Host and device as the helpers are; its host side only runs in the emulator.
struct DeviceRead {
  template <class T>
  __host__ __device__ T operator()(const T* p) const {
#if defined(__CUDA_ARCH__) || defined(FLASHATTN_GPU_EMULATE)
    return ld(p);
#else
    return *p;
#endif
  }
};

}  // namespace flashattn::gpu::detail
