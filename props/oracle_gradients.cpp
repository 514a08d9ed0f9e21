// Property of the oracle: its fp64 gradients equal central finite differences of its forward.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/reference.hpp"
#include "props/check.hpp"
#include "props/oracle_support.hpp"
#include "props/rng.hpp"

namespace props {
namespace {

using flashattn::reference::Head;

constexpr int kCases = 100;

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
    const std::function<double()> l = [&] { return head_loss(h, q, k, v, dout); };
    for (const std::string& e : {check_central_differences("dq", element_pointers(q), dq, l),
                                 check_central_differences("dk", element_pointers(k), dk, l),
                                 check_central_differences("dv", element_pointers(v), dv, l)})
      if (!e.empty()) RC_FAIL(e + " (seed " + std::to_string(seed) + ")");
  }, kCases);
}

}  // namespace props
