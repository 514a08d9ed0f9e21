// Property of the oracle: its fp64 gradients equal central finite differences of its forward.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/reference.hpp"
#include "props/check.hpp"
#include "props/rng.hpp"

namespace props {
namespace {

using flashattn::reference::Head;

// Step of the central differences: with fp64 the truncation error (~h²) and the cancellation
// error (~1e-16/h) are both below 1e-9 here.
constexpr double kStep = 1e-6;
// Allowed |analytic − numeric|, relative to max(1, max|gradient|).
constexpr double kTolerance = 1e-6;
constexpr int kCases = 100;

// Returns L = Σ dout ∘ O, the scalar whose gradient backward computes.
double loss(const Head& h, const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
            const std::vector<double>& dout) {
  std::vector<double> out(static_cast<size_t>(h.nq * h.d)), lse(static_cast<size_t>(h.nq));
  flashattn::reference::head_forward(h, q.data(), k.data(), v.data(), out.data(), lse.data());
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += dout[i] * out[i];
  return l;
}

// Returns "" if grad equals the central differences of L with respect to `x`, else where not.
std::string check_gradient(const char* name, std::vector<double>& x, const std::vector<double>& grad,
                           const std::function<double()>& l) {
  double scale = 1;
  for (double g : grad) scale = std::max(scale, std::fabs(g));
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double up = l();
    x[i] = saved - kStep;
    const double down = l();
    x[i] = saved;
    const double numeric = (up - down) / (2 * kStep);
    if (!(std::fabs(numeric - grad[i]) <= kTolerance * scale)) {
      std::ostringstream os;
      os.precision(12);
      os << name << "[" << i << "]: backward " << grad[i] << ", central difference " << numeric;
      return os.str();
    }
  }
  return "";
}

}  // namespace

TEST_CASE("oracle gradients equal central finite differences") {
  check("oracle/finite-differences", [] {
    Head h;
    h.nq = *rc::gen::inRange<int64_t>(1, 5);
    h.nk = *rc::gen::inRange<int64_t>(1, 6);
    h.d = *rc::gen::inRange<int64_t>(1, 5);
    h.scale = *rc::gen::elementOf(std::vector<double>{1.0 / std::sqrt(double(h.d)), 0.3, 1.5, -0.7});
    h.softcap = *rc::gen::elementOf(std::vector<double>{0, 0, 1, 3});
    h.slope = *rc::gen::elementOf(std::vector<double>{0, 0, 0.25});
    const bool causal = *rc::gen::arbitrary<bool>();
    const int64_t left = *rc::gen::inRange<int64_t>(-1, h.nk + 1), right = *rc::gen::inRange<int64_t>(-1, h.nk + 1);
    h.mask = flashattn::Mask::make(h.nq, h.nk, causal, left, right);
    const uint64_t seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);

    Rng rng(seed);
    auto values = [&](int64_t n) {
      std::vector<double> x(static_cast<size_t>(n));
      for (double& e : x) e = rng.normal();
      return x;
    };
    std::vector<double> q = values(h.nq * h.d), k = values(h.nk * h.d), v = values(h.nk * h.d),
                        dout = values(h.nq * h.d);
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    flashattn::reference::head_backward(h, q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(), dv.data());
    const std::function<double()> l = [&] { return loss(h, q, k, v, dout); };
    for (const std::string& e : {check_gradient("dq", q, dq, l), check_gradient("dk", k, dk, l),
                                 check_gradient("dv", v, dv, l)})
      if (!e.empty()) RC_FAIL(e + " (seed " + std::to_string(seed) + ")");
  }, kCases);
}

}  // namespace props
