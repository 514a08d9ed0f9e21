// The emulator's hardware-class checks (gpu/emu/check.hpp) on small planted bugs: each check must
// fail on the bug it exists for and stay quiet on the correct variant of the same kernel. Compiled
// into the emulated property runner (FLASHATTN_GPU_EMULATE, like the kernels themselves).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "emu/emu.hpp"
#include "flashattn/block_mask.hpp"
#include "mma.cuh"

// A named namespace: the reports name kernels from the exported symbol table.
namespace emu_checks_test {

using flashattn::gpu::detail::cp_async_16;
using flashattn::gpu::detail::cp_async_commit;
using flashattn::gpu::detail::cp_async_wait;
using flashattn::gpu::detail::ldmatrix_x4;
using flashattn::gpu::detail::smem_raw;

constexpr int kThreads = 64;              // two warps
constexpr int kSmem = kThreads * 16;      // one 16-byte chunk per thread

// The planted bug of each variant of `exchange` below.
enum class Bug { none, no_wait, no_barrier, no_final_wait, plain_store_no_barrier, read_past_smem, misaligned,
                 uninitialised, source_past_end };

struct Params {
  const unsigned char* src;  // kSmem bytes (+ 16 for source_past_end)
  Bug bug;
};

// Each thread copies its 16-byte chunk to shared memory, then reads (ldmatrix) the chunk of the
// thread 32 places on, in the other warp: correct only with wait_group and a barrier between.
void exchange(const Params p) {
  const int tid = static_cast<int>(threadIdx.x);
  const int peer = (tid + 32) % kThreads;
  if (p.bug != Bug::uninitialised) {
    const int chunk = p.bug == Bug::source_past_end && tid == kThreads - 1 ? tid + 1 : tid;
    cp_async_16(smem_raw + tid * 16, p.src + chunk * 16, true);
  }
  cp_async_commit();
  if (p.bug != Bug::no_wait && p.bug != Bug::no_final_wait) cp_async_wait<0>();
  if (p.bug != Bug::no_barrier) __syncthreads();
  if (p.bug == Bug::no_final_wait) return;
  if (p.bug == Bug::plain_store_no_barrier)  // then the peer reads it with no barrier between
    for (int i = 0; i < 8; ++i) reinterpret_cast<uint16_t*>(smem_raw)[tid * 8 + i] = static_cast<uint16_t>(i + 1);
  const unsigned char* row = smem_raw + peer * 16;
  if (p.bug == Bug::read_past_smem) row = smem_raw + kSmem;
  if (p.bug == Bug::misaligned) row = smem_raw + peer * 16 + 8 * (tid == 0);
  uint32_t r[4];
  ldmatrix_x4(r, row);
  cp_async_wait<0>();
}

// Runs one block of `kernel` (kThreads threads, `smem` bytes) under schedule seed `seed` and returns
// its error ("" if none); clears the registered buffers after.
template <class Params>
std::string launch_error(void (*kernel)(Params), int smem, const Params& params, uint64_t seed) {
  emu::set_schedule_seed(seed);
  std::string error;
  try {
    emu::launch(kernel, emu::Dim3{1, 1, 1}, kThreads, smem, params);
  } catch (const std::logic_error& e) {
    error = e.what();
  }
  emu::clear_guarded();
  return error;
}

// Returns the error of one launch of `exchange` with `bug` under schedule seed `seed` ("" if none).
std::string run(Bug bug, uint64_t seed, bool register_source = false) {
  std::vector<unsigned char> src(kSmem + 64 + 16, 7);
  const unsigned char* payload = src.data() + 32;
  if (register_source) emu::register_guarded(src.data(), src.data() + src.size(), payload, kSmem, "src");
  return launch_error(exchange, kSmem, Params{payload, bug}, seed);
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

TEST_CASE("emu checks: the correct exchange passes under every schedule") {
  for (uint64_t seed = 1; seed <= 12; ++seed) CHECK(run(Bug::none, seed, true) == "");
}

TEST_CASE("emu checks: each planted bug is reported, under every schedule") {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    const std::string no_wait = run(Bug::no_wait, seed);
    CHECK(contains(no_wait, "has not been retired by a wait_group"));
    CHECK(contains(no_wait, "emu_checks_test::exchange block (0, 0, 0)"));  // the kernel
    CHECK(contains(no_wait, "emu_checks.cpp"));  // the program points
    const std::string race = run(Bug::no_barrier, seed);
    CHECK(contains(race, "race:"));
    CHECK(contains(race, "no __syncthreads between them"));
    CHECK(contains(run(Bug::no_final_wait, seed), "never retired by a wait_group"));
    const std::string plain = run(Bug::plain_store_no_barrier, seed);
    CHECK(contains(plain, "race:"));
    CHECK(contains(plain, "a plain store"));
    CHECK(contains(run(Bug::read_past_smem, seed), "outside the dynamic shared size"));
    CHECK(contains(run(Bug::misaligned, seed), "is not 16-byte aligned"));
    CHECK(contains(run(Bug::uninitialised, seed), "nothing wrote in this block (uninitialised)"));
    CHECK(contains(run(Bug::source_past_end, seed, true), "of src (1024 bytes) are out of bounds"));
  }
}

// Plain loads and stores (ld, st), and a flashattn/ helper reading a device array with the kernels'
// reader (DeviceRead): the bug of each variant
// of `plain_exchange` below.
enum class PlainBug { none, global_load_past_end, global_store_past_end, misaligned_load, no_barrier, uninitialised,
                      store_past_smem, helper_read_past_end };

struct PlainParams {
  const uint32_t* src;  // kThreads words
  uint32_t* dst;        // kThreads words
  PlainBug bug;
};

// Reads the list count one past the kThreads words at src, through a block-mask helper.
uint32_t helper_read_past_end(const uint32_t* src) {
  const int32_t* count = reinterpret_cast<const int32_t*>(src);
  return static_cast<uint32_t>(
      flashattn::BlockMask::lower_bound(count, count, 1, kThreads, 0, flashattn::gpu::detail::DeviceRead{}));
}

// Each thread stores its source word to shared memory (st), then after a barrier loads the word of
// the thread 32 places on (ld) and stores it to dst: dst[tid] = src[(tid + 32) % kThreads].
void plain_exchange(const PlainParams p) {
  using flashattn::gpu::detail::ld;
  using flashattn::gpu::detail::st;
  const int tid = static_cast<int>(threadIdx.x);
  const int peer = (tid + 32) % kThreads;
  uint32_t* words = reinterpret_cast<uint32_t*>(smem_raw);
  const bool last = tid == kThreads - 1;
  const uint32_t mine = p.bug == PlainBug::global_load_past_end && last ? ld(p.src + kThreads)
                        : p.bug == PlainBug::misaligned_load && last
                            ? ld(reinterpret_cast<const uint32_t*>(reinterpret_cast<const unsigned char*>(p.src) + 2))
                        : p.bug == PlainBug::helper_read_past_end && last ? helper_read_past_end(p.src)
                                                                           : ld(p.src + tid);
  if (p.bug == PlainBug::store_past_smem && last)
    st(words + kSmem / 4, mine);
  else if (p.bug != PlainBug::uninitialised || tid % 32 != 0)
    st(words + tid, mine);
  if (p.bug != PlainBug::no_barrier) __syncthreads();
  st(p.dst + (p.bug == PlainBug::global_store_past_end && last ? kThreads : tid), ld(words + peer));
}

// Returns the error of one launch of `plain_exchange` with `bug` ("" if none); dst receives the output.
std::string run_plain(PlainBug bug, uint64_t seed, std::vector<uint32_t>& dst) {
  constexpr int kPad = 4;  // guard words on each side
  std::vector<uint32_t> src(kThreads + 2 * kPad);
  for (int i = 0; i < kThreads; ++i) src[kPad + i] = 1000 + i;
  std::vector<uint32_t> out(kThreads + 2 * kPad, 0);
  emu::register_guarded(src.data(), src.data() + src.size(), src.data() + kPad, kThreads * 4, "src");
  emu::register_guarded(out.data(), out.data() + out.size(), out.data() + kPad, kThreads * 4, "dst");
  const std::string error = launch_error(plain_exchange, kSmem, PlainParams{src.data() + kPad, out.data() + kPad, bug}, seed);
  dst.assign(out.begin() + kPad, out.end() - kPad);
  return error;
}

TEST_CASE("emu checks: plain loads and stores (ld, st) are checked like the wrappers") {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    std::vector<uint32_t> dst;
    CHECK(run_plain(PlainBug::none, seed, dst) == "");
    for (int i = 0; i < kThreads; ++i) CHECK(dst[i] == 1000u + (i + 32) % kThreads);
    const std::string load = run_plain(PlainBug::global_load_past_end, seed, dst);
    CHECK(contains(load, "a load (ld) by thread 63"));
    CHECK(contains(load, "global bytes [256, 260) of src (256 bytes) are out of bounds"));
    CHECK(contains(run_plain(PlainBug::global_store_past_end, seed, dst),
                   "a store (st) by thread 63"));
    CHECK(contains(run_plain(PlainBug::global_store_past_end, seed, dst), "of dst (256 bytes) are out of bounds"));
    CHECK(contains(run_plain(PlainBug::misaligned_load, seed, dst), "address not 4-byte aligned"));
    const std::string race = run_plain(PlainBug::no_barrier, seed, dst);
    CHECK(contains(race, "race:"));
    CHECK(contains(race, "a store (st) by thread"));  // the storing thread is known
    CHECK(contains(run_plain(PlainBug::uninitialised, seed, dst), "nothing wrote in this block (uninitialised)"));
    CHECK(contains(run_plain(PlainBug::store_past_smem, seed, dst), "outside the dynamic shared size"));
    const std::string helper = run_plain(PlainBug::helper_read_past_end, seed, dst);
    CHECK(contains(helper, "a load (ld) by thread 63"));
    CHECK(contains(helper, "global bytes [256, 260) of src (256 bytes) are out of bounds"));
  }
}

// atomic_add_pair (the atomic-dQ backward's vector reduction): thread t adds (1, 2) to the pair of
// floats at acc + offset + 2·(t % 8); offset 0 is correct, 1 misaligns every pair, 2 moves the last
// pair past the 16-float buffer.
struct PairParams {
  float* acc;
  int offset;
};

void pair_adds(const PairParams p) {
  flashattn::gpu::detail::atomic_add_pair(p.acc + p.offset + 2 * (threadIdx.x % 8), 1.0f, 2.0f);
}

std::string run_pairs(int offset, uint64_t seed, std::vector<float>& acc) {
  constexpr int kPad = 4, kFloats = 16;
  std::vector<float> buf(kFloats + 2 * kPad, 0.0f);
  emu::register_guarded(buf.data(), buf.data() + buf.size(), buf.data() + kPad, kFloats * 4, "acc");
  const std::string error = launch_error(pair_adds, 0, PairParams{buf.data() + kPad, offset}, seed);
  acc.assign(buf.begin() + kPad, buf.end() - kPad);
  return error;
}

TEST_CASE("emu checks: atomic_add_pair adds both elements, 8-byte aligned, inside the buffer") {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    std::vector<float> acc;
    CHECK(run_pairs(0, seed, acc) == "");
    for (int j = 0; j < 8; ++j) {
      CHECK(acc[2 * j] == kThreads / 8 * 1.0f);
      CHECK(acc[2 * j + 1] == kThreads / 8 * 2.0f);
    }
    CHECK(contains(run_pairs(1, seed, acc), "a vector atomic add (v2) by thread"));
    CHECK(contains(run_pairs(1, seed, acc), "address not 8-byte aligned"));
    CHECK(contains(run_pairs(2, seed, acc), "global bytes [64, 72) of acc (64 bytes) are out of bounds"));
  }
}

void divergent_barrier(const int) {
  if (threadIdx.x == 0) __syncthreads();
}

TEST_CASE("emu checks: a barrier that some threads never reach is a deadlock") {
  std::string error;
  try {
    emu::launch(divergent_barrier, emu::Dim3{1, 1, 1}, 32, 0, 0);
  } catch (const std::logic_error& e) {
    error = e.what();
  }
  CHECK(contains(error, "deadlock"));
}

}  // namespace emu_checks_test
