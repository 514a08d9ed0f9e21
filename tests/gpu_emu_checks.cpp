// The emulator's hardware-class checks (gpu/emu/check.hpp) on small planted bugs: each check must
// fail on the bug it exists for and stay quiet on the correct variant of the same kernel. Compiled
// into the emulated property runner (FLASHATTN_GPU_EMULATE, like the kernels themselves).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "emu/emu.hpp"
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

// Returns the error of one launch of `exchange` with `bug` under schedule seed `seed` ("" if none).
std::string run(Bug bug, uint64_t seed, bool register_source = false) {
  std::vector<unsigned char> src(kSmem + 64 + 16, 7);
  const unsigned char* payload = src.data() + 32;
  if (register_source) emu::register_guarded(src.data(), src.data() + src.size(), payload, kSmem, "src");
  emu::set_schedule_seed(seed);
  std::string error;
  try {
    emu::launch(exchange, emu::Dim3{1, 1, 1}, kThreads, kSmem, Params{payload, bug});
  } catch (const std::logic_error& e) {
    error = e.what();
  }
  emu::clear_guarded();
  return error;
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
    CHECK(contains(no_wait, "gpu_emu_checks.cpp"));  // the program points
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
