// The tolerance rule (see compare.hpp).
#include "props/compare.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "flashattn/convert.hpp"

namespace props {

double max_abs_finite(const std::vector<double>& x) {
  double m = 0;
  for (double v : x)
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m;
}

Comparison compare(const double* impl, const double* oracle, const double* same, size_t n, double c,
                   double floor_unit, double floor_magnitude) {
  Comparison r;
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
    if (std::isfinite(same[i])) r.same_error = std::max(r.same_error, std::fabs(same[i] - o));
  }
  r.bound = c * r.same_error + floor_unit * floor_magnitude;
  if (r.passed && r.max_error > r.bound) {
    r.passed = false;
    r.reason = "error above the bound";
  }
  return r;
}

Comparison compare(const std::vector<double>& impl, const std::vector<double>& oracle,
                   const std::vector<double>& same, double c, flashattn::DType dtype, double terms) {
  const double floor_unit = kFloorUnits * flashattn::unit_roundoff(dtype);
  const double floor_min = kFloorUnits * flashattn::smallest_spacing(dtype);
  const double magnitude = std::max({max_abs_finite(oracle), terms, floor_min / floor_unit});
  return compare(impl.data(), oracle.data(), same.data(), oracle.size(), c, floor_unit, magnitude);
}

std::vector<double> worse_naive(const std::vector<double>& a, const std::vector<double>& b,
                                const std::vector<double>& oracle) {
  std::vector<double> r(a);
  for (size_t e = 0; e < r.size(); ++e) {
    const double da = std::fabs(a[e] - oracle[e]), db = std::fabs(b[e] - oracle[e]);
    if (std::isfinite(db) && (!std::isfinite(da) || db > da)) r[e] = b[e];
  }
  return r;
}

Comparison compare_lse(const std::vector<double>& impl, const std::vector<double>& oracle,
                       const std::vector<double>& same) {
  return compare(impl.data(), oracle.data(), same.data(), oracle.size(), kLseFactor,
                 kFloorUnits * flashattn::unit_roundoff(flashattn::DType::f32), std::max(1.0, max_abs_finite(oracle)));
}

std::string describe(const Comparison& r, const std::vector<double>& impl, const std::vector<double>& oracle) {
  std::ostringstream os;
  os.precision(9);
  os << (r.passed ? "ok" : r.reason) << ": max_err=" << r.max_error << " bound=" << r.bound
     << " (same-precision err=" << r.same_error << ")";
  if (r.worst >= 0) os << " at dense index " << r.worst << ": impl=" << impl[r.worst] << " oracle=" << oracle[r.worst];
  return os.str();
}

}  // namespace props
