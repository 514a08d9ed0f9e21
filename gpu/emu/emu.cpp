// Fiber scheduler of the host emulator (see emu.hpp): each CUDA thread of a block is a fiber
// (started with makecontext/setcontext, switched with _setjmp/_longjmp, which skip the signal-mask
// system calls of swapcontext); barriers yield to the scheduler until every participant arrived.
// Which runnable fiber runs next is the block's schedule (Policy); a check that fails inside a
// fiber jumps back to the scheduler, which abandons the block and throws.
#include "emu.hpp"
#include "emu/async.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>


namespace emu {

Dim3 block_idx;

namespace {

constexpr size_t kStackBytes = 256 * 1024;

struct Barrier {
  int count = 0, arrived = 0;
  unsigned generation = 0;
  bool block = false;  // __syncthreads (advances the checks' epoch)
};

struct Fiber {
  ucontext_t context;  // used once, to start the fiber on its own stack
  jmp_buf resume;      // where the fiber continues after a yield
  Dim3 idx;
  bool started = false, done = false;
};

// What the scheduler reads of each fiber, kept apart from the (large) Fiber so that scanning for a
// runnable fiber touches few cache lines.
struct Wait {
  const unsigned* counter = nullptr;  // what it waits on (a barrier's generation, an mbarrier's phase):
  unsigned generation = 0;            // runnable once *counter differs from this
  const void* object = nullptr;       // an mbarrier (for the deadlock report), or null
  bool done = false;
};

// Which runnable fiber runs next.
enum class Policy {
  round_robin,    // the next runnable fiber after the last one (the emulator's original order)
  warp_priority,  // the warps in a random order: the running warp keeps running until all its
                  // lanes block (it runs ahead to its next block barrier), then the next warp
  random,         // a random runnable fiber at every switch
};
constexpr int kPolicies = 3;

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Wait> waits;
  std::vector<int> identity;        // 0, 1, ..., threads - 1
  std::vector<int> order;           // warp_priority: fibers by priority (warps in a random order)
  std::vector<int> warp_position;   // warp_priority: each warp's place in that order
  jmp_buf scheduler;
  int current = -1;
  bool in_fiber = false;
  std::string error;  // set by a failed check inside a fiber
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<Barrier> warpgroup_barriers;
  std::vector<WarpExchange> exchanges;
  std::vector<WarpgroupExchange> warpgroup_exchanges;
  const std::function<void()>* body = nullptr;
  Policy policy = Policy::round_robin;
  std::vector<int> warp_rank;       // warp_priority: the warps in a random order
  std::mt19937_64 rng;
};

Block* running = nullptr;
uint64_t schedule_seed = 0, launch_number = 0;

// Returns a well-mixed 64-bit hash of x (splitmix64's finaliser).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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
    if (b.block) detail::barrier_done();
    b.arrived = 0;
    ++b.generation;
    return;
  }
  wait_until_changed(&b.generation, g, nullptr);
}

bool runnable(const Wait& w) { return !w.done && (w.counter == nullptr || *w.counter != w.generation); }

// Returns the first runnable fiber of order[start], order[start + 1], ... (cyclically), or -1.
int first_runnable(const Block& b, const std::vector<int>& order, int start) {
  const int n = static_cast<int>(order.size());
  for (int k = 0, i = start; k < n; ++k, i = i + 1 == n ? 0 : i + 1)
    if (runnable(b.waits[order[i]])) return order[i];
  return -1;
}

// Returns the fiber to run next under the block's policy, or -1 when none can run.
int pick(Block& b) {
  const int n = static_cast<int>(b.waits.size());
  switch (b.policy) {
    case Policy::round_robin:
      return first_runnable(b, b.identity, b.current + 1 == n ? 0 : b.current + 1);
    case Policy::warp_priority:  // from lane 0 of the running warp: it keeps running until it blocks
      return first_runnable(b, b.order, b.current < 0 ? 0 : 32 * b.warp_position[b.current / 32]);
    case Policy::random:  // the first runnable fiber from a random start
      return first_runnable(b, b.identity, static_cast<int>(b.rng() % n));
  }
  return -1;
}

[[noreturn]] void fiber_main() {
  (*running->body)();
  running->fibers[running->current].done = true;
  running->waits[running->current].done = true;
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
    running->in_fiber = true;
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
void sync_block(Site site) {
  wait(running->block_barrier);
  note_context(site);
}
void sync_warp() { wait(running->warp_barriers[running->current / 32]); }
WarpExchange& warp_exchange() { return running->exchanges[running->current / 32]; }
void sync_warpgroup() {
  const size_t g = static_cast<size_t>(running->current / 128);
  if (g >= running->warpgroup_barriers.size())
    detail::fail("emu: thread " + std::to_string(running->current) +
                 " calls a warpgroup primitive in a block whose thread count is not a multiple of 128");
  wait(running->warpgroup_barriers[g]);
}
WarpgroupExchange& warpgroup_exchange() { return running->warpgroup_exchanges[running->current / 128]; }
void wait_until_changed(const unsigned* counter, unsigned seen, const void* object) {
  Wait& w = running->waits[running->current];
  w.counter = counter;
  w.generation = seen;
  w.object = object;
  while (*counter == seen) yield();
  Wait& after = running->waits[running->current];
  after.counter = nullptr;
  after.object = nullptr;
}
int lane() { return running->current % 32; }
unsigned char* shared_memory() { return flashattn::gpu::detail::smem_raw; }

void run_block(int threads, const std::function<void()>& body) {
  if (threads % 32 != 0 || threads > 1024) throw std::logic_error("emu: threads must be whole warps, at most 1024");
  Block b;
  b.body = &body;
  b.fibers.resize(threads);
  b.block_barrier.count = threads;
  b.block_barrier.block = true;
  b.warp_barriers.resize(threads / 32);
  for (Barrier& w : b.warp_barriers) w.count = 32;
  b.exchanges.resize(threads / 32);
  b.warpgroup_barriers.resize(threads / 128);
  for (Barrier& w : b.warpgroup_barriers) w.count = 128;
  b.warpgroup_exchanges.resize(threads / 128);
  const uint64_t block = uint64_t{block_idx.x} << 40 ^ uint64_t{block_idx.y} << 20 ^ block_idx.z;
  const uint64_t h = mix(mix(mix(schedule_seed) ^ launch_number) ^ block);
  b.policy = static_cast<Policy>(h % kPolicies);
  b.rng.seed(h);
  b.warp_rank.resize(threads / 32);
  for (int w = 0; w < threads / 32; ++w) b.warp_rank[w] = w;
  std::shuffle(b.warp_rank.begin(), b.warp_rank.end(), b.rng);
  b.waits.resize(threads);
  b.warp_position.resize(threads / 32);
  for (int k = 0; k < threads / 32; ++k) {
    b.warp_position[b.warp_rank[k]] = k;
    for (int l = 0; l < 32; ++l) b.order.push_back(32 * b.warp_rank[k] + l);
  }
  for (int i = 0; i < threads; ++i) b.identity.push_back(i);
  running = &b;
  for (int i = 0; i < threads; ++i) init_fiber(b.fibers[i], i);
  for (;;) {
    // Asynchronous copies (TMA) land when every thread waits, or at random switches of the random
    // policy: as late as the hardware may, or earlier.
    if (b.policy == Policy::random && b.rng() % 4 == 0) detail::async_progress();
    int next = pick(b);
    while (next < 0 && detail::async_progress()) next = pick(b);
    if (next < 0) break;
    resume(b, next);
    b.in_fiber = false;
    if (!b.error.empty()) break;
  }
  running = nullptr;
  if (!b.error.empty()) throw std::logic_error(b.error);
  // A deadlock: the first blocked thread of each distinct wait (barrier or mbarrier), in thread order.
  std::string report;
  std::vector<const unsigned*> seen;
  for (size_t i = 0; i < b.fibers.size(); ++i) {
    const Wait& w = b.waits[i];
    if (b.fibers[i].done || std::find(seen.begin(), seen.end(), w.counter) != seen.end()) continue;
    seen.push_back(w.counter);
    report += (report.empty() ? "emu: deadlock: thread " : "; thread ") + std::to_string(i) + " waits " +
              (w.object ? detail::describe_async_wait(w.object) : "at a barrier that the other threads never reach");
  }
  if (!report.empty()) throw std::logic_error(report);
}

void set_schedule_seed(uint64_t seed) {
  schedule_seed = seed;
  launch_number = 0;
}

std::string kernel_name(const void* kernel) {
  Dl_info info{};
  if (dladdr(kernel, &info) && info.dli_sname) {
    int status = 0;
    char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string name = status == 0 && d ? d : info.dli_sname;
    std::free(d);
    const size_t paren = name.find('(');
    if (paren != std::string::npos) name.resize(paren);
    if (name.rfind("void ", 0) == 0) name.erase(0, 5);
    const std::string ns = "flashattn::gpu::detail::";
    for (size_t at; (at = name.find(ns)) != std::string::npos;) name.erase(at, ns.size());
    return name;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "kernel %p", kernel);
  return buf;
}

void launch_blocks(Dim3 grid, int threads, int smem, const std::string& kernel, const std::function<void()>& body) {
  if (smem > kMaxSmem) throw std::logic_error("emu: shared memory request above kMaxSmem");
  std::vector<Dim3> blocks;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back(Dim3{x, y, z});
  ++launch_number;
  std::mt19937_64 order(mix(schedule_seed ^ mix(launch_number)));
  if (mix(schedule_seed + launch_number) % 4 != 0) std::shuffle(blocks.begin(), blocks.end(), order);
  static const std::vector<unsigned char> poison(kMaxSmem, 0xFF);
  std::memset(shared_memory(), 0xFF, kMaxSmem);  // each block below leaves bytes past smem at 0xFF
  for (const Dim3& blk : blocks) {
    block_idx = blk;
    std::memset(shared_memory(), 0xFF, smem);
    detail::block_begin(threads, smem, kernel.c_str());
    run_block(threads, body);
    detail::block_end();
    if (std::memcmp(shared_memory() + smem, poison.data(), kMaxSmem - smem) != 0)
      for (int i = smem; i < kMaxSmem; ++i)
        if (shared_memory()[i] != 0xFF)
          throw std::logic_error("emu: " + kernel + " wrote shared memory byte " + std::to_string(i) +
                                 " past its dynamic size " + std::to_string(smem));
  }
}

namespace detail {

void fail(const std::string& message) {
  if (running && running->in_fiber) {
    running->error = message;
    _longjmp(running->scheduler, 1);
  }
  throw std::logic_error(message);
}

int current_thread() { return running ? running->current : 0; }

}  // namespace detail

}  // namespace emu

namespace flashattn::gpu::detail {
alignas(16) unsigned char smem_raw[emu::kMaxSmem];
}  // namespace flashattn::gpu::detail
