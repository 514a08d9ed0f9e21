// The emulator's model of the sm_90a asynchronous proxy (sm90_emu.hpp's wrappers call it): mbarriers,
// TMA loads and warpgroup MMA, with the strictness check.hpp has for cp.async.
//
//   mbarriers  per barrier: expected arrivals, pending arrivals, transaction count and completed
//              phases. A phase completes when its arrivals are in and its transaction count is 0;
//              mbarrier_wait(parity) blocks until the phase of that parity has completed, so a wrong
//              parity, a missing arrive or a short expect-tx deadlocks (reported with the barrier's
//              state) or lets a thread on before its data landed (reported below). More arrivals
//              than expected, a wait on an uninitialised barrier and ordinary loads or stores of a
//              barrier's bytes are errors.
//   TMA        a load reads its box from global memory at issue (global accesses checked like
//              cp.async sources) and lands later — when every thread waits, or at a random switch —
//              writing the swizzled box and completing its bytes on the barrier. Until it lands its
//              destination holds the poison pattern, and any read, write, other load or wgmma of
//              those bytes is an error. A thread reading landed bytes must have waited for the
//              barrier phase they completed (or passed a __syncthreads after a thread that did;
//              chains of mbarrier arrive and wait between threads are not followed, so a thread
//              should wait for the data's barrier itself).
//   wgmma      each call gathers the warpgroup's operands (descriptors decoded, checked for base
//              offset 0, pattern alignment and bounds; the shared bytes read must be landed, written
//              and not written by ordinary stores since the writer's last fence.proxy.async),
//              computes D at issue and poisons the accumulators (a signalling NaN) until a
//              wait_group retires its group; accumulators written or A registers changed while in
//              flight, a write to shared bytes an in-flight wgmma reads and a block ending with
//              groups never waited for are errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "emu/check.hpp"

namespace flashattn::gpu::detail::sm90 {
struct TensorMapSpec;
}

namespace emu {

void mbarrier_init(uint64_t* bar, uint32_t count, Site site);
// Arrives once after adding expect_tx bytes to the phase's transaction count.
void mbarrier_arrive(uint64_t* bar, uint32_t expect_tx, Site site);
void mbarrier_wait(uint64_t* bar, uint32_t parity, Site site);

// One TMA load of the box at coords (rank of spec) into dst, completing on bar.
void tma_load(void* dst, const flashattn::gpu::detail::sm90::TensorMapSpec& spec, uint64_t* bar,
              const int32_t* coords, Site site);

// This thread's ordinary shared stores so far become visible to the async proxy.
void fence_proxy_async(Site site);

// One wgmma.mma_async of the running thread's warpgroup (every thread calls it; checked uniform).
struct Wgmma {
  int n = 0;              // N: columns of D
  bool f16 = false;       // element type: f16, else bf16
  bool a_in_registers = false;
  bool trans_a = false, trans_b = false;
  uint64_t desc_a = 0, desc_b = 0;
  bool accumulate = false;
};
void wgmma(const Wgmma& w, float* d, const uint32_t* a, Site site);
void wgmma_fence(Site site);
void wgmma_commit(Site site);
void wgmma_wait(int n, Site site);
// setmaxnreg: every thread of the warpgroup, the same count, a multiple of 8 in [24, 256].
void setmaxnreg(int registers, bool increase, Site site);

namespace detail {
// Lands one pending TMA load (a random one); returns false when none is pending.
bool async_progress();
// Describes what a thread blocked in wait_until_changed on `object` (an mbarrier) waits for.
std::string describe_async_wait(const void* object);
// Hooks of check.cpp: ordinary (generic-proxy) shared accesses by thread tid (negative: unknown).
void async_generic_write(size_t off, size_t n, int tid, uint16_t site);
void async_generic_read(size_t off, size_t n, int tid, const char* what, Site site);
void async_block_begin(int threads, int smem);
void async_block_barrier();  // a __syncthreads completed: every thread has seen what any thread saw
void async_block_end();

// Services of check.cpp for the model.
std::string site_name(Site s);
std::string site_name(uint16_t id);
uint16_t site_id(Site s);
const char* kernel_running();
size_t smem_size();
// Offset of p in shared memory, checked like a wrapper access (bounds, alignment).
size_t shared_offset(const void* p, size_t bytes, int align, const char* what, Site site);
// Writes bytes as the async proxy (no race-epoch record); landed: they count as initialised.
void shared_write_async(size_t off, const unsigned char* data, size_t n, bool landed);
// Returns the first byte of [off, off + n) nothing wrote in this block, or SIZE_MAX.
size_t first_unwritten(size_t off, size_t n);
}  // namespace detail

}  // namespace emu
