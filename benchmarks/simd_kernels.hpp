// SIMD helpers of the benchmark (Highway, dynamic dispatch to the best target of this CPU):
// the FMA ceiling loop and the standard baseline's vectorised row softmax.
#pragma once

#include <cstdint>
#include <string>

#include "flashattn/mask.hpp"

namespace bench {

// Runs `iters` rounds of kFmaChains independent vector FMA chains on this thread and returns the
// FLOPs performed (2 per lane per FMA). The result is kept live so the loop is not optimised away.
double fma_loop(int64_t iters);

// Returns the Highway target the dispatched kernels run on, e.g. "AVX3".
std::string simd_target_name();

// Limits Highway's dispatch in this process to the target named `name` (as hwy::TargetName writes
// it, e.g. "AVX2") and the ones below it: the benchmark's kernels, the FMA peak loop and the
// flashattn CPU library share libhwy's target state, so all of them then run that target (an
// AVX2 machine's code on an AVX-512 host). Returns "" on success, else why not (an unknown name, a
// target not compiled in or not supported by this CPU).
std::string limit_simd_target(const std::string& name);

// Whether an AVX-512 Highway target is enabled here (false after limit_simd_target("AVX2")).
bool avx512_enabled();

// Turns each row i of the dense scores s [rows x n] into probabilities over its visible keys
// [m.key_begin(i), m.key_end(i)): invisible entries become 0, visible ones exp(s - max) / sum
// (vector exp, Highway contrib, ~1e-7 relative). Writes the row's log-sum-exp to lse[i], -inf (with
// an all-zero row) when the row sees no key. Dispatches once per call.
void softmax_rows(float* s, int64_t rows, int64_t n, const flashattn::Mask& m, float* lse);

// Computes dS = P ∘ (dP − D) in place over dp [rows x n] (the softmax backward), D[i] per row.
void softmax_grad_rows(float* dp, const float* p, const float* D, int64_t rows, int64_t n);

}  // namespace bench
