// Per-thread scratch that outlives a call (see plan.h: thread_scratch), and its sizes from the
// layouts of scratch.h.
#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "scratch.h"

namespace flashattn::cpu::detail {
namespace {

constexpr size_t kHugePageHint = size_t{2} << 20;  // ask for huge pages from 2 MiB: first touch of
                                                   // 4 KiB pages cost ~10 µs on the Zen 5 host
                                                   // (docs/cpu-design.md, "Scratch")

// One thread's buffer; freed when the thread exits.
struct Arena {
  float* data = nullptr;
  size_t floats = 0;
  ~Arena() { std::free(data); }
};

thread_local Arena t_arena;  // per-thread tiles (thread_scratch)
thread_local Arena t_call;   // per-call shared buffers of calls made from this thread

// Returns arena's buffer grown to at least `floats` floats (contents not kept).
float* grow(Arena& arena, size_t floats) {
  if (floats > arena.floats) {
    std::free(arena.data);
    arena.data = nullptr;
    arena.floats = 0;
    const size_t bytes = (floats * sizeof(float) + kVectorAlign - 1) / kVectorAlign * kVectorAlign;
    void* p = std::aligned_alloc(kVectorAlign, bytes);
    if (!p) throw std::bad_alloc();
    if (bytes >= kHugePageHint) madvise(p, bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
    arena.data = static_cast<float*>(p);
    arena.floats = floats;
  }
  return arena.data;
}

}  // namespace

float* thread_scratch(size_t floats) { return grow(t_arena, floats); }

float* call_scratch(size_t floats) { return grow(t_call, floats); }

size_t forward_scratch_floats(const Plan& p) { return (layout_bytes<ForwardScratch>(p) + sizeof(float) - 1) / sizeof(float); }

size_t backward_scratch_floats(const Plan& p) {
  return (layout_bytes<BackwardScratch>(p) + sizeof(float) - 1) / sizeof(float);
}

}  // namespace flashattn::cpu::detail
