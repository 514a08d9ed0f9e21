// Numerical extremes: scores up to |S| ~ 1e4, all-equal scores, huge and tiny (subnormal) values,
// and non-finite inputs. Finite extremes must give finite results that agree with the oracle; a
// NaN or inf input may damage only the rows (and, in the backward, the key/value heads) that read
// it — every other element is bit-identical to a clean run. docs/reliability.md records what the
// damaged elements become.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "support.hpp"
#ifdef FLASHATTN_RELIABILITY_CPU
#include "flashattn/cpu.hpp"
#endif

namespace flashattn::reliability {
namespace {

using reference::Precision;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// A backend under test: forward and backward with the library's default configuration.
struct Impl {
  const char* name;
  std::function<void(const ForwardArgs&)> forward;
  std::function<void(const BackwardArgs&)> backward;
};

std::vector<Impl> impls() {
  std::vector<Impl> r = {{"reference", [](const ForwardArgs& a) { reference::forward(a); },
                          [](const BackwardArgs& a) { reference::backward(a); }}};
#ifdef FLASHATTN_RELIABILITY_CPU
  r.push_back({"cpu", [](const ForwardArgs& a) { cpu::forward(a); }, [](const BackwardArgs& a) { cpu::backward(a); }});
#endif
  return r;
}

// Sets every element of tensor w to f(b, s, h, x).
void fill(Problem& p, Which w, const std::function<float(int64_t, int64_t, int64_t, int64_t)>& f) {
  const Tensor t = p.view(w);
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t x = 0; x < t.dim; ++x) p.set(w, b, s, h, x, f(b, s, h, x));
}

// Scales every element of tensor w by c.
void scale_tensor(Problem& p, Which w, float c) {
  fill(p, w, [&](int64_t b, int64_t s, int64_t h, int64_t x) { return c * p.get(w, b, s, h, x); });
}

// Checks, for every backend, forward (out, lse) and backward (dq, dk, dv) against the oracle by
// the suite's one tolerance rule. At |S| ~ 1e4 a recomputing backward's P = exp(S − LSE) inherits
// the fp32 LSE's rounding (|LSE|·2^-24 relative, 6e-4 here), which the materialising naive oracle
// never sees: the rule's contract term (the oracle run on the given out and lse) covers it.
void check_against_oracle(Problem& p, const ForwardArgs& opt, bool backward) {
  const ForwardArgs fa = p.forward_args(opt);
  const BackwardArgs ba = p.backward_args(opt);
  for (const Impl& impl : impls()) {
    CAPTURE(std::string(impl.name));
    impl.forward(fa);
    CHECK(check_forward(fa) == "");
    if (!backward) continue;
    reference::forward(fa);
    impl.backward(ba);
    CHECK(check_backward(ba) == "");
  }
}

TEST_CASE("scores up to |S| ~ 1e4 stay finite and agree with the oracle") {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(t));
    Problem p({2, 9, 13, 2, 1, 16, t}, 1);
    ForwardArgs opt;
    opt.scale = 2000;  // |q·k| reaches ~5 here, so |S| reaches ~1e4
    opt.causal = true;
    const auto r = reference::forward_values(p.forward_args(opt));
    double largest = 0;
    for (double x : r.lse) largest = std::max(largest, std::fabs(x));
    CHECK(largest > 1000);  // the case really has scores of this size
    check_against_oracle(p, opt, true);
    opt.softcap = 30;  // capped: scores squashed into (-30, 30)
    check_against_oracle(p, opt, true);
  }
}

TEST_CASE("all-equal scores give the mean of the values") {
  for (DType t : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(t));
    Problem p({1, 4, 37, 2, 2, 8, t}, 2);
    fill(p, Which::q, [](int64_t, int64_t, int64_t, int64_t) { return 0.0f; });  // S = 0 everywhere
    const auto r = reference::forward_values(p.forward_args());
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t x = 0; x < 8; ++x) {
          double mean = 0;
          for (int64_t j = 0; j < 37; ++j) mean += p.get(Which::v, 0, j, h, x);
          CHECK(r.out[static_cast<size_t>((i * 2 + h) * 8 + x)] == doctest::Approx(mean / 37).epsilon(1e-12));
        }
    check_against_oracle(p, {}, true);
  }
}

TEST_CASE("huge values: V ~ 1e30 in f32, near the largest finite f16") {
  Problem p32({1, 6, 50, 2, 1, 8, DType::f32}, 3);
  scale_tensor(p32, Which::v, 1e30f);
  check_against_oracle(p32, {}, true);
  Problem p16({1, 6, 50, 2, 1, 8, DType::f16}, 4);
  scale_tensor(p16, Which::v, 65000.0f);  // |v| up to 65000 < 65504
  check_against_oracle(p16, {}, false);
}

TEST_CASE("tiny and subnormal values keep their magnitude") {
  Problem p32({1, 5, 40, 2, 2, 8, DType::f32}, 5);
  scale_tensor(p32, Which::v, 1e-30f);
  check_against_oracle(p32, {}, false);
  Problem p16({1, 5, 40, 2, 2, 8, DType::f16}, 6);
  scale_tensor(p16, Which::v, 1e-3f);  // values around 1e-3 and below: many f16 subnormals (< 6.1e-5)
  check_against_oracle(p16, {}, false);
  // Subnormal queries and keys: scores ~1e-76 round to 0 in fp32; attention is then uniform.
  Problem sub({1, 5, 40, 2, 2, 8, DType::f32}, 7);
  scale_tensor(sub, Which::q, FLT_MIN / 4);
  scale_tensor(sub, Which::k, FLT_MIN / 4);
  check_against_oracle(sub, {}, true);
  // bf16: subnormal values (< 2^-126, as in fp32) in v, and in q and k. The CPU's AVX3_BF16 target
  // (the default where the CPU has it) must not let vdpbf16ps read them as zero: such tiles take its
  // exact kernel (cpu/bf16-inl.h). 72 query rows per key head: above the decode path's 64
  // (cpu/decode.h), so these calls take the tiled forward that has the bf16 tile products.
  Problem b16({1, 72, 40, 2, 2, 8, DType::bf16}, 8);
  scale_tensor(b16, Which::v, 1e-38f);
  check_against_oracle(b16, {}, true);
  Problem b16qk({1, 72, 40, 2, 2, 8, DType::bf16}, 9);
  scale_tensor(b16qk, Which::q, FLT_MIN / 4);
  scale_tensor(b16qk, Which::k, FLT_MIN / 4);
  check_against_oracle(b16qk, {}, true);
  // Small but normal v (1e-30: products P·V fall below 2^-126 for P < 1e-8) likewise.
  Problem b16small({1, 72, 40, 2, 2, 8, DType::bf16}, 10);
  scale_tensor(b16small, Which::v, 1e-30f);
  check_against_oracle(b16small, {}, true);
  // Subnormal dout: the backward's bf16 products (dP = dO·Vᵀ, dV += Pᵀ·dO) must take the exact
  // kernel for it too, or dP and dv read as zero. Subnormal k alone: dQ += dS·K and S.
  Problem b16do({1, 72, 40, 2, 2, 8, DType::bf16}, 12);
  scale_tensor(b16do, Which::dout, FLT_MIN / 4);
  check_against_oracle(b16do, {}, true);
  Problem b16k({1, 72, 40, 2, 2, 8, DType::bf16}, 13);
  scale_tensor(b16k, Which::k, FLT_MIN / 4);
  check_against_oracle(b16k, {}, true);
}

// Poisons element (b, s, h, 0) of tensor w with `value` in a copy of a clean problem, runs `impl`
// forward and backward on both, and checks that every element of out, lse, dq, dk, dv outside the
// allowed region is bit-identical to the clean run. Returns the poisoned problem for further checks.
struct Damage {
  std::function<bool(int64_t b, int64_t i, int64_t h)> out_row;  // out and lse of (b, row, query head) may differ
  std::function<bool(int64_t b, int64_t i, int64_t h)> dq_row;   // dq of (b, row, query head) may differ
  std::function<bool(int64_t b, int64_t j, int64_t hk)> k_row;   // dk, dv of (b, key row, kv head) may differ
};

void check_contained(const Impl& impl, const Shape& s, const ForwardArgs& opt, Which w, int64_t b0, int64_t s0,
                     int64_t h0, float value, const Damage& allowed, const std::function<void(Problem&)>& inspect) {
  Problem clean(s, 11), poisoned(s, 11);
  poisoned.set(w, b0, s0, h0, 0, value);
  for (Problem* p : {&clean, &poisoned}) {
    impl.forward(p->forward_args(opt));
    impl.backward(p->backward_args(opt));
  }
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.nq; ++i) {
        CAPTURE(b);
        CAPTURE(h);
        CAPTURE(i);
        if (!allowed.out_row(b, i, h)) {
          const size_t li = static_cast<size_t>((b * s.hq + h) * s.nq + i);
          CHECK(float_bits(clean.lse[li]) == float_bits(poisoned.lse[li]));
          for (int64_t x = 0; x < s.d; ++x)
            CHECK(float_bits(clean.get(Which::out, b, i, h, x)) == float_bits(poisoned.get(Which::out, b, i, h, x)));
        }
        if (!allowed.dq_row(b, i, h))
          for (int64_t x = 0; x < s.d; ++x)
            CHECK(float_bits(clean.get(Which::dq, b, i, h, x)) == float_bits(poisoned.get(Which::dq, b, i, h, x)));
      }
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hk; ++h)
      for (int64_t j = 0; j < s.nk; ++j) {
        if (allowed.k_row(b, j, h)) continue;
        for (Which o : {Which::dk, Which::dv})
          for (int64_t x = 0; x < s.d; ++x) CHECK(float_bits(clean.get(o, b, j, h, x)) == float_bits(poisoned.get(o, b, j, h, x)));
      }
  inspect(poisoned);
}

// A problem with 2 sequences, 4 query heads in 2 groups, causal (so later keys are unseen by early rows).
const Shape kPoisonShape{2, 12, 12, 4, 2, 8, DType::f32};
ForwardArgs causal_opt() {
  ForwardArgs a;
  a.causal = true;
  return a;
}

TEST_CASE("a NaN or inf in one key or value row stays in its sequence and kv head group") {
  const Shape& s = kPoisonShape;
  const int64_t j0 = 5;  // poisoned row: batch 0, kv head 1 (query heads 2, 3); causal rows i >= 5 see it
  for (const Impl& impl : impls())
    for (Which w : {Which::k, Which::v})
      for (float value : {kNaN, kInf, -kInf}) {
        CAPTURE(std::string(impl.name));
        CAPTURE(w == Which::k ? "k" : "v");
        CAPTURE(value);
        // A NaN/inf key enters only through its score, which the mask replaces by −∞: forward rows
        // that do not see it are untouched. A NaN/inf value row is multiplied by P = 0 in rows
        // that do not see it, and 0·NaN = NaN: in both the oracle and the CPU backend those rows of
        // the same (sequence, kv head) group may be damaged too. The backward's dq = dS·K has the
        // same 0·NaN products. Other sequences and kv heads are untouched.
        const Damage allowed{[&](int64_t b, int64_t i, int64_t h) { return b == 0 && h / 2 == 1 && (w == Which::v || i >= j0); },
                             [&](int64_t b, int64_t, int64_t h) { return b == 0 && h / 2 == 1; },
                             [&](int64_t b, int64_t, int64_t hk) { return b == 0 && hk == 1; }};
        check_contained(impl, s, causal_opt(), w, 0, j0, 1, value, allowed, [](Problem&) {});
      }
}

// Checks that a NaN in k or v reaches every row that sees that key, and that a NaN query row is
// not mistaken for a row that sees no key (O = 0, LSE = −∞).
void check_nan_reaches_its_rows(const Impl& impl) {
  const Shape& s = kPoisonShape;
  const int64_t j0 = 5, i0 = 9;
  CAPTURE(std::string(impl.name));
  for (Which w : {Which::k, Which::v}) {
    CAPTURE(w == Which::k ? "k" : "v");
    Problem p(s, 11);
    p.set(w, 0, j0, 1, 0, kNaN);
    impl.forward(p.forward_args(causal_opt()));
    for (int64_t i = j0; i < s.nq; ++i)
      for (int64_t h : {2, 3}) {
        CAPTURE(i);
        CAPTURE(h);
        CHECK(std::isnan(p.get(Which::out, 0, i, h, 0)));
      }
  }
  Problem p(s, 11);
  p.set(Which::q, 1, i0, 3, 0, kNaN);
  impl.forward(p.forward_args(causal_opt()));
  const float lse = p.lse[static_cast<size_t>((1 * s.hq + 3) * s.nq + i0)];
  CAPTURE(lse);
  CHECK((std::isnan(p.get(Which::out, 1, i0, 3, 0)) && std::isnan(lse)));
}

TEST_CASE("reference: a NaN in q, k or v makes every row that reads it NaN (never a silent finite value)") {
  check_nan_reaches_its_rows(impls().front());
}

#ifdef FLASHATTN_RELIABILITY_CPU
TEST_CASE("cpu: a NaN in q, k or v makes every row that reads it NaN (never a silent finite value)") {
  check_nan_reaches_its_rows(impls().back());
}
#endif

// Runs forward and backward on p and returns every output's bytes (out, lse, dq, dk, dv).
std::vector<unsigned char> run_outputs(const Impl& impl, Problem& p, const ForwardArgs& opt) {
  impl.forward(p.forward_args(opt));
  impl.backward(p.backward_args(opt));
  return p.output_bytes();
}

TEST_CASE("NaN in keys past seqlens_k and in rows outside every varlen sequence changes nothing") {
  // An uninitialised KV cache may hold anything past each sequence's length.
  for (const Impl& impl : impls()) {
    CAPTURE(std::string(impl.name));
    const Shape s{2, 7, 10, 4, 2, 8, DType::f32};
    static const int32_t kLengths[] = {6, 10};
    ForwardArgs opt = causal_opt();
    opt.seqlens_k = kLengths;
    Problem clean(s, 21), poisoned(s, 21);
    for (Which w : {Which::k, Which::v})
      for (int64_t j = 6; j < 10; ++j)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t x = 0; x < 8; ++x) poisoned.set(w, 0, j, h, x, kNaN);
    CHECK(run_outputs(impl, clean, opt) == run_outputs(impl, poisoned, opt));

    // Varlen: the last 3 key rows belong to no sequence once varlen_batch drops the third one.
    Problem vclean({3, 4, 0}, {5, 2, 3}, 4, 2, 8, DType::bf16, 22), vpoisoned({3, 4, 0}, {5, 2, 3}, 4, 2, 8, DType::bf16, 22);
    for (Which w : {Which::k, Which::v})
      for (int64_t j = 7; j < 10; ++j)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t x = 0; x < 8; ++x) vpoisoned.set(w, 0, j, h, x, kNaN);
    for (Problem* p : {&vclean, &vpoisoned}) {
      p->cu_q.pop_back();
      p->cu_k.pop_back();
    }
    CHECK(run_outputs(impl, vclean, {}) == run_outputs(impl, vpoisoned, {}));
  }
}

TEST_CASE("a NaN or inf in one query row damages only that row") {
  const Shape& s = kPoisonShape;
  const int64_t i0 = 9;
  for (const Impl& impl : impls())
    for (float value : {kNaN, kInf}) {
      CAPTURE(std::string(impl.name));
      CAPTURE(value);
      // The query row's own outputs, and the key gradients of the kv head it reads.
      const Damage allowed{[&](int64_t b, int64_t i, int64_t h) { return b == 1 && h == 3 && i == i0; },
                           [&](int64_t b, int64_t i, int64_t h) { return b == 1 && h == 3 && i == i0; },
                           [&](int64_t b, int64_t, int64_t hk) { return b == 1 && hk == 1; }};
      check_contained(impl, s, causal_opt(), Which::q, 1, i0, 3, value, allowed, [](Problem&) {});
    }
}

TEST_CASE("a NaN in dout damages only that row's gradients and its kv head") {
  const Shape& s = kPoisonShape;
  for (const Impl& impl : impls()) {
    CAPTURE(std::string(impl.name));
    const Damage allowed{[](int64_t, int64_t, int64_t) { return false; },
                         [&](int64_t b, int64_t i, int64_t h) { return b == 0 && h == 0 && i == 4; },
                         [&](int64_t b, int64_t, int64_t hk) { return b == 0 && hk == 0; }};
    check_contained(impl, s, causal_opt(), Which::dout, 0, 4, 0, kNaN, allowed, [&](Problem& p) {
      CHECK(std::isnan(p.get(Which::dq, 0, 4, 0, 0)));
    });
  }
}

}  // namespace
}  // namespace flashattn::reliability
