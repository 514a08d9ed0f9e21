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
// construction; tests/gpu/props_emu_schedules.cpp checks that its dQ does change with the schedule.
//
// Global memcheck and layouts: props_calls.hpp.
#include <cstdint>
#include <cstdlib>

#include "emu/check.hpp"
#include "emu/emu_api.hpp"
#include "emu/props_calls.hpp"
#include "props/registry.hpp"

namespace {

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
  // Each call runs on copies of its tensors in the GPU's aligned layout, with every buffer registered
  // for the emulator's memcheck (props_calls.hpp).
  auto forward = [](const flashattn::ForwardArgs& a) {
    flashattn::gpu_emu::in_gpu_layout(a, [](const flashattn::ForwardArgs& call) {
      under_schedules(false, [&] { flashattn::gpu_emu::forward(call); });
    });
  };
  auto backward = [](bool deterministic) {
    return [deterministic](const flashattn::BackwardArgs& a) {
      flashattn::gpu_emu::in_gpu_layout(a, [&](const flashattn::BackwardArgs& call) {
        under_schedules(!deterministic, [&] { flashattn::gpu_emu::backward(call, deterministic); });
      });
    };
  };
  props::add({"gpu-emulated", forward, backward(true), unsupported});
  props::add({"gpu-emulated-atomic-dq", forward, backward(false), unsupported});
  return props::run(argc, argv);
}
