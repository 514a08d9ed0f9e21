// Property runner for the GPU kernels under the host emulator (runs without a GPU): registers the
// emulated kernels with deterministic and with atomic dQ, so every cross-check property of props/
// (oracle tolerance rule, untouched padding and canaries, unchanged inputs, repeatability) runs on
// the kernels' logic. See emu.hpp for what emulation does and does not check.
#include <string>

#include "emu/emu_api.hpp"
#include "props/registry.hpp"

int main(int argc, char** argv) {
  auto unsupported = [](const props::Case& c) { return flashattn::gpu_emu::unsupported(c.dtype, c.dim, c.dim, true); };
  props::add({"gpu-emulated", [](const flashattn::ForwardArgs& a) { flashattn::gpu_emu::forward(a); },
              [](const flashattn::BackwardArgs& a) { flashattn::gpu_emu::backward(a, true); }, unsupported});
  props::add({"gpu-emulated-atomic-dq", [](const flashattn::ForwardArgs& a) { flashattn::gpu_emu::forward(a); },
              [](const flashattn::BackwardArgs& a) { flashattn::gpu_emu::backward(a, false); }, unsupported});
  return props::run(argc, argv);
}
