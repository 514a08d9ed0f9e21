// Properties of the oracle for the inference options (docs/semantics.md, "Inference"):
//   paged K/V == the same keys laid out contiguously (random page sizes, pages in a random order,
//   a shared prefix page, unused pages and table entries holding garbage), bitwise;
//   append-then-attend == attend over the concatenated keys with the new keys and the queries
//   rotated by this suite's own code (both rotary conventions), bitwise; the caches hold exactly the
//   documented rows afterwards and every other byte is untouched;
//   a sink == one extra key, visible to every row, with score = sink and a zero value;
//   dsinks and the gradients with dv != d equal central finite differences.
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/append.hpp"
#include "flashattn/reference.hpp"
#include "flashattn/validate.hpp"
#include "props/check.hpp"
#include "props/inference.hpp"
#include "props/oracle_support.hpp"
#include "props/quantized.hpp"
#include "props/rng.hpp"

namespace props {
namespace {

using flashattn::reference::Head;

constexpr int kCases = 100;

// Returns "" if a and b are the same values bit for bit (NaN payloads aside), else where not.
std::string same_bits(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) {
      std::ostringstream os;
      os.precision(17);
      os << what << "[" << i << "]: " << a[i] << " != " << b[i];
      return os.str();
    }
  return "";
}

TEST_CASE("oracle: paged and appended calls equal the plain call over the same keys, bitwise") {
  check("oracle/inference-forms", [] {
    const InferenceSpec s = *gen_inference();
    InferenceProblem p(s);
    const auto a = p.call();
    flashattn::reference::forward(a);
    const std::string caches = p.check_caches();
    if (!caches.empty()) RC_FAIL(caches + " | " + s.describe());
    flashattn::reference::forward(p.plain());
    for (const std::string& e : {same_bits(p.out_of_call(), p.out_of_plain(), "out"),
                                 same_bits(p.lse_of_call(), p.lse_of_plain(), "lse")})
      if (!e.empty()) RC_FAIL(e + " | " + s.describe());
  }, kCases);
}

TEST_CASE("oracle: a call over quantized K/V equals the fp32 call over their dequantized values, bitwise") {
  check("oracle/quantized", [] {
    const QuantizedSpec s = *gen_quantized();
    QuantizedProblem p(s);
    const flashattn::ForwardArgs a = p.call();
    flashattn::validate(a);
    const flashattn::AppendedCall c = flashattn::apply_append(a);  // as the oracle's forward does first
    const auto q = flashattn::reference::forward_values(c.args);
    const auto f = flashattn::reference::forward_values(p.dequantized());
    for (const std::string& e : {same_bits(q.out, f.out, "out"), same_bits(q.lse, f.lse, "lse")})
      if (!e.empty()) RC_FAIL(e + " | " + s.describe());
  }, kCases);
}

// Returns a random head problem without position masks: nq, nk, d, dv, scale, softcap.
Head random_head(bool masks) {
  Head h;
  h.nq = *rc::gen::inRange<int64_t>(1, 5);
  h.nk = *rc::gen::inRange<int64_t>(1, 6);
  h.d = *rc::gen::inRange<int64_t>(1, 5);
  h.dv = *rc::gen::inRange<int64_t>(1, 6);
  h.scale = *rc::gen::elementOf(std::vector<double>{1.0 / std::sqrt(double(h.d)), 0.3, 1.5, -0.7});
  h.softcap = *rc::gen::elementOf(std::vector<double>{0, 0, 1, 3});
  const bool causal = masks && *rc::gen::arbitrary<bool>();
  h.mask = flashattn::Mask::make(h.nq, h.nk, causal, -1, -1);
  return h;
}

std::vector<double> normals(Rng& rng, int64_t n, double sigma = 1) {
  std::vector<double> x(static_cast<size_t>(n));
  for (double& e : x) e = sigma * rng.normal();
  return x;
}

TEST_CASE("oracle: a sink equals an extra key with score = sink and a zero value") {
  check("oracle/sink-extra-key", [] {
    Head h = random_head(false);
    h.softcap = 0;  // the extra key's score must be the sink itself: no transform
    h.has_sink = true;
    Rng rng(*rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32));
    h.sink = 2 * rng.normal();
    const auto q = normals(rng, h.nq * h.d), k = normals(rng, h.nk * h.d), v = normals(rng, h.nk * h.dv);
    std::vector<double> out(size_t(h.nq * h.dv)), lse(size_t(h.nq));
    flashattn::reference::head_forward(h, q.data(), k.data(), v.data(), out.data(), lse.data());
    // The extra key: one more dimension, 1 in q and sink/scale in the extra key (0 in the others),
    // so its score is scale·(sink/scale) = sink; its value row is zero.
    Head x = h;
    x.has_sink = false;
    x.nk = h.nk + 1;
    x.d = h.d + 1;
    x.mask = flashattn::Mask::make(x.nq, x.nk, false, -1, -1);
    std::vector<double> xq(size_t(x.nq * x.d)), xk(size_t(x.nk * x.d), 0.0), xv(size_t(x.nk * x.dv), 0.0);
    for (int64_t i = 0; i < h.nq; ++i) {
      for (int64_t t = 0; t < h.d; ++t) xq[i * x.d + t] = q[i * h.d + t];
      xq[i * x.d + h.d] = 1;
    }
    for (int64_t j = 0; j < h.nk; ++j) {
      for (int64_t t = 0; t < h.d; ++t) xk[j * x.d + t] = k[j * h.d + t];
      for (int64_t t = 0; t < h.dv; ++t) xv[j * x.dv + t] = v[j * h.dv + t];
    }
    xk[h.nk * x.d + h.d] = h.sink / h.scale;
    std::vector<double> xout(out.size()), xlse(lse.size());
    flashattn::reference::head_forward(x, xq.data(), xk.data(), xv.data(), xout.data(), xlse.data());
    for (size_t i = 0; i < out.size(); ++i) RC_ASSERT(std::fabs(out[i] - xout[i]) <= 1e-12 * (1 + std::fabs(xout[i])));
    for (size_t i = 0; i < lse.size(); ++i) RC_ASSERT(std::fabs(lse[i] - xlse[i]) <= 1e-12 * (1 + std::fabs(xlse[i])));
  }, kCases);
}

TEST_CASE("oracle: a row that sees no key but has a sink gives O = 0, LSE = sink") {
  Head h;
  h.nq = 3;
  h.nk = 1;
  h.d = 2;
  h.dv = 3;
  h.has_sink = true;
  h.sink = 0.75;
  h.mask = flashattn::Mask::make(3, 1, true, -1, -1);  // rows 0 and 1 see no key
  const std::vector<double> q{1, 2, 3, 4, 5, 6}, k{0.5, -1}, v{1, 2, 3};
  std::vector<double> out(9), lse(3);
  flashattn::reference::head_forward(h, q.data(), k.data(), v.data(), out.data(), lse.data());
  for (int i = 0; i < 2; ++i) {
    CHECK(lse[i] == 0.75);
    for (int x = 0; x < 3; ++x) CHECK(out[i * 3 + x] == 0.0);
  }
  // Row 2 sees key 0: S = 1·(5·0.5 + 6·(−1)) = −3.5 (Head's scale defaults to 1).
  CHECK(lse[2] == doctest::Approx(std::log(std::exp(0.75) + std::exp(-3.5))));
}

TEST_CASE("oracle: dsinks and the gradients with dv != d equal central finite differences") {
  check("oracle/finite-differences-sinks-dv", [] {
    Head h = random_head(true);
    h.has_sink = *rc::gen::arbitrary<bool>();
    Rng rng(*rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32));
    h.sink = rng.normal();
    auto q = normals(rng, h.nq * h.d), k = normals(rng, h.nk * h.d), v = normals(rng, h.nk * h.dv);
    const auto dout = normals(rng, h.nq * h.dv);
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    double dsink = 0;
    flashattn::reference::head_backward(h, q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(), dv.data(),
                                        &dsink);
    const std::function<double()> l = [&] { return head_loss(h, q, k, v, dout); };
    std::vector<std::string> errors = {check_central_differences("dq", element_pointers(q), dq, l),
                                       check_central_differences("dk", element_pointers(k), dk, l),
                                       check_central_differences("dv", element_pointers(v), dv, l)};
    if (h.has_sink) errors.push_back(check_central_differences("dsink", {&h.sink}, {dsink}, l));
    else RC_ASSERT(dsink == 0.0);
    for (const std::string& e : errors)
      if (!e.empty()) RC_FAIL(e);
  }, kCases);
}

}  // namespace
}  // namespace props
