// The tolerance rule's arithmetic (see compare.hpp).
#include "tolerance/compare.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "flashattn/convert.hpp"

namespace flashattn::tolerance {

double max_abs_finite(const std::vector<double>& x) {
  double m = 0;
  for (double v : x)
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m;
}

double max_abs_diff(const std::vector<double>& x, const std::vector<double>& y) {
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    if (std::isfinite(x[i]) && std::isfinite(y[i])) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

std::vector<double> rounded(std::vector<double> x, flashattn::DType t) {
  for (double& v : x)
    if (std::isfinite(v)) v = flashattn::round_to(t, static_cast<float>(v));
  return x;
}

Comparison compare(const double* impl, const double* oracle, const double* naive, size_t n, const Allowance& allowance) {
  Comparison r;
  r.allowance = allowance;
  for (size_t i = 0; i < n; ++i) {
    const double o = oracle[i], x = impl[i];
    if (!std::isfinite(o)) {
      if (!(x == o) && r.passed) {  // ±inf must be matched exactly; a NaN oracle never passes
        r.passed = false;
        r.worst = static_cast<int64_t>(i);
        r.reason = std::isnan(o) ? "oracle is NaN" : "oracle is infinite and the implementation differs";
      }
      continue;
    }
    if (!std::isfinite(x)) {
      if (r.passed) {
        r.passed = false;
        r.worst = static_cast<int64_t>(i);
        r.reason = "non-finite value where the oracle is finite (unwritten output or overflow)";
      }
      continue;
    }
    const double e = std::fabs(x - o);
    if (e > r.max_error) {
      r.max_error = e;
      if (r.passed) r.worst = static_cast<int64_t>(i);
    }
    if (std::isfinite(naive[i])) r.same_error = std::max(r.same_error, std::fabs(naive[i] - o));
  }
  r.bound = std::max(allowance.c * r.same_error, allowance.fp32_terms) + allowance.contract + allowance.floor;
  if (r.passed && r.max_error > r.bound) {
    r.passed = false;
    r.reason = "error above the bound";
  }
  return r;
}

double floor_for(flashattn::DType dtype, double magnitude) {
  return kFloorUnits * std::max(flashattn::unit_roundoff(dtype) * magnitude, flashattn::smallest_spacing(dtype));
}

double score_rounding_units(int64_t terms) {
  return std::max(kScoreTermUnits, std::sqrt(static_cast<double>(terms) / 3));
}

Comparison compare(const std::vector<double>& impl, const std::vector<double>& oracle,
                   const std::vector<double>& naive, double c, flashattn::DType dtype, double terms) {
  Allowance a;
  a.c = c;
  a.floor = floor_for(dtype, std::max(max_abs_finite(oracle), terms));
  return compare(impl.data(), oracle.data(), naive.data(), oracle.size(), a);
}

std::vector<double> worse_naive(const std::vector<std::vector<double>>& naive, const std::vector<double>& oracle) {
  std::vector<double> r(naive.front());
  for (size_t c = 1; c < naive.size(); ++c)
    for (size_t e = 0; e < r.size(); ++e) {
      const double dr = std::fabs(r[e] - oracle[e]), dc = std::fabs(naive[c][e] - oracle[e]);
      if (std::isfinite(dc) && (!std::isfinite(dr) || dc > dr)) r[e] = naive[c][e];
    }
  return r;
}

Comparison compare_lse(const std::vector<double>& impl, const std::vector<double>& oracle,
                       const std::vector<double>& naive, double terms) {
  Allowance a;
  a.c = kLseFactor;
  a.floor = kFloorUnits * flashattn::unit_roundoff(flashattn::DType::f32) *
            std::max({1.0, max_abs_finite(oracle), terms});
  return compare(impl.data(), oracle.data(), naive.data(), oracle.size(), a);
}

std::string describe(const Comparison& r, const std::vector<double>& impl, const std::vector<double>& oracle) {
  std::ostringstream os;
  os.precision(9);
  const Allowance& a = r.allowance;
  os << (r.passed ? "ok" : r.reason) << ": max_err=" << r.max_error << " bound=" << r.bound
     << " (same-precision err=" << r.same_error << " x" << a.c;
  if (a.fp32_terms > 0) os << ", at least fp32 terms=" << a.fp32_terms;
  if (a.contract > 0) os << ", + given out/lse=" << a.contract;
  os << ", + floor=" << a.floor << ")";
  if (r.worst >= 0 && static_cast<size_t>(r.worst) < impl.size())
    os << " at dense index " << r.worst << ": impl=" << impl[r.worst] << " oracle=" << oracle[r.worst];
  return os.str();
}

}  // namespace flashattn::tolerance
