// Odd sizes as explicit regression tests: one query or one key, 0-length varlen sequences, head dim
// 1 and odd, seqlen_k ≫ seqlen_q and the reverse. The oracle is checked against a direct per-row
// computation written here; the CPU backend (when built) against the oracle, on every SIMD target
// and with tiles small enough that the shapes cross tile edges.
#include <doctest/doctest.h>

#include <cmath>
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
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Returns out row (b, i, h) and its LSE computed directly from the definition (no ALiBi, no
// softcap; causal and window options from `a`), reading the problem's inputs.
std::vector<double> direct_row(Problem& p, const ForwardArgs& a, int64_t b, int64_t i, int64_t h, double* lse) {
  const Shape& s = p.shape;
  const int64_t hk = h / (s.hq / s.hk);
  const Mask m = Mask::make(s.nq, s.nk, a.causal, a.window_left, a.window_right, a.diagonal_offset);
  const double scale = effective_scale(a);
  std::vector<double> score(static_cast<size_t>(s.nk), kNegInf);
  double mx = kNegInf;
  for (int64_t j = 0; j < s.nk; ++j) {
    if (!m.visible(i, j)) continue;
    double dot = 0;
    for (int64_t x = 0; x < s.d; ++x) dot += double{p.get(Which::q, b, i, h, x)} * p.get(Which::k, b, j, hk, x);
    score[j] = scale * dot;
    mx = std::max(mx, score[j]);
  }
  std::vector<double> out(static_cast<size_t>(s.d), 0.0);
  *lse = kNegInf;
  if (mx == kNegInf) return out;
  double sum = 0;
  for (int64_t j = 0; j < s.nk; ++j) sum += std::exp(score[j] - mx);
  for (int64_t j = 0; j < s.nk; ++j)
    for (int64_t x = 0; x < s.d; ++x) out[x] += std::exp(score[j] - mx) / sum * p.get(Which::v, b, j, hk, x);
  *lse = mx + std::log(sum);
  return out;
}

// Checks the oracle's forward on p (options from `opt`) row by row against direct_row.
void check_oracle_forward(Problem& p, const ForwardArgs& opt) {
  const ForwardArgs a = p.forward_args(opt);
  const reference::ForwardValues r = reference::forward_values(a);
  const Shape& s = p.shape;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.nq; ++i)
      for (int64_t h = 0; h < s.hq; ++h) {
        double lse = 0;
        const std::vector<double> want = direct_row(p, a, b, i, h, &lse);
        const double got_lse = r.lse[static_cast<size_t>((b * s.hq + h) * s.nq + i)];
        if (std::isinf(lse)) {
          CHECK(got_lse == lse);
        } else {
          CHECK(got_lse == doctest::Approx(lse).epsilon(1e-12));
        }
        for (int64_t x = 0; x < s.d; ++x)
          CHECK(r.out[static_cast<size_t>(((b * s.nq + i) * s.hq + h) * s.d + x)] == doctest::Approx(want[x]).epsilon(1e-12));
      }
}

#ifdef FLASHATTN_RELIABILITY_CPU
// Tile sizes that make small shapes cross tile edges, and the library's own choice.
const cpu::Config kTilings[] = {{0, 0, 0, 0}, {1, 1, 1, 0}, {3, 5, 2, 0}, {16, 16, 2, 0}};

// Checks cpu::forward and cpu::backward on p against the oracle, on every SIMD target and tiling.
void check_cpu(Problem& p, const ForwardArgs& opt) {
  const ForwardArgs fa = p.forward_args(opt);
  const BackwardArgs ba = p.backward_args(opt);
  for (const cpu::Target& target : cpu::targets())
    for (cpu::Config cfg : kTilings) {
      cfg.target = target.bit;
      CAPTURE(target.name);
      CAPTURE(cfg.block_q);
      CAPTURE(cfg.block_k);
      cpu::forward(fa, cfg);
      CHECK(check_forward(fa) == "");
      reference::forward(fa);  // the oracle's out and lse, as the backward expects them
      cpu::backward(ba, cfg);
      CHECK(check_backward(ba) == "");
    }
}
#endif

// Runs the oracle check and (when built) the CPU check for one shape and set of options.
void check_shape(const Shape& s, const ForwardArgs& opt, uint32_t seed) {
  Problem p(s, seed);
  check_oracle_forward(p, opt);
#ifdef FLASHATTN_RELIABILITY_CPU
  check_cpu(p, opt);
#endif
}

ForwardArgs causal() {
  ForwardArgs a;
  a.causal = true;
  return a;
}

TEST_CASE("one query and one key") {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(t));
    check_shape({2, 1, 1, 4, 2, 8, t}, {}, 1);
    check_shape({2, 1, 1, 4, 2, 8, t}, causal(), 2);
    // With one key every row's output is that key's value, bit for bit (P = 1 exactly).
    Problem p({1, 5, 1, 2, 1, 3, t}, 3);
    const ForwardArgs a = p.forward_args();
    reference::forward(a);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t x = 0; x < 3; ++x) CHECK(p.get(Which::out, 0, i, h, x) == p.get(Which::v, 0, 0, 0, x));
  }
}

TEST_CASE("head dim 1 and odd head dims") {
  for (int64_t d : {1, 3, 5, 7, 17, 33, 65}) {
    CAPTURE(d);
    check_shape({2, 7, 9, 2, 1, d, DType::f32}, {}, 10 + static_cast<uint32_t>(d));
    check_shape({1, 9, 7, 3, 3, d, DType::bf16}, causal(), 20 + static_cast<uint32_t>(d));
    check_shape({1, 6, 6, 2, 2, d, DType::f16}, causal(), 30 + static_cast<uint32_t>(d));
  }
}

TEST_CASE("seqlen_k much longer than seqlen_q (decode-like, bottom-right aligned)") {
  check_shape({2, 1, 517, 2, 1, 16, DType::f32}, causal(), 40);
  check_shape({1, 3, 700, 4, 2, 8, DType::bf16}, causal(), 41);
  ForwardArgs window = causal();
  window.window_left = 37;
  check_shape({1, 5, 600, 2, 2, 8, DType::f16}, window, 42);
  check_shape({1, 2, 333, 1, 1, 5, DType::f32}, {}, 43);
}

#ifdef FLASHATTN_RELIABILITY_CPU
// A size-1 dimension's stride is never used, so validation leaves it free: the fuzzer (full mode,
// UBSan) found the CPU decode path multiplying a key/value view's head stride of INT64_MAX by the
// element size with one key/value head. The call must equal the same call with an ordinary stride.
TEST_CASE("a key/value head stride of INT64_MAX with one key/value head (decode path)") {
  const int64_t nq = 1, nk = 40, hq = 4, d = 16;
  std::vector<float> q(nq * hq * d), k(nk * d), v(nk * d), out(nq * hq * d), want(nq * hq * d), lse(hq), want_lse(hq);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11f * static_cast<float>(i)), v[i] = std::sin(0.23f * static_cast<float>(i));
  ForwardArgs a;
  a.q = bshd(static_cast<const void*>(q.data()), DType::f32, 1, nq, hq, d);
  a.k = bshd(static_cast<const void*>(k.data()), DType::f32, 1, nk, 1, d);
  a.v = bshd(static_cast<const void*>(v.data()), DType::f32, 1, nk, 1, d);
  a.out = bshd(static_cast<void*>(want.data()), DType::f32, 1, nq, hq, d);
  a.lse = want_lse.data();
  cpu::forward(a);
  a.k.stride_head = a.v.stride_head = std::numeric_limits<int64_t>::max();
  a.out = bshd(static_cast<void*>(out.data()), DType::f32, 1, nq, hq, d);
  a.lse = lse.data();
  cpu::forward(a);
  CHECK(out == want);
  CHECK(lse == want_lse);
}
#endif

TEST_CASE("seqlen_q much longer than seqlen_k: rows above the diagonal see no key") {
  Shape s{1, 400, 3, 2, 1, 8, DType::f32};
  check_shape(s, causal(), 50);
  check_shape({2, 517, 1, 1, 1, 3, DType::bf16}, causal(), 51);
  check_shape({1, 300, 7, 2, 2, 16, DType::f16}, {}, 52);
  // Causal, Nq = 400, Nk = 3: row i sees keys j <= i - 397; rows 0..396 see none and give O = 0,
  // LSE = −∞ exactly.
  Problem p(s, 53);
  const ForwardArgs a = p.forward_args(causal());
  reference::forward(a);
  for (int64_t i = 0; i < 397; ++i)
    for (int64_t h = 0; h < 2; ++h) {
      CHECK(p.lse[static_cast<size_t>(h * 400 + i)] == -std::numeric_limits<float>::infinity());
      for (int64_t x = 0; x < 8; ++x) CHECK(p.get(Which::out, 0, i, h, x) == 0.0f);
    }
}

// Checks a varlen call against one call per sequence on its own (batch 1), for the oracle exactly
// and (when built) for the CPU backend within tolerance of the oracle.
void check_varlen(const std::vector<int32_t>& lq, const std::vector<int32_t>& lk, DType t, const ForwardArgs& opt) {
  const int64_t hq = 4, hk = 2, d = 8;
  Problem packed(lq, lk, hq, hk, d, t, 60);
  const BackwardArgs pa = packed.backward_args(opt);
  reference::forward(packed.forward_args(opt));
  const auto packed_grads = reference::backward_values(pa);
  for (size_t s = 0; s < lq.size(); ++s) {
    CAPTURE(s);
    Problem one({1, lq[s], lk[s], hq, hk, d, t}, 0);
    // Copy sequence s's rows into the single problem.
    for (Which w : {Which::q, Which::k, Which::v, Which::dout}) {
      const bool key_side = w == Which::k || w == Which::v;
      const int64_t start = key_side ? packed.cu_k[s] : packed.cu_q[s], rows = key_side ? lk[s] : lq[s];
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t h = 0; h < (key_side ? hk : hq); ++h)
          for (int64_t x = 0; x < d; ++x) one.set(w, 0, i, h, x, packed.get(w, 0, start + i, h, x));
    }
    const BackwardArgs oa = one.backward_args(opt);
    reference::forward(one.forward_args(opt));
    const auto one_grads = reference::backward_values(oa);
    for (int64_t i = 0; i < lq[s]; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        CHECK(packed.lse[static_cast<size_t>(h * packed.shape.nq + packed.cu_q[s] + i)] ==
              one.lse[static_cast<size_t>(h * lq[s] + i)]);
        for (int64_t x = 0; x < d; ++x) {
          CHECK(packed.get(Which::out, 0, packed.cu_q[s] + i, h, x) == one.get(Which::out, 0, i, h, x));
          CHECK(packed_grads.dq[static_cast<size_t>(((packed.cu_q[s] + i) * hq + h) * d + x)] ==
                one_grads.dq[static_cast<size_t>((i * hq + h) * d + x)]);
        }
      }
    for (int64_t j = 0; j < lk[s]; ++j)
      for (int64_t h = 0; h < hk; ++h)
        for (int64_t x = 0; x < d; ++x) {
          const size_t pi = static_cast<size_t>(((packed.cu_k[s] + j) * hk + h) * d + x);
          const size_t oi = static_cast<size_t>((j * hk + h) * d + x);
          CHECK(packed_grads.dk[pi] == one_grads.dk[oi]);
          CHECK(packed_grads.dv[pi] == one_grads.dv[oi]);
          // A sequence without queries gives its keys exactly zero gradient.
          if (lq[s] == 0) CHECK((packed_grads.dk[pi] == 0 && packed_grads.dv[pi] == 0));
        }
  }
#ifdef FLASHATTN_RELIABILITY_CPU
  check_cpu(packed, opt);
#endif
}

TEST_CASE("varlen batches with 0-length sequences") {
  for (DType t : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(t));
    check_varlen({3, 0, 2, 0, 5}, {4, 2, 0, 0, 5}, t, {});
    check_varlen({0, 1, 0}, {0, 0, 3}, t, causal());
    check_varlen({0, 0}, {0, 0}, t, {});
    check_varlen({1, 7, 0, 2}, {9, 1, 5, 0}, t, causal());
  }
}

}  // namespace
}  // namespace flashattn::reliability
