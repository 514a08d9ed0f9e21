// A host emulator for the GPU kernels: compiles the unchanged kernel sources with a host C++
// compiler (FLASHATTN_GPU_EMULATE) and runs each CUDA block as cooperative fibers on one OS thread.
//
// What it checks: the index math of the kernels — which lane loads which row, how fragments pair
// up, tile ranges, masking, softmax, epilogues — against the PTX ISA's definitions of ldmatrix and
// mma.sync m16n8k16 (implemented once, in mma_emu.hpp) and against the fp64 oracle; and, through
// check.hpp, the hardware-class bugs: cp.async data used before its wait_group (the destination
// holds NaN until then), shared-memory races between barriers, out-of-bounds and misaligned
// wrapper and ld/st accesses, uninitialised shared reads. Warps advance independently between barriers in a
// schedule drawn per block (set_schedule_seed): round robin, one warp after another in a random
// order (each runs ahead to its next barrier), or a random thread at every switch; the blocks of
// a launch run in a random order, so float atomics sum in a different order per schedule.
// What it cannot check: the hardware's exact rounding inside the tensor cores (emulated with fp32
// sums, or truncated with FLASHATTN_EMU_NUMERICS=hardware), accesses outside every registered
// buffer, and memory-model effects beyond barrier epochs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#include "emu/check.hpp"

// CUDA's execution-space keywords become plain host C++.
#undef __global__
#undef __device__
#undef __host__
#undef __launch_bounds__
#undef __shared__
#undef __forceinline__
#undef __grid_constant__
#define __grid_constant__
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __shared__
#define __forceinline__ inline

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

// Block-wide barrier (__syncthreads at `site`).
void sync_block(Site site);
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

// Barrier of the running fiber's warpgroup (4 warps, 128 threads: the wgmma and setmaxnreg
// collectives), and its exchange area.
void sync_warpgroup();
struct WarpgroupExchange {
  void* ptr[128];
  const void* cptr[128];
  uint64_t word[128][3];
};
WarpgroupExchange& warpgroup_exchange();

// Blocks the running fiber until *counter != seen (an mbarrier's phase); `object` names what it
// waits on in a deadlock report (async.hpp: describe_async_wait).
void wait_until_changed(const unsigned* counter, unsigned seen, const void* object);

// Runs body as `threads` fibers sharing the current block index; returns when all have finished.
void run_block(int threads, const std::function<void()>& body);

// Runs kernel(args...) for every block of grid (x, y, z) with `threads` threads per block. Shared
// memory is filled with 0xFF (NaN) before each block; bytes at or past `smem` (the dynamic size the
// real launch requests, at most kMaxSmem) must still hold it afterwards, and the checks of
// check.hpp hold, else std::logic_error.
constexpr int kMaxSmem = 256 * 1024;
unsigned char* shared_memory();
// Returns the kernel's name (from the symbol table; the address when it has none).
std::string kernel_name(const void* kernel);
void launch_blocks(Dim3 grid, int threads, int smem, const std::string& kernel, const std::function<void()>& body);
template <class Kernel, class... Args>
void launch(Kernel kernel, Dim3 grid, int threads, int smem, const Args&... args) {
  launch_blocks(grid, threads, smem, kernel_name(reinterpret_cast<const void*>(kernel)), [&] { kernel(args...); });
}

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx)
#define __syncthreads() ::emu::sync_block(::emu::Site{__FILE__, __LINE__})

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

// Returns whether pred is nonzero in any lane of the warp (every lane votes: full mask).
inline bool __any_sync(unsigned /*mask*/, int pred) {
  emu::WarpExchange& w = emu::warp_exchange();
  w.word[emu::lane()][0] = pred != 0;
  emu::sync_warp();
  bool any = false;
  for (int l = 0; l < 32; ++l) any = any || w.word[l][0] != 0;
  emu::sync_warp();
  return any;
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

