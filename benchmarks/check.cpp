// The check against a trusted fp32 result (see check.hpp; the oracle rule is props/tolerance.hpp).
#include "check.hpp"

#include <cmath>
#include <sstream>

#include "flashattn/convert.hpp"

namespace bench {

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, std::string& mismatch) {
  double m = 0;
  mismatch.clear();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
    if (fa && fb) {
      m = std::max(m, std::fabs(a[i] - b[i]));
    } else if (mismatch.empty() && !(a[i] == b[i])) {  // equal infinities (e.g. lse = -inf) agree
      std::ostringstream s;
      s << "index " << i << ": " << a[i] << " vs reference " << b[i];
      mismatch = s.str();
    }
  }
  if (a.size() != b.size() && mismatch.empty()) mismatch = "size mismatch";
  return m;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x)
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m;
}

TensorCheck check_vs_trusted_f32(const std::string& name, const std::vector<double>& impl,
                                 const std::vector<double>& trusted, flashattn::DType dtype, double c,
                                 int64_t seqlen_q, int64_t seqlen_k) {
  const double u32 = flashattn::unit_roundoff(flashattn::DType::f32);
  const double lowp = dtype == flashattn::DType::f32 ? 0.0 : kLowpUnits * flashattn::unit_roundoff(dtype);
  const double f32 = (kF32Units + std::sqrt(static_cast<double>(seqlen_q + seqlen_k))) * u32;
  TensorCheck r;
  r.name = name;
  r.max_err = max_abs_diff(impl, trusted, r.detail);
  r.bound = c * (lowp + f32) * max_abs(trusted);
  r.passed = r.detail.empty() && r.max_err <= r.bound;
  return r;
}

}  // namespace bench
