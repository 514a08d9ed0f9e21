// The tolerance rule of docs/semantics.md ("How the tests judge a backend"), as one reusable function.
//
//   max|impl − oracle_fp64| ≤ c · max|oracle_same_precision − oracle_fp64| + floor
//
// with floor = kFloorUnits · unit_roundoff(dtype) · magnitude (a few units of rounding of the output
// dtype at the output's magnitude: max|oracle_fp64|, or for sums whose terms may cancel the size of
// the terms, see crosscheck.cpp and docs/semantics.md). A value that is non-finite where the oracle is finite
// fails, whatever the bound; where the oracle is ±inf (LSE of rows that see no key) the
// implementation must give exactly the same infinity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/types.hpp"

namespace props {

// Multipliers of the same-precision error (FlashAttention's test rule).
constexpr double kOutFactor = 2;   // out
constexpr double kGradFactor = 3;  // dq, dk, dv
constexpr double kLseFactor = 2;   // lse (fp32)
// Units of roundoff in the floor.
constexpr double kFloorUnits = 4;

struct Comparison {
  double max_error = 0;       // max |impl − oracle| over finite oracle values
  double same_error = 0;      // max |same − oracle| over finite values
  double bound = 0;           // c · same_error + floor
  bool passed = true;
  int64_t worst = -1;         // index of the largest error, or of the first non-finite mismatch
  std::string reason;         // why it failed ("" when passed)
};

// Compares n values of an implementation with the fp64 oracle and the same-precision oracle.
// `floor_magnitude` is the magnitude the floor scales with (usually max|oracle|).
Comparison compare(const double* impl, const double* oracle, const double* same, size_t n, double c,
                   double floor_unit, double floor_magnitude);

// The usual call: floor = kFloorUnits · unit_roundoff(dtype) · magnitude, magnitude = the larger of
// max|oracle| and `terms` (the size of the terms a sum carries the rounding of; 0: none), and never
// below kFloorUnits · smallest_spacing(dtype) (a subnormal output cannot be closer than that).
Comparison compare(const std::vector<double>& impl, const std::vector<double>& oracle,
                   const std::vector<double>& same, double c, flashattn::DType dtype, double terms = 0);

// LSE: fp32 floor scaled by max(1, max|oracle|).
Comparison compare_lse(const std::vector<double>& impl, const std::vector<double>& oracle,
                       const std::vector<double>& same);

// Returns, element by element, whichever of two naive (same-precision) results deviates more from
// the oracle (finite deviations preferred): the naive error of the rule is the worse of two equally
// naive summation orders (reference::Precision::same_as_input and _reversed), so it measures the
// naive algorithm rather than one lucky rounding of it.
std::vector<double> worse_naive(const std::vector<double>& a, const std::vector<double>& b,
                                const std::vector<double>& oracle);

// Returns the largest finite |x|.
double max_abs_finite(const std::vector<double>& x);

// Returns a one-line description: "max_err=… bound=… (same=…) worst=[i] impl=… oracle=…".
std::string describe(const Comparison& r, const std::vector<double>& impl, const std::vector<double>& oracle);

}  // namespace props
