// Property of the oracle: its fp64 gradients (dbias included) equal central finite differences of its
// forward, with and without an additive bias (−∞ entries too) and dropout (the keep decisions do
// not depend on q, k, v or the bias, so the dropped forward is as smooth as the undropped one).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
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
    const bool bias = *rc::gen::arbitrary<bool>(), bias_inf = *rc::gen::arbitrary<bool>();
    h.dropout_p = *rc::gen::elementOf(std::vector<float>{0, 0, 0.3f, 0.6f});
    h.dropout_seed = seed * 0x9E3779B97F4A7C15ull;
    h.dropout_stream = seed % 5;

    Rng rng(seed);
    auto values = [&](int64_t n) {
      std::vector<double> x(static_cast<size_t>(n));
      for (double& e : x) e = rng.normal();
      return x;
    };
    std::vector<double> q = values(h.nq * h.d), k = values(h.nk * h.d), v = values(h.nk * h.d),
                        dout = values(h.nq * h.d), b = values(h.nq * h.nk);
    if (bias_inf)
      for (double& e : b) e = rng.below(4) == 0 ? -std::numeric_limits<double>::infinity() : e;
    h.bias = bias ? b.data() : nullptr;
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), db(b.size());
    flashattn::reference::head_backward(h, q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(), dv.data(),
                                        nullptr, db.data());
    const std::function<double()> l = [&] { return head_loss(h, q, k, v, dout); };
    std::vector<double*> finite_bias;  // a −∞ entry stays −∞ when moved: its gradient is 0 by definition
    for (double& e : b)
      if (std::isfinite(e)) finite_bias.push_back(&e);
    std::vector<double> db_finite;
    for (size_t x = 0; x < b.size(); ++x)
      if (std::isfinite(b[x])) db_finite.push_back(db[x]);
    for (const std::string& e : {check_central_differences("dq", element_pointers(q), dq, l),
                                 check_central_differences("dk", element_pointers(k), dk, l),
                                 check_central_differences("dv", element_pointers(v), dv, l),
                                 bias ? check_central_differences("dbias", finite_bias, db_finite, l) : std::string()})
      if (!e.empty()) RC_FAIL(e + " (seed " + std::to_string(seed) + ")");
    for (size_t x = 0; x < b.size(); ++x)
      if (bias && !std::isfinite(b[x]) && db[x] != 0) RC_FAIL("dbias of a −∞ bias entry is " + std::to_string(db[x]) + ", not 0");
  }, kCases);
}

}  // namespace props
