// flashattn_gpu_traits: prints the tile shapes and dynamic shared memory of every compiled
// attention-kernel variant, from the same constexpr traits the launchers use (traits.cuh, compiled
// by the host compiler as the emulator does). scripts/gpu-budgets joins it with the registers and
// SASS counts of the built library; scripts/gpu-model turns both into the performance model.
// Output: a TSV header, then one line per (pass, head dims, dtype).
#include <cstdio>

#include "traits.cuh"
#include "variants.inc"

namespace {

using namespace flashattn::gpu::detail;

// warps_per_slab: warps that share one 16-row slab (and split its accumulator columns).
void row(const char* pass, int d, int dv, const char* dtype, int br, int bc, int warps, int warps_per_slab, int smem) {
  std::printf("%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\n", pass, d, dv, dtype, br, bc, warps, warps_per_slab, smem);
}

template <int D, int DV, bool kHasBackward>
void variant(const char* dtype) {
  using F = ForwardTraits<D, DV>;
  row("forward", D, DV, dtype, F::kBr, F::kBc, kWarps, F::kSplit, F::kSmemBytes);
  using FE = ForwardTraits<D, DV, true>;  // the variants with the options' code (and block masks)
  row("forward+extras", D, DV, dtype, FE::kBr, FE::kBc, kWarps, FE::kSplit, FE::kSmemBytes);
  if constexpr (kHasBackward) {
    using B = BackwardTraits<D, DV>;
    row("backward", D, DV, dtype, B::kBr, B::kBc, B::kBlockWarps, B::kSplit, B::kSmemBytes);
    using BE = BackwardTraits<D, DV, true>;
    row("backward+extras", D, DV, dtype, BE::kBr, BE::kBc, BE::kBlockWarps, BE::kSplit, BE::kSmemBytes);
    using Q = DqTraits<D, DV>;
    row("dq", D, DV, dtype, Q::kBr, Q::kBc, kWarps, 1, Q::kSmemBytes);
  }
}

}  // namespace

int main() {
  std::printf("pass\td\tdv\tdtype\tbr\tbc\twarps\twarps_per_slab\tsmem_dynamic\n");
#define FLASHATTN_TRAITS_ROW(D, DV, DTYPE, TYPE, HAS_BACKWARD) variant<D, DV, HAS_BACKWARD>(#DTYPE);
  FLASHATTN_GPU_VARIANTS(FLASHATTN_TRAITS_ROW)
#undef FLASHATTN_TRAITS_ROW
  return 0;
}
