// Tolerance rules that decide whether an implementation's result is right.
//
// Against the fp64 oracle (docs/semantics.md, "How the tests judge a backend"):
// max|impl − fp64| ≤ c · max|same_precision − fp64| + floor,
// c = 2 for out and lse, 3 for dq, dk, dv; same_precision is the oracle's naive low-precision mode
// with its output rounded to the output dtype (as a naive implementation would store it);
// floor = kFloorUnits · u(dtype) · max|fp64| (a few units of rounding at the output's magnitude).
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

constexpr double kFloorUnits = 4;  // 2 ulps of the output dtype
constexpr double kLowpUnits = 4;   // a low-precision output vs fp32: rounding of inputs' products and of out
constexpr double kF32Units = 16;   // fp32 exp / reciprocal / rounding, order independent part
constexpr double kCOut = 2;        // docs/semantics.md: c for out (and lse)
constexpr double kCGrad = 3;       // docs/semantics.md: c for dq, dk, dv

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

// Checks impl against the oracle: fp64 values, same-precision values (rounded to out_dtype here).
TensorCheck check_vs_oracle(const std::string& name, const std::vector<double>& impl, const std::vector<double>& fp64,
                            const std::vector<double>& same, flashattn::DType out_dtype, double c);

// Checks impl (of dtype `dtype`) against a trusted fp32 result with the stated bound above.
TensorCheck check_vs_trusted_f32(const std::string& name, const std::vector<double>& impl,
                                 const std::vector<double>& trusted, flashattn::DType dtype, double c,
                                 int64_t seqlen_q, int64_t seqlen_k);

}  // namespace bench
