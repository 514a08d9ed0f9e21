// Per-thread scratch that outlives a call (see plan.h: thread_scratch).
#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "plan.h"

namespace flashattn::cpu::detail {
namespace {

constexpr size_t kAlign = 64;                 // one cache line, the widest vector
constexpr size_t kHugePageHint = size_t{2} << 20;  // ask for huge pages from 2 MiB: first touch of
                                                   // 4 KiB pages costs ~10 µs here (CPU-NOTES.md)

// One thread's buffer; freed when the thread exits.
struct Arena {
  float* data = nullptr;
  size_t floats = 0;
  ~Arena() { std::free(data); }
};

thread_local Arena t_arena;

}  // namespace

float* thread_scratch(size_t floats) {
  if (floats > t_arena.floats) {
    std::free(t_arena.data);
    t_arena.data = nullptr;
    t_arena.floats = 0;
    const size_t bytes = (floats * sizeof(float) + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, bytes);
    if (!p) throw std::bad_alloc();
    if (bytes >= kHugePageHint) madvise(p, bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
    t_arena.data = static_cast<float*>(p);
    t_arena.floats = floats;
  }
  return t_arena.data;
}

}  // namespace flashattn::cpu::detail
