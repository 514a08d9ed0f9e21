// The SIMD targets compiled into this library and their slots in the HWY_EXPORT dispatch tables.
// Compiled with the same flags as forward.cc and backward.cc, so HWY_TARGETS agrees with theirs.
#include <vector>

#include "flashattn/cpu.hpp"
#include "hwy/highway.h"
#include "hwy/targets.h"
#include "bf16_dot.h"
#include "plan.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/prctl.h>
#endif

namespace flashattn::cpu {

static_assert((detail::kTargetAvx3Bf16 & (HWY_TARGETS | HWY_SCALAR | HWY_EMU128)) == 0,
              "kTargetAvx3Bf16 must not be a bit of a compiled Highway target");

namespace {

// The Highway targets compiled in and supported by this CPU, detected once per process: Highway's
// SupportedTargets() runs CPUID on every call, and in a virtual machine each CPUID traps to the
// hypervisor (every forward call paid ~50 µs for it on the 2-vCPU Zen 5 guest, as much as a
// 512-key decode step's arithmetic).
int64_t supported() {
  static const int64_t detected = HWY_TARGETS & hwy::SupportedTargets();
  return detected;
}

// The best AVX-512 Highway target compiled and supported here (0: none).
int64_t avx512_base_target() {
  for (const int64_t t : {int64_t{HWY_AVX3_DL}, int64_t{HWY_AVX3}}) {
    if (supported() & t) return t;
  }
  return 0;
}

// The scalable SVE targets when this thread's SVE vectors are longer than kMaxLanes floats (the
// architecture allows up to 2048 bits): the padded tiles and scratch regions (plan.h, scratch.h)
// hold kMaxLanes-float vectors at most. SVE_256 and SVE2_128 are fixed at 256 and 128 bits.
int64_t too_wide_targets() {
#if defined(__aarch64__) && defined(__linux__) && defined(PR_SVE_GET_VL)
  const int vl = prctl(PR_SVE_GET_VL, 0, 0, 0, 0);  // bytes (and flags); < 0 without SVE
  if (vl >= 0 && static_cast<int64_t>(vl & PR_SVE_VL_LEN_MASK) > detail::kMaxLanes * int64_t{sizeof(float)}) {
    return int64_t{HWY_SVE} | int64_t{HWY_SVE2};
  }
#endif
  return 0;
}

}  // namespace

std::vector<Target> targets() {
  const int64_t usable = supported() & ~too_wide_targets();
  std::vector<Target> out;
  // The AVX512_BF16 path first: best for bf16 inputs, the same as its AVX-512 base for the rest.
  if (avx512_base_target() != 0 && detail::cpu_has_avx512_bf16()) {
    out.push_back(Target{detail::kTargetAvx3Bf16, "AVX3_BF16"});
  }
  // A lower bit is a better target.
  for (int64_t rest = usable; rest != 0; rest &= rest - 1) {
    const int64_t bit = rest & -rest;
    out.push_back(Target{bit, hwy::TargetName(bit)});
  }
  return out;
}

int64_t detail::hwy_target_of(int64_t target) {
  return target == kTargetAvx3Bf16 ? avx512_base_target() : target;
}

void detail::use_bf16_dot(Plan& p, const AttentionArgs& a, const Config& c, bool backward) {
  if (a.q.dtype != DType::bf16 || is_quantized(a.k.dtype)) return;  // quantized K/V: the fp32 path
  p.bf16_dot = true;
  p.copy_kv = false;
  if (c.block_k == 0) p.block_k = default_key_tile(a, p, backward, sizeof(uint16_t));
  align_to_block_mask(p, a);
}

size_t detail::dispatch_index(int64_t target) {
  // Table layout of HWY_EXPORT (hwy/highway.h, 1.0.3): [0] initialiser, then one slot per dynamic
  // target in ChosenTarget bit order, then the SCALAR / EMU128 fallback.
  target = hwy_target_of(target);  // AVX3_BF16's table slots are its AVX-512 Highway target's
  if (target & (HWY_SCALAR | HWY_EMU128)) return HWY_MAX_DYNAMIC_TARGETS + 1;
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<uint64_t>(HWY_CHOSEN_TARGET_SHIFT(target)));
}

}  // namespace flashattn::cpu
