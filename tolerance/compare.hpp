// The tolerance rule of docs/semantics.md ("How the tests judge a backend"), per output:
//
//   max|impl − oracle_fp64|  ≤  max(c · naive, fp32_terms)  +  contract  +  floor
//
//   naive      max|oracle_same_precision − oracle_fp64|, element by element the worst of three equally
//              naive summation orders (worse_naive);
//   fp32_terms the naive part's lower bound. dq, dk (and dbias): the larger of one fp32 rounding at
//              the magnitude of their dS terms (u32 · the largest |scale|·Σ_j (P_ij(|dP_ij| + |D_i|) +
//              R_ij)|k_j|, R the move of dS by one rounding of every score; likewise for dk) — dP and D
//              are two fp32 sums, each rounded at least once, that cancel in dS — and one rounding of
//              dS itself to the input dtype (u_in · the largest |scale|·Σ_j |dS_ij||k_j|); out: the
//              effect of max(2, √(d/3)) fp32 roundings of every score at the size of its terms
//              (score_rounding_units(d) · u32 · max Σ_j P_ij·T_ij·|v_jx − O_ix|); 0 for dv and lse;
//   contract   backward only: max|oracle_fp64_given − oracle_fp64|, the exact effect of computing D
//              from the call's rounded `out` and P from its fp32 `lse` (Precision::fp64_given);
//   floor      kFloorUnits · max(u · magnitude, smallest spacing) of the output dtype.
//
// A value that is non-finite where the oracle is finite fails, whatever the bound; where the oracle
// is ±inf (LSE of rows that see no key) the implementation must give exactly the same infinity.
//
// This file holds the rule's arithmetic on values; judge.hpp runs the oracles a call needs and
// applies it. Everything that judges an implementation against the oracle (the property suite,
// the reliability tests, the fuzz target, the benchmarks) goes through these two files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/types.hpp"

namespace flashattn::tolerance {

// Multipliers of the same-precision error (FlashAttention's test rule).
constexpr double kOutFactor = 2;   // out
constexpr double kGradFactor = 3;  // dq, dk, dv
constexpr double kLseFactor = 2;   // lse (fp32)
// Units of roundoff in the floor.
constexpr double kFloorUnits = 4;
// Units of fp32 roundoff at the dS term magnitude that bound dq and dk from below (fp32_terms).
constexpr double kDsTermUnits = 1;
// Units of fp32 roundoff of every score at its term size whose effect bounds out from below, at
// least: a rounded product and a rounded sum (a vectorised dot product rounds each lane's product
// and each level of the reduction across the lanes; docs/semantics.md).
constexpr double kScoreTermUnits = 2;

// The units of fp32 roundoff of every score at its term size that bound out's naive error from
// below, for scores summed from `terms` products (the head dim d): max(kScoreTermUnits, √(d/3)),
// √(d/3) being the standard deviation of a sequential fp32 sum's rounding error at the size of its
// terms where one term dominates — what the naive model's orders draw from, and an FMA chain too.
double score_rounding_units(int64_t terms);

// The parts of one output's bound besides the naive error (see above).
struct Allowance {
  double c = kOutFactor;      // multiplier of the naive error
  double fp32_terms = 0;      // lower bound of the naive part (above)
  double contract = 0;        // error the call's given inputs force (backward: D from out, P from lse)
  double floor = 0;           // absolute floor
};

struct Comparison {
  double max_error = 0;       // max |impl − oracle| over finite oracle values
  double same_error = 0;      // max |naive − oracle| over finite values
  Allowance allowance;        // the other parts of the bound
  double bound = 0;           // max(c · same_error, fp32_terms) + contract + floor
  bool passed = true;
  int64_t worst = -1;         // index of the largest error, or of the first non-finite mismatch
  std::string reason;         // why it failed ("" when passed)
};

// Compares n values of an implementation with the fp64 oracle and the naive (same-precision)
// result under `allowance`.
Comparison compare(const double* impl, const double* oracle, const double* naive, size_t n, const Allowance& allowance);

// Returns the floor of an output of dtype `dtype` whose magnitude is `magnitude`:
// kFloorUnits · max(unit_roundoff(dtype) · magnitude, smallest_spacing(dtype)).
double floor_for(flashattn::DType dtype, double magnitude);

// The usual call: floor = floor_for(dtype, max(max|oracle|, terms)) — `terms` is the size of the
// terms a sum carries the rounding of (0: none) — and no other allowance.
Comparison compare(const std::vector<double>& impl, const std::vector<double>& oracle,
                   const std::vector<double>& naive, double c, flashattn::DType dtype, double terms = 0);

// LSE: an fp32 output; floor kFloorUnits · 2^-24 · max(1, max|oracle|, terms), `terms` the size of
// the scores' terms LSE rounds at (Precision::magnitude's lse; 0: none).
Comparison compare_lse(const std::vector<double>& impl, const std::vector<double>& oracle,
                       const std::vector<double>& naive, double terms = 0);

// Returns, element by element, whichever of the naive results deviates most from the oracle
// (finite deviations preferred): the naive error of the rule is the worst of three equally naive
// summation orders, so it measures the naive algorithm rather than one lucky rounding of it.
std::vector<double> worse_naive(const std::vector<std::vector<double>>& naive, const std::vector<double>& oracle);

// Returns x with every value rounded to what a tensor of dtype t holds (non-finite values kept).
std::vector<double> rounded(std::vector<double> x, flashattn::DType t);

// Returns the largest finite |x|.
double max_abs_finite(const std::vector<double>& x);

// Returns the largest finite |x − y| (0 for empty vectors).
double max_abs_diff(const std::vector<double>& x, const std::vector<double>& y);

// Returns a one-line description: "ok: max_err=… bound=… (same-precision err=…, …) at dense index i:
// impl=… oracle=…" (the reason instead of "ok" when it failed).
std::string describe(const Comparison& r, const std::vector<double>& impl, const std::vector<double>& oracle);

}  // namespace flashattn::tolerance
