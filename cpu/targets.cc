// The SIMD targets compiled into this library and their slots in the HWY_EXPORT dispatch tables.
// Compiled with the same flags as forward.cc and backward.cc, so HWY_TARGETS agrees with theirs.
#include <vector>

#include "flashattn/cpu.hpp"
#include "hwy/highway.h"
#include "hwy/targets.h"
#include "plan.h"

namespace flashattn::cpu {

std::vector<Target> targets() {
  const int64_t usable = HWY_TARGETS & hwy::SupportedTargets();
  std::vector<Target> out;
  // A lower bit is a better target.
  for (int64_t rest = usable; rest != 0; rest &= rest - 1) {
    const int64_t bit = rest & -rest;
    out.push_back(Target{bit, hwy::TargetName(bit)});
  }
  return out;
}

size_t detail::dispatch_index(int64_t target) {
  // Table layout of HWY_EXPORT (hwy/highway.h, 1.0.3): [0] initialiser, then one slot per dynamic
  // target in ChosenTarget bit order, then the SCALAR / EMU128 fallback.
  if (target & (HWY_SCALAR | HWY_EMU128)) return HWY_MAX_DYNAMIC_TARGETS + 1;
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<uint64_t>(HWY_CHOSEN_TARGET_SHIFT(target)));
}

}  // namespace flashattn::cpu
