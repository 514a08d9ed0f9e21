// Checks that decide whether an implementation's result is right.
//
// Against the fp64 oracle the benchmarks use the tests' one tolerance rule (props/tolerance.hpp,
// docs/semantics.md "How the tests judge a backend"): Trusted::check calls flashattn::tolerance::judge_forward /
// judge_backward. What this file adds is NOT that rule: a coarser check for sizes the oracle cannot
// reach.
//
// Against a trusted fp32 implementation T run on the same (widened) inputs, where the oracle is too
// slow: max|impl − T| ≤ c · (kLowpUnits · u(dtype)·[dtype ≠ f32] + (kF32Units + sqrt(Nq + Nk)) · u(f32))
// · max|T|: the low-precision implementation's own rounding plus the accumulation error of two fp32
// implementations that sum in different orders.
//
// A non-finite value where the reference is finite (or a finite one where it is not, except equal
// infinities) always fails.
#pragma once

#include <string>
#include <vector>

#include "flashattn/types.hpp"

namespace bench {

constexpr double kLowpUnits = 4;   // a low-precision output vs fp32: rounding of inputs' products and of out
constexpr double kF32Units = 16;   // fp32 exp / reciprocal / rounding, order independent part

struct TensorCheck {
  std::string name;
  double max_err = 0;
  double bound = 0;
  bool passed = true;
  std::string detail;  // the first non-finite mismatch, if any
};

// Returns max|a − b| over finite pairs; sets `mismatch` to a description of the first index where
// exactly one side is non-finite or the infinities differ (empty when none).
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, std::string& mismatch);

// Returns max|x| over finite entries.
double max_abs(const std::vector<double>& x);

// Checks impl (of dtype `dtype`) against a trusted fp32 result with the stated bound above; `c` is
// the rule's multiplier for the output (flashattn::tolerance::kOutFactor or kGradFactor).
TensorCheck check_vs_trusted_f32(const std::string& name, const std::vector<double>& impl,
                                 const std::vector<double>& trusted, flashattn::DType dtype, double c,
                                 int64_t seqlen_q, int64_t seqlen_k);

}  // namespace bench
