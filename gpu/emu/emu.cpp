// Fiber scheduler of the host emulator (see emu.hpp): each CUDA thread of a block is a fiber
// (started with makecontext/setcontext, switched with _setjmp/_longjmp, which skip the signal-mask
// system calls of swapcontext); barriers yield to the scheduler until every participant arrived.
#include "emu.hpp"

#include <setjmp.h>
#include <ucontext.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace emu {

Dim3 block_idx;

namespace {

constexpr size_t kStackBytes = 256 * 1024;

struct Fiber {
  ucontext_t context;  // used once, to start the fiber on its own stack
  jmp_buf resume;      // where the fiber continues after a yield
  Dim3 idx;
  bool started = false, done = false;
};

struct Barrier {
  int count = 0, arrived = 0;
  unsigned generation = 0;
};

struct Block {
  std::vector<Fiber> fibers;
  jmp_buf scheduler;
  int current = -1;
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<WarpExchange> exchanges;
  const std::function<void()>* body = nullptr;
};

Block* running = nullptr;

// Returns the stack of fiber i, allocated once and reused by every block (no page faults per block).
unsigned char* stack_of(int i) {
  static std::vector<std::unique_ptr<unsigned char[]>> stacks;
  while (static_cast<int>(stacks.size()) <= i) stacks.push_back(std::make_unique<unsigned char[]>(kStackBytes));
  return stacks[i].get();
}

void yield() {
  if (_setjmp(running->fibers[running->current].resume) == 0) _longjmp(running->scheduler, 1);
}

void wait(Barrier& b) {
  const unsigned g = b.generation;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  while (b.generation == g) yield();
}

[[noreturn]] void fiber_main() {
  (*running->body)();
  running->fibers[running->current].done = true;
  _longjmp(running->scheduler, 1);
}

// Prepares fiber i to start fiber_main on its own stack (separate frame: getcontext returns twice
// in principle, and the caller's loop variables must not live across it).
__attribute__((noinline)) void init_fiber(Fiber& f, int i) {
  f.idx = Dim3{static_cast<unsigned>(i), 0, 0};
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = stack_of(i);
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;  // fibers never return: they jump back to the scheduler
  makecontext(&f.context, fiber_main, 0);
}

// Runs fiber i of b until it yields or finishes. Nothing after the _setjmp reads a local, so the
// jump back into this frame needs no volatile.
__attribute__((noinline)) void resume(Block& b, int i) {
  b.current = i;
  if (_setjmp(b.scheduler) == 0) {
    Fiber& f = b.fibers[b.current];
    if (!f.started) {
      f.started = true;
      setcontext(&f.context);
    }
    _longjmp(f.resume, 1);
  }
}

}  // namespace

const Dim3& thread_idx() { return running->fibers[running->current].idx; }
void sync_block() { wait(running->block_barrier); }
void sync_warp() { wait(running->warp_barriers[running->current / 32]); }
WarpExchange& warp_exchange() { return running->exchanges[running->current / 32]; }
int lane() { return running->current % 32; }
unsigned char* shared_memory() { return flashattn::gpu::detail::smem_raw; }

void run_block(int threads, const std::function<void()>& body) {
  if (threads % 32 != 0) throw std::logic_error("emu: threads must be whole warps");
  Block b;
  b.body = &body;
  b.fibers.resize(threads);
  b.block_barrier.count = threads;
  b.warp_barriers.resize(threads / 32);
  for (Barrier& w : b.warp_barriers) w.count = 32;
  b.exchanges.resize(threads / 32);
  running = &b;
  for (int i = 0; i < threads; ++i) init_fiber(b.fibers[i], i);
  for (bool alive = true; alive;) {
    alive = false;
    for (int i = 0; i < threads; ++i) {
      if (b.fibers[i].done) continue;
      resume(b, i);
      alive = alive || !b.fibers[i].done;
    }
  }
  running = nullptr;
}

}  // namespace emu

namespace flashattn::gpu::detail {
alignas(16) unsigned char smem_raw[emu::kMaxSmem];
}  // namespace flashattn::gpu::detail
