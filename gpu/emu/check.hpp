// The emulator's hardware-class checks (check.cpp), called by the emulated intrinsics (mma_emu.hpp,
// emu.hpp) and by the fiber scheduler (emu.cpp):
//   cp.async   per-thread queues of committed groups; the destination holds a poison pattern (0xFF
//              bytes: NaN in f16, bf16 and f32) from issue until a wait_group retires the group;
//              reading or writing it meanwhile, or ending the block with copies never waited for,
//              is an error.
//   races      shadow state per shared-memory byte per barrier epoch (the span between two
//              __syncthreads): a write by one thread and a read or write by another in the same
//              epoch is an error naming the kernel, the byte offset and both program points.
//              Accesses through the wrappers and ld/st are seen when they happen; a store that
//              bypasses st (the kernels make none) is still found by comparing shared memory with
//              its last known contents at each barrier and each checked access (its thread is
//              then unknown).
//   memcheck   shared accesses through the wrappers inside the launch's dynamic shared size,
//              16-byte aligned where the ISA requires it (cp.async destination, ldmatrix rows),
//              plain loads and stores (ld, st) at their natural alignment; global accesses (cp.async
//              sources, atomics, ld/st — which include the flashattn/ helpers' reads of device
//              arrays, given DeviceRead) outside registered buffers' payloads (register_guarded:
//              the harness's canary zones and the emulator's scratch) are errors.
//   initcheck  a wrapper or ld read of a shared byte that nothing wrote in this block is an error.
// Every error ends the block: the scheduler throws std::logic_error with the message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace emu {

// A program point: a wrapper's call site (file, line), passed as default arguments
// (__builtin_FILE / __builtin_LINE) by the emulated wrappers.
struct Site {
  const char* file = "?";
  int line = 0;
};

// Shared-memory accesses through the wrappers (tid: the block's thread).
void smem_read(const void* p, int bytes, int align, const char* what, Site site);
// cp.async of `bytes` (16 or 4, aligned to its size; zero-fill when !valid), commit_group, wait_group n.
void cp_async(void* dst, const void* src, bool valid, Site site, int bytes = 16);
void cp_async_commit(Site site);
void cp_async_wait(int n, Site site);
// A global access of `bytes` at p by a wrapper (cp.async source, atomics): checked against the
// registered guarded allocations.
void global_access(const void* p, size_t bytes, const char* what, Site site);
// atomic_add_pair (mma.cuh): a to p[0] and b to p[1], p 8-byte aligned (sm_90's vector reduction)
// and inside a registered payload, then each element added on its own (single OS thread: a plain
// add is atomic; the blocks' order, drawn per schedule, orders the adds).
void atomic_add_pair(float* p, float a, float b, Site site);
// A kernel's plain load (ld) of `bytes` from src into dst, or plain store (st) of `bytes` from src
// to dst, performed here after the checks: a shared address is checked like a wrapper access
// (bounds, races, initcheck; the store is recorded with its thread and site), any other address as
// a global access of registered allocations; both must be aligned to `bytes`.
void plain_load(void* dst, const void* src, int bytes, Site site);
void plain_store(void* dst, const void* src, int bytes, Site site);
// The context of later reports: the kernel-level call site of the last barrier, commit or wait of
// the running thread.
void note_context(Site site);

// Selects the schedules of the following launches (emu.cpp): each block of each launch runs under a
// schedule drawn from (seed, launch number, block index), and each launch runs its blocks in an
// order drawn from them. Resets the launch number (a call repeated under one seed repeats exactly).
void set_schedule_seed(uint64_t seed);

// Registers [begin, end) as an allocation whose payload is [payload, payload + bytes): a wrapper
// access inside the allocation but outside the payload is out of bounds. Cleared by
// clear_guarded(). Accesses outside every registered allocation are not checked.
void register_guarded(const void* begin, const void* end, const void* payload, size_t bytes, const char* name);
void unregister_guarded(const void* payload);
void clear_guarded();

namespace detail {
// Scheduler hooks (emu.cpp).
void block_begin(int threads, int smem, const char* kernel);
void barrier_done();  // called once per completed __syncthreads, before the epoch advances
void block_end();     // after every thread finished: copies never waited for are an error
// Ends the running block with an error (does not return).
[[noreturn]] void fail(const std::string& message);
int current_thread();
}  // namespace detail

}  // namespace emu
