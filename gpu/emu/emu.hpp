// A host emulator for the GPU kernels: compiles the unchanged kernel sources with a host C++
// compiler (FLASHATTN_GPU_EMULATE) and runs each CUDA block as cooperative fibers on one OS thread.
//
// What it checks: the index math of the kernels — which lane loads which row, how fragments pair
// up, tile ranges, masking, softmax, epilogues — against the PTX ISA's definitions of ldmatrix and
// mma.sync m16n8k16 (implemented once, in mma_emu.hpp) and against the fp64 oracle.
// What it cannot check: timing-dependent behaviour (cp.async is synchronous here, so a missing
// wait or barrier goes unnoticed: that is compute-sanitizer racecheck's job on a real GPU), and the
// hardware's exact rounding inside the tensor cores (emulated with fp32 sums).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

// CUDA's execution-space keywords become plain host C++.
#undef __global__
#undef __device__
#undef __host__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __shared__

namespace flashattn::gpu::detail {
// The dynamic shared memory of the running block (kernels declare it `extern __shared__`).
extern unsigned char smem_raw[];
}  // namespace flashattn::gpu::detail

namespace emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

// Index of the running block (set by launch()).
extern Dim3 block_idx;

// Returns the thread index of the running fiber.
const Dim3& thread_idx();

// Block-wide barrier (__syncthreads).
void sync_block();
// Barrier of the running fiber's warp (the exchange points of warp-collective operations).
void sync_warp();

// Per-warp exchange area of warp-collective operations.
struct WarpExchange {
  const void* ptr[32];
  uint32_t word[32][6];
  float value[32];
};
WarpExchange& warp_exchange();
int lane();

// Runs body as `threads` fibers sharing the current block index; returns when all have finished.
void run_block(int threads, const std::function<void()>& body);

// Runs kernel(args...) for every block of grid (x, y, z) with `threads` threads per block. Shared
// memory is filled with 0xFF (NaN) before each block; bytes at or past `smem` (the dynamic size the
// real launch requests, at most kMaxSmem) must still hold it afterwards, else std::logic_error.
constexpr int kMaxSmem = 256 * 1024;
unsigned char* shared_memory();
template <class Kernel, class... Args>
void launch(Kernel kernel, Dim3 grid, int threads, int smem, const Args&... args) {
  if (smem > kMaxSmem) throw std::logic_error("emu: shared memory request above kMaxSmem");
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        block_idx = Dim3{x, y, z};
        std::memset(shared_memory(), 0xFF, kMaxSmem);
        run_block(threads, [&] { kernel(args...); });
        for (int i = smem; i < kMaxSmem; ++i)
          if (shared_memory()[i] != 0xFF)
            throw std::logic_error("emu: a kernel wrote shared memory byte " + std::to_string(i) +
                                   " past its dynamic size " + std::to_string(smem));
      }
}

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx)
#define __syncthreads() ::emu::sync_block()

// Returns the value of x in lane (this lane ^ lane_mask) of the warp.
inline float __shfl_xor_sync(unsigned /*mask*/, float x, int lane_mask) {
  emu::WarpExchange& w = emu::warp_exchange();
  const int l = emu::lane();
  w.value[l] = x;
  emu::sync_warp();
  const float r = w.value[l ^ lane_mask];
  emu::sync_warp();
  return r;
}

// Returns the value of x in lane src_lane of the warp.
inline uint32_t __shfl_sync(unsigned /*mask*/, uint32_t x, int src_lane) {
  emu::WarpExchange& w = emu::warp_exchange();
  const int l = emu::lane();
  w.word[l][0] = x;
  emu::sync_warp();
  const uint32_t r = w.word[src_lane % 32][0];
  emu::sync_warp();
  return r;
}

// Single OS thread: a plain add is atomic.
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
