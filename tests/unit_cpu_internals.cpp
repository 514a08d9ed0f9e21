// The CPU backend's non-SIMD internals that both passes share:
// - ParallelFor (cpu/parallel.h): every item runs once, chunks of consecutive items run on one
//   thread in order (the forward's next-item prefetch relies on it), per-thread state is made once
//   per thread, and an exception from an item or from making the state comes out of the call;
// - the scratch layouts (cpu/scratch.h): the regions read as vectors are 64-byte aligned, they come
//   in order and the last one ends within the counted size, for plans with every optional region;
// - the default key tile derived from the cache sizes (cpu/plan.h default_block_k).
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include "parallel.h"
#include "plan.h"
#include "scratch.h"

namespace flashattn_test {
namespace {

using flashattn::cpu::detail::BackwardScratch;
using flashattn::cpu::detail::ForwardScratch;
using flashattn::cpu::detail::kVectorAlign;
using flashattn::cpu::detail::layout_bytes;
using flashattn::cpu::detail::ParallelFor;
using flashattn::cpu::detail::place;
using flashattn::cpu::detail::Plan;
using flashattn::cpu::detail::round_up;

struct Seen {
  int thread = -1;
  int64_t order = -1;  // position among the items its thread ran
};

TEST_CASE("cpu ParallelFor: each item once, chunks on one thread in order, state made once per thread") {
  for (const int64_t chunk : {1, 3, 8}) {
    const int threads = 3;
    const int64_t items = 100;
    std::vector<Seen> seen(items);
    std::vector<std::atomic<int>> runs(items);
    std::atomic<int> states{0};
    struct State {
      int64_t done = 0;
    };
    ParallelFor(
        threads, items, chunk,
        [&] {
          states.fetch_add(1);
          return State{};
        },
        [&](int64_t it, State& s) {
          runs[it].fetch_add(1);
          seen[it] = {omp_get_thread_num(), s.done++};
        });
    INFO("chunk ", chunk);
    CHECK(states.load() >= 1);
    CHECK(states.load() <= threads);
    for (int64_t it = 0; it < items; ++it) {
      CHECK(runs[it].load() == 1);
      if (it % chunk != 0) {  // not the first of its chunk: right after the previous item, same thread
        CHECK(seen[it].thread == seen[it - 1].thread);
        CHECK(seen[it].order == seen[it - 1].order + 1);
      }
    }
  }
}

TEST_CASE("cpu ParallelFor: no items, more threads than items") {
  int ran = 0;
  ParallelFor(4, 0, 1, [] { return 0; }, [&](int64_t, int&) { ++ran; });
  CHECK(ran == 0);
  std::atomic<int> count{0};
  ParallelFor(8, 2, 1, [] { return 0; }, [&](int64_t, int&) { count.fetch_add(1); });
  CHECK(count.load() == 2);
}

TEST_CASE("cpu ParallelFor: an exception from an item or from a thread's state is rethrown after the region") {
  CHECK_THROWS_WITH_AS(ParallelFor(
                           2, 50, 1, [] { return 0; },
                           [](int64_t it, int&) {
                             if (it == 17) throw std::runtime_error("item 17");
                           }),
                       "item 17", std::runtime_error);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH_AS(ParallelFor(
                           2, 50, 1, []() -> int { throw std::runtime_error("no scratch"); },
                           [&](int64_t, int&) { ran.fetch_add(1); }),
                       "no scratch", std::runtime_error);
  CHECK(ran.load() == 0);
  // A later call runs normally.
  std::atomic<int> count{0};
  ParallelFor(2, 10, 2, [] { return 0; }, [&](int64_t, int&) { count.fetch_add(1); });
  CHECK(count.load() == 10);
}

// Plans with and without each optional region (exact scores, soft-capping, copied k/v, grouped
// backward accumulators, several query blocks per pass), odd head dims and lengths.
std::vector<Plan> layout_plans() {
  std::vector<Plan> plans;
  for (int variant = 0; variant < 4; ++variant) {
    Plan p;
    p.block_q = variant == 1 ? 16 : 64;
    p.block_k = variant == 2 ? 40 : 128;
    p.qpad = round_up(p.block_q, flashattn::cpu::detail::kMaxLanes);
    p.dim = variant == 3 ? 160 : 17 + 40 * variant;
    p.dpad = round_up(p.dim, flashattn::cpu::detail::kMaxLanes);
    p.max_q = variant == 3 ? 20000 : 300;  // variant 3: backward_grouped
    p.max_k = 301 + variant;
    p.pass_blocks = variant == 2 ? 3 : 1;
    p.exact_scores = variant % 2 == 0;
    p.softcap = variant >= 2;
    p.copy_kv = variant != 0;
    plans.push_back(p);
  }
  return plans;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVectorAlign == 0; }

TEST_CASE("cpu scratch layouts: vector regions aligned, in order, within the counted size") {
  for (const Plan& p : layout_plans()) {
    INFO("dim ", p.dim, " block_q ", p.block_q, " block_k ", p.block_k, " exact ", p.exact_scores, " softcap ",
         p.softcap, " copy_kv ", p.copy_kv);
    {
      const size_t bytes = layout_bytes<ForwardScratch>(p);
      std::vector<char> storage(bytes + kVectorAlign);
      char* base = storage.data() + (kVectorAlign - reinterpret_cast<uintptr_t>(storage.data()) % kVectorAlign);
      const ForwardScratch w = place<ForwardScratch>(base, p);
      const void* vector_regions[] = {w.qt, w.ot, w.st, w.m, w.l, w.alpha, w.tmax, w.kbeg, w.kend, w.rows};
      for (const void* r : vector_regions) CHECK(aligned(r));
      CHECK((w.sd != nullptr) == p.exact_scores);
      CHECK((w.knorm != nullptr) == p.exact_scores);
      if (w.sd) CHECK(static_cast<const void*>(w.sd) == base);
      const char* end = w.knorm ? reinterpret_cast<const char*>(w.knorm + p.max_k)
                                : reinterpret_cast<const char*>(w.rows + p.qpad * p.dpad);
      CHECK(end == base + bytes);
    }
    {
      const size_t bytes = layout_bytes<BackwardScratch>(p);
      std::vector<char> storage(bytes + kVectorAlign);
      char* base = storage.data() + (kVectorAlign - reinterpret_cast<uintptr_t>(storage.data()) % kVectorAlign);
      const BackwardScratch w = place<BackwardScratch>(base, p);
      const char* last = base;
      for (int64_t b = 0; b < p.pass_blocks; ++b) {
        const auto& q = w.blk[b];
        const void* vector_regions[] = {q.qt, q.dot, q.dqt, q.qr, q.dor, q.dd, q.lse, q.rnorm, q.kbeg, q.kend, q.pc};
        for (const void* r : vector_regions) CHECK(aligned(r));
        CHECK(reinterpret_cast<const char*>(q.qt) >= last);
        last = reinterpret_cast<const char*>(q.pc);
        CHECK((q.tc != nullptr) == p.softcap);
        if (q.tc) CHECK(aligned(q.tc));
      }
      const void* vector_regions[] = {w.dpt, w.dkt, w.dvt, w.dkg, w.dvg, w.row};
      for (const void* r : vector_regions) CHECK(aligned(r));
      CHECK(reinterpret_cast<const char*>(w.dpt) > last);
      CHECK((w.dkg != w.dkt) == flashattn::cpu::detail::backward_grouped(p));
      CHECK((w.kv != nullptr) == p.copy_kv);
      CHECK((w.knorm != nullptr) == p.exact_scores);
      const char* end = w.knorm  ? reinterpret_cast<const char*>(w.knorm + p.max_k)
                        : w.kv   ? reinterpret_cast<const char*>(w.kv + 2 * p.max_k * p.dim)
                                 : reinterpret_cast<const char*>(w.row + p.dpad);
      CHECK(end == base + bytes);
    }
  }
}

TEST_CASE("cpu default key tile: derived from L1d and L2, the Zen 5 tuning kept") {
  using flashattn::cpu::detail::CacheSizes;
  using flashattn::cpu::detail::default_block_k;
  using flashattn::cpu::detail::detected_caches;
  const CacheSizes zen5{48 << 10, 1 << 20}, zen4{32 << 10, 1 << 20};
  // The tiles tuned on Zen 5 (docs/cpu-design.md): 128 keys up to d = 128, 64 above (dpad 144..256).
  CHECK(default_block_k(zen5, 64) == 128);
  CHECK(default_block_k(zen5, 128) == 128);
  CHECK(default_block_k(zen5, 144) == 64);
  CHECK(default_block_k(zen5, 256) == 64);
  // The L1 bound: a 128 x 64 fp32 P tile (32 KiB) is more than 2/3 of a 32 KiB L1d.
  CHECK(default_block_k(zen4, 64) == 64);
  CHECK(default_block_k(zen4, 128) == 64);
  // Exactly at the L1 bound (3 x 32 KiB = 2 x 48 KiB) the tile still fits; one byte less and it halves.
  CHECK(default_block_k(CacheSizes{(48 << 10) - 1, 1 << 20}, 64) == 64);
  // Large caches reach the cap; the L2 bound alone: 2 x 256 x 64 fp32 = 128 KiB = 1/8 of 1 MiB.
  CHECK(default_block_k(CacheSizes{1 << 20, 1 << 20}, 64) == 256);
  CHECK(default_block_k(CacheSizes{1 << 20, (1 << 20) - 1}, 64) == 128);
  CHECK(default_block_k(CacheSizes{1 << 20, 1 << 20}, 128) == 128);
  // Tiny or unknown-small caches stop at the floor; huge head dims too.
  CHECK(default_block_k(CacheSizes{4 << 10, 64 << 10}, 64) == 64);
  CHECK(default_block_k(zen5, 1024) == 64);
  // Detection yields positive sizes (the fallback when nothing can be read), the same on every call.
  const CacheSizes c = detected_caches();
  CHECK(c.l1d > 0);
  CHECK(c.l2 > 0);
  CHECK(detected_caches().l1d == c.l1d);
  CHECK(detected_caches().l2 == c.l2);
}

}  // namespace
}  // namespace flashattn_test
