// The bf16 dot-product ceiling (AVX512_BF16 vdpbf16ps), the counterpart of the fp32 FMA loop for
// bf16 cases: a kernel that multiplies bf16 pairs into fp32 sums can run at up to this rate.
#pragma once

#include <cstdint>

namespace bench {

// Returns whether this CPU (and OS) runs AVX512_BF16 instructions (defined in peak.cpp, which is built
// without -mavx512bf16, so the check itself runs on any CPU).
bool bf16_dot_supported();

// Runs `iters` rounds of independent register-resident 512-bit vdpbf16ps chains on this thread and
// returns the FLOPs performed, 64 per instruction (16 lanes × 2 bf16 products × multiply + add).
// Call only when bf16_dot_supported().
double bf16_dot_loop(int64_t iters);

}  // namespace bench
