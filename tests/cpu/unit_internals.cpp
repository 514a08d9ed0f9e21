// The CPU backend's non-SIMD internals that both passes share:
// - ParallelFor (cpu/parallel.h): every item runs once, chunks of consecutive items run on one
//   thread in order (the forward's next-item prefetch relies on it), per-thread state is made once
//   per thread, and an exception from an item or from making the state comes out of the call;
// - the bf16 pair kernel (cpu/bf16_dot.h), on CPUs with AVX512_BF16: vdpbf16ps gives the exact
//   kernel's bits on normal values, each C the pairs' products summed high product first, and
//   subnormal inputs count as zero only in the vdpbf16ps kernel;
// - the scratch layouts (cpu/scratch.h): the regions read as vectors are 64-byte aligned, they come
//   in order and the last one ends within the counted size, for plans with every optional region;
// - the default key tile derived from the cache sizes (cpu/plan.h default_block_k).
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include "bf16_dot.h"
#include "flashattn/convert.hpp"
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

// Plans with and without each optional region (exact scores, soft-capping, copied k/v, bf16 pairs, grouped
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
    if (variant == 1 || variant == 2) {  // bf16 tile products (odd dim; odd block_k below)
      p.bf16_dot = true;
      p.exact_scores = false;
      p.copy_kv = false;
      p.block_k += variant - 1;
      plans.push_back(p);
    }
  }
  return plans;
}

// A 64-byte aligned buffer of n T (n rounded up to 16), zeroed.
template <typename T>
struct Aligned {
  explicit Aligned(size_t n) : storage((n + 16) * sizeof(T) + 64) {
    data = reinterpret_cast<T*>(storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64));
  }
  std::vector<char> storage;
  T* data;
};

uint32_t pair_of(float lo, float hi) {
  return flashattn::bf16_bits_from_float(lo) | static_cast<uint32_t>(flashattn::bf16_bits_from_float(hi)) << 16;
}
float low_of(uint32_t p) { return flashattn::float_from_bf16_bits(static_cast<uint16_t>(p)); }
float high_of(uint32_t p) { return flashattn::float_from_bf16_bits(static_cast<uint16_t>(p >> 16)); }

TEST_CASE("cpu bf16 pair kernel: vdpbf16ps matches the exact kernel and the pairwise FMA order") {
  if (!flashattn::cpu::detail::cpu_has_avx512_bf16()) {
    MESSAGE("SKIPPED: this CPU has no AVX512_BF16, the bf16 pair kernel cannot run here");
    return;
  }
  using flashattn::cpu::detail::GemmBf16Pairs;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  // 7 rows (a full 6-row block and a 1-row tail), 48 columns (a 3-vector panel), 5 pairs; A read
  // transposed (from its [np x na] rows) to cover the column stride.
  const int64_t na = 7, W = 48, np = 5, ld = 64;
  std::vector<uint32_t> A(static_cast<size_t>(na * np));
  Aligned<uint32_t> B(static_cast<size_t>(np * ld));
  for (auto& a : A) a = pair_of(normal(rng), normal(rng));
  for (int64_t i = 0; i < np * ld; ++i) B.data[i] = pair_of(normal(rng), normal(rng));
  Aligned<float> fast(static_cast<size_t>(na * ld)), exact(static_cast<size_t>(na * ld));
  Aligned<float> max_fast(W), max_exact(W);
  for (int64_t i = 0; i < W; ++i) max_fast.data[i] = max_exact.data[i] = -INFINITY;
  for (int64_t i = 0; i < na * ld; ++i) fast.data[i] = exact.data[i] = 0.25f * static_cast<float>(i % 5);
  using namespace flashattn::cpu::detail;  // NOLINT: the operand views
  const PairMatrix at{A.data(), np, na, na}, bm{B.data, np, W, ld};
  GemmBf16Pairs(Matrix<float>{fast.data, na, W, ld}, Transposed(at), bm, Accumulate::yes, Bf16Products::fast,
                max_fast.data);
  GemmBf16Pairs(Matrix<float>{exact.data, na, W, ld}, Transposed(at), bm, Accumulate::yes, Bf16Products::exact,
                max_exact.data);
  for (int64_t r = 0; r < na; ++r) {
    for (int64_t i = 0; i < W; ++i) {
      float want = 0.25f * static_cast<float>((r * ld + i) % 5);
      for (int64_t t = 0; t < np; ++t) {
        const uint32_t a = A[static_cast<size_t>(r + t * na)], b = B.data[t * ld + i];
        want = std::fma(high_of(a), high_of(b), want);
        want = std::fma(low_of(a), low_of(b), want);
      }
      CHECK(exact.data[r * ld + i] == want);
      CHECK(fast.data[r * ld + i] == want);
    }
  }
  for (int64_t i = 0; i < W; ++i) {
    float m = -INFINITY;
    for (int64_t r = 0; r < na; ++r) m = std::max(m, exact.data[r * ld + i]);
    CHECK(max_exact.data[i] == m);
    CHECK(max_fast.data[i] == m);
  }
}

TEST_CASE("cpu bf16 pair kernel: subnormal inputs are zero for vdpbf16ps, exact in the exact kernel") {
  if (!flashattn::cpu::detail::cpu_has_avx512_bf16()) {
    MESSAGE("SKIPPED: this CPU has no AVX512_BF16, the bf16 pair kernel cannot run here");
    return;
  }
  using flashattn::cpu::detail::GemmBf16Pairs;
  const float sub = std::ldexp(1.0f, -130);  // a bf16 subnormal
  const uint32_t a = pair_of(sub, 0.0f);
  Aligned<uint32_t> B(16);
  for (int i = 0; i < 16; ++i) B.data[i] = pair_of(1.0f, 1.0f);
  Aligned<float> fast(16), exact(16);
  using namespace flashattn::cpu::detail;  // NOLINT: the operand views
  const PairMatrix am{&a, 1, 1, 1}, bm{B.data, 1, 16, 16};
  GemmBf16Pairs(Matrix<float>{fast.data, 1, 16, 16}, am, bm, Accumulate::no, Bf16Products::fast);
  GemmBf16Pairs(Matrix<float>{exact.data, 1, 16, 16}, am, bm, Accumulate::no, Bf16Products::exact);
  for (int i = 0; i < 16; ++i) {
    CHECK(fast.data[i] == 0.0f);
    CHECK(exact.data[i] == sub);
  }
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVectorAlign == 0; }

TEST_CASE("cpu scratch layouts: vector regions aligned, in order, within the counted size") {
  for (const Plan& p : layout_plans()) {
    INFO("dim ", p.dim, " block_q ", p.block_q, " block_k ", p.block_k, " exact ", p.exact_scores, " softcap ",
         p.softcap, " copy_kv ", p.copy_kv, " bf16_dot ", p.bf16_dot);
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
      using flashattn::cpu::detail::ceil_div;
      CHECK((w.kp != nullptr) == p.bf16_dot);
      CHECK((w.vp != nullptr) == p.bf16_dot);
      CHECK((w.tiny != nullptr) == p.bf16_dot);
      CHECK((w.vt != nullptr) == p.bf16_dot);
      CHECK((w.pp != nullptr) == p.bf16_dot);
      if (w.pp) CHECK(aligned(w.pp));  // read as vectors (B of O += P·V)
      if (w.kp) CHECK(reinterpret_cast<const char*>(w.kp) >= reinterpret_cast<const char*>(w.rows + p.qpad * p.dpad));
      if (w.vp) CHECK(w.vp >= w.kp + p.max_k * ceil_div(p.dim, 2));
      if (w.tiny) CHECK(reinterpret_cast<const char*>(w.tiny) >= reinterpret_cast<const char*>(w.vp + ceil_div(p.max_k, 2) * p.dpad));
      if (w.vt) CHECK(reinterpret_cast<const char*>(w.vt) >= reinterpret_cast<const char*>(w.tiny + p.max_k + 1));
      if (w.pp) CHECK(w.pp >= w.vt + ceil_div(p.block_k, 2) * p.dpad);
      const char* end = w.pp ? reinterpret_cast<const char*>(w.pp + flashattn::cpu::detail::ceil_div(p.block_k, 2) * p.qpad)
                        : w.knorm ? reinterpret_cast<const char*>(w.knorm + p.max_k)
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
      // bf16 pairs: present exactly with bf16 tile products, each after the last, all vector-aligned
      // (scol is read as vectors: B of dQ += dS·K), the last ending the layout.
      using flashattn::cpu::detail::ceil_div;
      const uint32_t* pair_regions[] = {w.kp, w.vp, w.ki, w.prow, w.srow, w.scol};
      const int64_t d2 = ceil_div(p.dim, 2), k2 = ceil_div(p.block_k, 2), kblocks = ceil_div(p.max_k, p.block_k);
      const int64_t pair_sizes[] = {p.max_k * d2, p.max_k * d2, kblocks * k2 * p.dpad, p.block_k * p.qpad / 2,
                                    p.block_k * p.qpad / 2, k2 * p.qpad};
      const char* end = w.knorm  ? reinterpret_cast<const char*>(w.knorm + p.max_k)
                        : w.kv   ? reinterpret_cast<const char*>(w.kv + 2 * p.max_k * p.kv_ld)
                                 : reinterpret_cast<const char*>(w.row + p.dpad);
      for (int r = 0; r < 6; ++r) {
        CHECK((pair_regions[r] != nullptr) == p.bf16_dot);
        if (!pair_regions[r]) continue;
        CHECK(aligned(pair_regions[r]));
        CHECK(reinterpret_cast<const char*>(pair_regions[r]) >= end);
        end = reinterpret_cast<const char*>(pair_regions[r] + pair_sizes[r]);
        if (r == 2) {  // the key blocks' tiny flags follow the K pairs
          CHECK(reinterpret_cast<const char*>(w.ktiny) == end);
          end = reinterpret_cast<const char*>(w.ktiny + kblocks);
        }
      }
      CHECK((w.ktiny != nullptr) == p.bf16_dot);
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
  // bf16 tile products (2-byte operands): twice the fp32 tile where a bound held it back.
  CHECK(default_block_k(zen4, 64, 2) == 128);
  CHECK(default_block_k(zen4, 128, 2) == 128);
  CHECK(default_block_k(zen5, 128, 2) == 256);
  CHECK(default_block_k(zen5, 256, 2) == 128);
  // Tiny or unknown-small caches stop at the floor; huge head dims too.
  CHECK(default_block_k(CacheSizes{4 << 10, 64 << 10}, 64) == 64);
  CHECK(default_block_k(zen5, 1024) == 64);
  // Detection yields positive sizes (the fallback when nothing can be read), the same on every call.
  const CacheSizes c = detected_caches();
  CHECK(c.l1d > 0);
  CHECK(c.l2 > 0);
  CHECK(detected_caches().l1d == c.l1d);
  CHECK(detected_caches().l2 == c.l2);
  // The public reading (flashattn::cpu::cache_sizes, 0 when unknown) is what the plan uses.
  const flashattn::cpu::CacheSizes raw = flashattn::cpu::cache_sizes();
  CHECK(raw.l1d >= 0);
  CHECK(raw.l2 >= 0);
  if (raw.l1d > 0) CHECK(c.l1d == raw.l1d);
  if (raw.l2 > 0) CHECK(c.l2 == raw.l2);
}

}  // namespace
}  // namespace flashattn_test
