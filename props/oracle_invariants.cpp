// Properties of the oracle on whole calls: output rows are convex combinations of the visible
// value rows; rows that see no key give O = 0, LSE = -inf and zero gradients, never NaN; results do
// not depend on the memory layout.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <doctest/doctest.h>

#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/check.hpp"
#include "props/instance.hpp"
#include "props/oracle_support.hpp"

namespace props {
namespace {

using flashattn::reference::Precision;

constexpr int kCases = 100;
// fp64 rounding allowance for the convexity bounds, relative to max|V|.
constexpr double kConvexSlack = 1e-12;

}  // namespace

TEST_CASE("oracle rows are convex combinations of the visible value rows") {
  check("oracle/convex", [] {
    const Case c = *gen_case();
    Instance inst(c);
    const flashattn::ForwardArgs a = inst.forward_args();
    const auto fv = flashattn::reference::forward_values(a, Precision::fp64);
    const Dense v = dense_of(inst.v());
    double vmax = 0;
    for (double x : v.data) vmax = std::max(vmax, std::fabs(x));
    const double slack = kConvexSlack * std::max(1.0, vmax);
    const int64_t hq = a.q.heads, d = a.q.dim;
    for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
      const flashattn::Sequence seq = flashattn::sequence(a, s);
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t hk = flashattn::kv_head(h, hq, a.k.heads);
        for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
          const int64_t row = ((seq.batch * a.q.seq + seq.q_start + i) * hq + h) * d;
          for (int64_t x = 0; x < d; ++x) {
            double lo = std::numeric_limits<double>::infinity(), hi = -lo;
            for (int64_t j = seq.mask.key_begin(i); j < seq.mask.key_end(i); ++j) {
              lo = std::min(lo, v.at(seq.batch, seq.k_start + j, hk, x));
              hi = std::max(hi, v.at(seq.batch, seq.k_start + j, hk, x));
            }
            const double o = fv.out[size_t(row + x)];
            if (seq.mask.row_empty(i)) lo = hi = 0;  // no visible key: O = 0
            if (!(o >= lo - slack && o <= hi + slack)) {
              std::ostringstream os;
              os.precision(17);
              os << "sequence " << s << " head " << h << " row " << i << " column " << x << ": O = " << o
                 << " is outside [" << lo << ", " << hi << "] of the visible V rows";
              RC_FAIL(os.str());
            }
          }
        }
      }
    }
  }, kCases);
}

TEST_CASE("oracle rows that see no key give O = 0, LSE = -inf, zero gradients, no NaN") {
  // Key lengths always on (0 included) and any window: empty rows and unseen keys are common.
  CaseSpace space;
  space.key_lengths = 1;
  check("oracle/empty-rows", [space] {
    const Case c = *gen_case(space);
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    for (Precision p : {Precision::fp64, Precision::same_as_input, Precision::same_as_input_reversed,
                        Precision::same_as_input_alternating}) {
      const char* mode = p == Precision::fp64                    ? "fp64"
                         : p == Precision::same_as_input          ? "same_as_input"
                         : p == Precision::same_as_input_reversed ? "same_as_input_reversed"
                                                                  : "same_as_input_alternating";
      const auto fv = flashattn::reference::forward_values(a, p);
      const auto bv = flashattn::reference::backward_values(a, p);
      for (const std::string& e : {no_nan(fv.out, "out"), no_nan(fv.lse, "lse"), no_nan(bv.dq, "dq"),
                                   no_nan(bv.dk, "dk"), no_nan(bv.dv, "dv")})
        if (!e.empty()) RC_FAIL(std::string(mode) + ": " + e);
      const int64_t hq = a.q.heads, d = a.q.dim;
      for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
        const flashattn::Sequence seq = flashattn::sequence(a, s);
        std::vector<bool> seen(size_t(seq.k_rows), false);
        for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
          for (int64_t j = seq.mask.key_begin(i); j < seq.mask.key_end(i); ++j) seen[size_t(j)] = true;
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
            if (!seq.mask.row_empty(i)) continue;
            const int64_t row = ((seq.batch * a.q.seq + seq.q_start + i) * hq + h) * d;
            RC_ASSERT(fv.lse[size_t(flashattn::lse_index(a, seq, h, i))] == -std::numeric_limits<double>::infinity());
            for (int64_t x = 0; x < d; ++x) {
              RC_ASSERT(fv.out[size_t(row + x)] == 0.0);
              RC_ASSERT(bv.dq[size_t(row + x)] == 0.0);
            }
          }
        for (int64_t hk = 0; hk < a.k.heads; ++hk)
          for (int64_t j = 0; j < seq.k_rows; ++j) {
            if (seen[size_t(j)]) continue;
            const int64_t row = ((seq.batch * a.k.seq + seq.k_start + j) * a.k.heads + hk) * d;
            for (int64_t x = 0; x < d; ++x) {
              RC_ASSERT(bv.dk[size_t(row + x)] == 0.0);
              RC_ASSERT(bv.dv[size_t(row + x)] == 0.0);
            }
          }
      }
    }
  }, kCases);
}

TEST_CASE("oracle results do not depend on the layout (bshd, bhsd, padded, offset)") {
  check("oracle/layout", [] {
    const Case c = *gen_case();
    Case other = c;
    other.layout = *rc::gen::elementOf(std::vector<Layout>{Layout::bshd, Layout::bhsd, Layout::padded});
    other.offset = *rc::gen::arbitrary<bool>();
    Instance x(c), y(other);
    const flashattn::BackwardArgs ax = x.backward_args(), ay = y.backward_args();
    for (Precision p : {Precision::fp64, Precision::same_as_input, Precision::same_as_input_reversed,
                        Precision::same_as_input_alternating}) {
      const auto fx = flashattn::reference::forward_values(ax, p), fy = flashattn::reference::forward_values(ay, p);
      const auto bx = flashattn::reference::backward_values(ax, p), by = flashattn::reference::backward_values(ay, p);
      // Same values in the same order: the results must be bitwise equal.
      require(close(fy.out, fx.out, 0, "out"));
      require(close(fy.lse, fx.lse, 0, "lse"));
      require(close(by.dq, bx.dq, 0, "dq"));
      require(close(by.dk, bx.dk, 0, "dk"));
      require(close(by.dv, bx.dv, 0, "dv"));
    }
  }, kCases / 2);
}

// Returns the first index where |value| exceeds its magnitude (beyond fp64 rounding), or -1.
int64_t first_above(const std::vector<double>& value, const std::vector<double>& magnitude) {
  for (size_t e = 0; e < value.size(); ++e) {
    if (!std::isfinite(value[e])) continue;
    if (!(std::fabs(value[e]) <= magnitude[e] * (1 + kConvexSlack) + 1e-300)) return static_cast<int64_t>(e);
  }
  return -1;
}

TEST_CASE("oracle magnitudes bound the values, and equal them for one visible key") {
  // Precision::magnitude is what the rule's floor (out, dv) and fp32 dS term (dq, dk) scale with:
  // |Σ t| <= Σ|t| for every output,
  // and with one key per row (no sum to cancel) out's magnitude is |out| itself.
  check("oracle/magnitude", [] {
    const Case c = *gen_case();
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    const auto fv = flashattn::reference::forward_values(a, Precision::fp64);
    const auto fm = flashattn::reference::forward_values(a, Precision::magnitude);
    const auto bv = flashattn::reference::backward_values(a, Precision::fp64);
    const auto bm = flashattn::reference::backward_values(a, Precision::magnitude);
    const std::pair<const char*, int64_t> checks[] = {{"out", first_above(fv.out, fm.out)},
                                                      {"dq", first_above(bv.dq, bm.dq)},
                                                      {"dk", first_above(bv.dk, bm.dk)},
                                                      {"dv", first_above(bv.dv, bm.dv)}};
    for (const auto& [what, e] : checks) {
      if (e >= 0) RC_FAIL(std::string(what) + " exceeds its magnitude at dense index " + std::to_string(e));
    }
    if (c.seqlen_k == 1) {  // every row sees at most one key
      for (size_t e = 0; e < fv.out.size(); ++e)
        RC_ASSERT(std::fabs(std::fabs(fv.out[e]) - fm.out[e]) <= kConvexSlack * (fm.out[e] + 1e-300));
    }
  }, kCases);
}

TEST_CASE("oracle: the naive precisions sum in forward, reversed and alternating-ends order") {
  // One query row, four keys with equal scores (q = 0: P = 1/4 exactly), d = 1: out is the fp32
  // sum of v_j / 4 in the precision's order. v = 1, 2^-24, -1, 2^-23 rounds differently in each:
  // forward (0, 1, 2, 3) 2^-23, reversed (3, 2, 1, 0) 3·2^-24 (exact), alternating ends
  // (0, 3, 1, 2) 2^-22 (1 + 2^-23 + 2^-24 ties to even upwards). The tolerance rule's naive part is
  // the worst of the three, so each must be the order it names.
  const float q[1] = {0.0f}, k[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const float v[4] = {1.0f, std::ldexp(1.0f, -24), -1.0f, std::ldexp(1.0f, -23)};
  flashattn::ForwardArgs a;
  a.q = flashattn::bshd(q, flashattn::DType::f32, 1, 1, 1, 1);
  a.k = flashattn::bshd(k, flashattn::DType::f32, 1, 4, 1, 1);
  a.v = flashattn::bshd(v, flashattn::DType::f32, 1, 4, 1, 1);
  const std::pair<Precision, double> expected[] = {{Precision::same_as_input, std::ldexp(1.0, -23) / 4},
                                                   {Precision::same_as_input_reversed, 3 * std::ldexp(1.0, -24) / 4},
                                                   {Precision::same_as_input_alternating, std::ldexp(1.0, -22) / 4},
                                                   {Precision::fp64, 3 * std::ldexp(1.0, -24) / 4}};
  for (const auto& [p, out] : expected) {
    INFO("precision " << static_cast<int>(p));
    CHECK(flashattn::reference::forward_values(a, p).out.at(0) == out);
  }
}

}  // namespace props
