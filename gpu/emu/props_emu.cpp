// Property runner for the GPU kernels under the host emulator (runs without a GPU): registers the
// emulated kernels with deterministic and with atomic dQ, so every cross-check property of props/
// (oracle tolerance rule, untouched padding and canaries, unchanged inputs, repeatability) runs on
// the kernels' logic, with the emulator's checks on (emu.hpp, check.hpp).
//
// Schedules: every call runs under a new schedule seed (FLASHATTN_EMU_SEED, default 1, plus a call
// counter), FLASHATTN_EMU_SCHEDULES times (default 1; the outputs of the last run are judged, the
// checks run in each). So "repeated calls are bitwise identical" compares two schedules of the
// deterministic implementation. The atomic-dQ backward sums dQ in a schedule-dependent order (on a
// GPU too): it runs under the one seed FLASHATTN_EMU_SEED, so that property holds for it by
// construction; props_gpu_emu_schedules.cpp checks that its dQ does change with the schedule.
//
// Global memcheck: the inputs that cp.async reads (q, k, v, dout) are registered with the
// emulator for the call; the harness surrounds every buffer with canary bytes (props/buffers.hpp),
// so a copy that reaches up to kGuard bytes before or after a view's extent is out of bounds.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "emu/check.hpp"
#include "emu/emu_api.hpp"
#include "flashattn/types.hpp"
#include "props/registry.hpp"

namespace {

constexpr size_t kGuard = 64;  // props::kGuardBytes: canary bytes on each side of every buffer

// Registers t's extent (its first to its last element) with the guard zones around it.
void guard(const flashattn::ConstTensor& t, const char* name) {
  if (t.data == nullptr || t.batch <= 0 || t.seq <= 0 || t.heads <= 0 || t.dim <= 0) return;
  const size_t bytes = static_cast<size_t>(t.offset(t.batch - 1, t.seq - 1, t.heads - 1) + t.dim) *
                       flashattn::dtype_size(t.dtype);
  const auto* p = static_cast<const unsigned char*>(t.data);
  emu::register_guarded(p - kGuard, p + bytes + kGuard, p, bytes, name);
}

// Registers the cp.async sources of a call for its duration.
struct Guards {
  explicit Guards(const flashattn::ForwardArgs& a) { guard(a.q, "q"), guard(a.k, "k"), guard(a.v, "v"); }
  explicit Guards(const flashattn::BackwardArgs& a) {
    guard(a.q, "q"), guard(a.k, "k"), guard(a.v, "v"), guard(a.dout, "dout");
  }
  ~Guards() { emu::clear_guarded(); }
  Guards(const Guards&) = delete;
  Guards& operator=(const Guards&) = delete;
};

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

// Runs f under `schedules` consecutive seeds starting at a fresh one (fixed: the base seed).
template <class F>
void under_schedules(bool fixed, F&& f) {
  static const uint64_t base = env_or("FLASHATTN_EMU_SEED", 1);
  static const uint64_t schedules = env_or("FLASHATTN_EMU_SCHEDULES", 1);
  static uint64_t calls = 0;
  const uint64_t first = fixed ? base : base + 1000 * ++calls;
  for (uint64_t s = 0; s < (schedules ? schedules : 1); ++s) {
    emu::set_schedule_seed(first + s);
    f();
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto unsupported = [](const props::Case& c) { return flashattn::gpu_emu::unsupported(c.dtype, c.dim, c.dim, true); };
  auto forward = [](const flashattn::ForwardArgs& a) {
    const Guards g(a);
    under_schedules(false, [&] { flashattn::gpu_emu::forward(a); });
  };
  auto backward = [](bool deterministic) {
    return [deterministic](const flashattn::BackwardArgs& a) {
      const Guards g(a);
      under_schedules(!deterministic, [&] { flashattn::gpu_emu::backward(a, deterministic); });
    };
  };
  props::add({"gpu-emulated", forward, backward(true), unsupported});
  props::add({"gpu-emulated-atomic-dq", forward, backward(false), unsupported});
  return props::run(argc, argv);
}
