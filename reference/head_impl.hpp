// The oracle's one-head passes, templated on the accumulation type so the same code is the fp64
// oracle (Acc = double, no rounding) and the naive same-precision algorithm (Acc = float, every
// intermediate rounded to the input dtype). Internal to reference/.
#pragma once

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/philox.hpp"
#include "flashattn/reference.hpp"

namespace flashattn::reference::detail {

// Rounds an intermediate to the dtype a naive implementation would store it in (or not at all),
// orders its sums: term t of a sum of n is term at(n, t) (in `order`), and in
// Precision::magnitude (`magnitude`) makes every term of an output's sum its absolute value.
enum class Order : uint8_t { forward, reversed, alternating };

template <class Acc>
struct Rounding {
  bool on = false;
  DType dtype = DType::f32;
  Order order = Order::forward;
  bool magnitude = false;
  bool ds_size = false;  // Precision::ds_magnitude (with magnitude): each dS term is |dS| itself
  Acc operator()(Acc x) const { return on ? static_cast<Acc>(round_to(dtype, static_cast<float>(x))) : x; }
  // Term t of a sum of n: t (forward), n − 1 − t (reversed), or 0, n − 1, 1, n − 2, … (alternating).
  int64_t at(int64_t n, int64_t t) const {
    switch (order) {
      case Order::reversed: return n - 1 - t;
      case Order::alternating: return t % 2 == 0 ? t / 2 : n - 1 - t / 2;
      case Order::forward: break;
    }
    return t;
  }
  Acc term(Acc x) const { return magnitude ? std::fabs(x) : x; }
};

// Materialised intermediates of one head: S after softcap/ALiBi/bias/mask, P, the capped scores
// (before ALiBi) that the softcap derivative needs, and with dropout the factor each P is kept with
// (Z/(1 − p): 0 or 1/(1 − p); 1 without dropout) and the dropped P̃ = P·Z/(1 − p) (= P without
// dropout); in Precision::magnitude also the size of each S_ij's terms (|scale|·Σ_x|q_ix k_jx| +
// |ALiBi bias_ij| + |bias_ij|).
template <class Acc>
struct HeadTiles {
  std::vector<Acc> s, capped, p, terms;  // [nq x nk] each (terms: magnitude only)
  std::vector<Acc> keep, pd;             // [nq x nk]: Z/(1 − p) and P̃ (apply_dropout)
};

// Pass 7, dropout: keep_ij = Z_ij/(1 − p) (flashattn/philox.hpp's decision for row i, key j of the
// head's stream) and P̃ = P·keep, rounded like every naive intermediate; without dropout keep = 1
// and P̃ = P exactly.
template <class Acc>
void apply_dropout(const Head& h, Rounding<Acc> rnd, HeadTiles<Acc>& t) {
  const int64_t nq = h.nq, nk = h.nk;
  t.keep.assign(nq * nk, Acc(1));
  t.pd = t.p;
  if (!(h.dropout_p > 0)) return;
  const uint32_t threshold = dropout_threshold(h.dropout_p);
  const Acc kept = rnd(static_cast<Acc>(1.0 / (1.0 - static_cast<double>(h.dropout_p))));
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j) {
      const bool z = dropout_keep(h.dropout_seed, h.dropout_stream, i, j, threshold);
      t.keep[i * nk + j] = z ? kept : Acc(0);
      t.pd[i * nk + j] = z ? rnd(t.p[i * nk + j] * kept) : Acc(0);
    }
}

// Passes 1-6: S = scale·Q Kᵀ, softcap, ALiBi, bias, mask, P = softmax(S); lse[i] = log Σ_j exp(S_ij)
// (+ exp(sink) with a sink: one more term of the denominator, no value; a row that sees no key then
// has lse = sink and P = 0).
// In Precision::magnitude lse[i] is instead the size of the terms LSE rounds at: the larger of
// |lse_i| and Σ_j P_ij (|scale|·Σ_x |q_ix k_jx| + |ALiBi bias_ij| + |bias_ij|) (δLSE = Σ_j P_ij δS_ij,
// and each S_ij is a sum of those terms; a −∞ bias adds no term: its P is 0).
template <class Acc>
void scores_and_probs(const Head& h, const Acc* q, const Acc* k, Rounding<Acc> rnd, HeadTiles<Acc>& t, Acc* lse) {
  const int64_t nq = h.nq, nk = h.nk, d = h.d;
  const Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  t.s.assign(nq * nk, 0);
  t.capped.assign(nq * nk, 0);
  t.p.assign(nq * nk, 0);
  t.terms.assign(rnd.magnitude ? nq * nk : 0, 0);
  const Acc scale = rnd(static_cast<Acc>(h.scale)), cap = static_cast<Acc>(h.softcap);
  const Acc slope = static_cast<Acc>(h.slope);
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t j = 0; j < nk; ++j) {
      // 1. S = (scale · q)·k — as a naive implementation scales q first (FlashAttention's own
      // reference does), so the rounded dot product stays in range where S does.
      Acc dot = 0;
      for (int64_t t = 0; t < d; ++t) {
        const int64_t x = rnd.at(d, t);
        dot += rnd(scale * q[i * d + x]) * k[j * d + x];
      }
      Acc s = rnd(dot);
      if (rnd.magnitude) {
        Acc a = 0;
        for (int64_t x = 0; x < d; ++x) a += std::fabs(scale * q[i * d + x] * k[j * d + x]);
        t.terms[i * nk + j] = a + std::fabs(slope * static_cast<Acc>(std::abs(i + h.mask.diag() - j)));
        if (h.bias && std::isfinite(h.bias[i * nk + j])) t.terms[i * nk + j] += std::fabs(static_cast<Acc>(h.bias[i * nk + j]));
      }
      // 2. soft-capping: S = c · tanh(S / c)
      if (cap > 0) s = rnd(cap * rnd(std::tanh(rnd(s / cap))));
      t.capped[i * nk + j] = s;
      // 3. ALiBi: S -= slope · |i + Nk − Nq − j|
      if (slope != 0) s = rnd(s - slope * static_cast<Acc>(std::abs(i + h.mask.diag() - j)));
      // 4. additive bias (its own dtype, exact in Acc); −∞ hides the key
      if (h.bias) s = rnd(s + static_cast<Acc>(h.bias[i * nk + j]));
      // 5. mask: keys the window rule or the block mask hides are −∞
      t.s[i * nk + j] = h.mask.visible(i, j) && (!h.blocks || h.blocks[i * nk + j]) ? s : kNegInf;
    }
    // 6. P = softmax(S) per row; a row with no visible key keeps P = 0 and LSE = −∞.
    // The row max propagates NaN (std::fmax would drop it): a NaN score makes the whole row NaN
    // rather than a plausible finite or empty-row result.
    Acc m = kNegInf;
    for (int64_t j = 0; j < nk; ++j) {
      const Acc sj = t.s[i * nk + j];
      if (sj > m || std::isnan(sj)) m = sj;
      if (std::isnan(m)) break;
    }
    const Acc sink = static_cast<Acc>(h.sink);
    if (h.has_sink && !std::isnan(m)) m = std::max(m, sink);
    if (m == kNegInf) {
      lse[i] = kNegInf;
      continue;
    }
    Acc sum = h.has_sink ? std::exp(sink - m) : Acc(0);
    for (int64_t u = 0; u < nk; ++u) sum += std::exp(t.s[i * nk + rnd.at(nk, u)] - m);
    for (int64_t j = 0; j < nk; ++j) t.p[i * nk + j] = rnd(std::exp(t.s[i * nk + j] - m) / sum);
    lse[i] = m + std::log(sum);
    if (rnd.magnitude) {
      Acc a = 0;
      for (int64_t j = 0; j < nk; ++j) a += t.p[i * nk + j] * t.terms[i * nk + j];
      lse[i] = std::max(std::fabs(lse[i]), a);
    }
  }
}

// Pass 8: O = P̃ V (the sink has no value: it adds nothing here).
template <class Acc>
void output(const Head& h, const HeadTiles<Acc>& t, const Acc* v, Rounding<Acc> rnd, Acc* out) {
  const int64_t dv = h.vdim();
  for (int64_t i = 0; i < h.nq; ++i)
    for (int64_t x = 0; x < dv; ++x) {
      Acc o = 0;
      for (int64_t u = 0; u < h.nk; ++u) {
        const int64_t j = rnd.at(h.nk, u);
        o += rnd.term(t.pd[i * h.nk + j] * v[j * dv + x]);
      }
      out[i * dv + x] = rnd(o);
    }
}

// Precision::magnitude's score_terms [nq x dv]: Σ_j P_ij·T_ij·|keep_ij·v_jx − O_ix|, with T_ij the
// size of S_ij's terms and O the exact output. Since ∂O_ix/∂S_ij = P_ij (keep_ij·v_jx − O_ix)
// (keep = Z/(1 − p), 1 without dropout), it is the effect on out of one rounding of every score at
// the size of its terms (in units of that rounding): what any implementation that sums S in a
// finite precision carries into out.
template <class Acc>
void score_rounding_effect(const Head& h, const HeadTiles<Acc>& t, const Acc* v, Acc* score_terms) {
  Rounding<Acc> exact;
  const int64_t e = h.vdim();
  std::vector<Acc> o(static_cast<size_t>(h.nq * e));
  output(h, t, v, exact, o.data());
  for (int64_t i = 0; i < h.nq; ++i)
    for (int64_t x = 0; x < e; ++x) {
      Acc sum = 0;
      for (int64_t j = 0; j < h.nk; ++j)
        if (t.p[i * h.nk + j] != 0)
          sum += t.p[i * h.nk + j] * t.terms[i * h.nk + j] * std::fabs(t.keep[i * h.nk + j] * v[j * e + x] - o[i * e + x]);
      score_terms[i * e + x] = sum;
    }
}

// score_terms (optional, Precision::magnitude only): see score_rounding_effect.
template <class Acc>
void forward_head(const Head& h, const Acc* q, const Acc* k, const Acc* v, Rounding<Acc> rnd, Acc* out, Acc* lse,
                  Acc* score_terms = nullptr) {
  HeadTiles<Acc> t;
  scores_and_probs(h, q, k, rnd, t, lse);
  apply_dropout(h, rnd, t);
  output(h, t, v, rnd, out);
  if (score_terms && rnd.magnitude) score_rounding_effect(h, t, v, score_terms);
}

// |dS| [nq x nk] exact: |P_ij (dP_ij − D_i)| before the softcap derivative, with dP = dO·vᵀ times
// dropout's keep factor and D from the exact output (0 where P is 0).
template <class Acc>
std::vector<Acc> exact_ds_size(const Head& h, const HeadTiles<Acc>& t, const Acc* v, const Acc* dout) {
  const int64_t nq = h.nq, nk = h.nk, e = h.vdim();
  Rounding<Acc> exact;
  std::vector<Acc> o(static_cast<size_t>(nq * e)), ds(static_cast<size_t>(nq * nk), 0);
  output(h, t, v, exact, o.data());
  for (int64_t i = 0; i < nq; ++i) {
    Acc delta = 0;
    for (int64_t x = 0; x < e; ++x) delta += dout[i * e + x] * o[i * e + x];
    for (int64_t j = 0; j < nk; ++j) {
      const Acc p = t.p[i * nk + j];
      if (p == 0) continue;
      Acc dp = 0;
      for (int64_t x = 0; x < e; ++x) dp += dout[i * e + x] * v[j * e + x];
      ds[i * nk + j] = std::fabs(p * (dp * t.keep[i * nk + j] - delta));
    }
  }
  return ds;
}

// Precision::magnitude's share of dS_ij from the rounding of the scores [nq x nk]: the largest
// first-order move of dS_ij = P_ij (dP_ij − D_i) when every S_il moves by at most T_il, the size of
// its terms (dS in units of that rounding, as score_rounding_effect is for out). With
// s̄_i = Σ_l P_il δS_il, δP_ij = P_ij (δS_ij − s̄_i) and δD_i = Σ_l δP_il dP_il, so
//   δdS_ij = dS_ij (δS_ij − s̄_i) − P_ij Σ_l dS_il (δS_il − s̄_i),
// at most |dS_ij| (T_ij + A_i) + P_ij (B_i + C_i A_i) with A_i = Σ_l P_il T_il, B_i = Σ_l |dS_il| T_il,
// C_i = Σ_l |dS_il| (exact_ds_size's |dS|).
template <class Acc>
std::vector<Acc> score_rounding_ds(const Head& h, const HeadTiles<Acc>& t, const std::vector<Acc>& ds) {
  const int64_t nq = h.nq, nk = h.nk;
  std::vector<Acc> r(ds.size(), 0);
  for (int64_t i = 0; i < nq; ++i) {
    Acc a = 0, b = 0, c = 0;
    for (int64_t j = 0; j < nk; ++j) {
      a += t.p[i * nk + j] * t.terms[i * nk + j];
      b += ds[i * nk + j] * t.terms[i * nk + j];
      c += ds[i * nk + j];
    }
    for (int64_t j = 0; j < nk; ++j)
      if (t.p[i * nk + j] != 0) r[i * nk + j] = ds[i * nk + j] * (t.terms[i * nk + j] + a) + t.p[i * nk + j] * (b + c * a);
  }
  return r;
}

// Backward of one head with P materialised. dq, dk, dv are overwritten.
//
// `given_out` and `given_lse` (dense [nq x d] and [nq], or null): the forward results the call was
// given. With given_out, D is computed from it instead of from the recomputed O; with given_lse,
// P = exp(S − lse_given) (not renormalised; lse = −∞: the row sees no key) instead of the softmax.
// In fp64 that is the exact gradient of the documented formulas applied to the inputs as given:
// what any implementation that takes out and lse as given computes before its own rounding.
// dbias (optional, [nq x nk]) receives d loss / d biased score = P∘(dP − D), before the softcap
// derivative.
template <class Acc>
void backward_head(const Head& h, const Acc* q, const Acc* k, const Acc* v, const Acc* dout, Rounding<Acc> rnd,
                   Acc* dq, Acc* dk, Acc* dv, const Acc* given_out = nullptr, const Acc* given_lse = nullptr,
                   Acc* dsink = nullptr, Acc* dbias = nullptr) {
  const int64_t nq = h.nq, nk = h.nk, d = h.d, e = h.vdim();  // e: the value head dim
  HeadTiles<Acc> t;
  std::vector<Acc> lse(nq), out(nq * e), delta(nq), ds(nq * nk);
  scores_and_probs(h, q, k, rnd, t, lse.data());
  if (given_lse)
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) {
        const Acc s = t.s[i * nk + j];
        t.p[i * nk + j] = std::isinf(given_lse[i]) || s == -std::numeric_limits<Acc>::infinity()
                              ? Acc(0)
                              : rnd(std::exp(s - given_lse[i]));
      }
  apply_dropout(h, rnd, t);
  if (given_out)
    std::copy(given_out, given_out + nq * e, out.begin());
  else
    output(h, t, v, rnd, out.data());
  // 1. D = rowsum(dO ∘ O)
  for (int64_t i = 0; i < nq; ++i) {
    Acc s = 0;
    for (int64_t u = 0; u < e; ++u) s += rnd.term(dout[i * e + rnd.at(e, u)] * out[i * e + rnd.at(e, u)]);
    delta[i] = s;
  }
  // The sink: d loss / d sink = Σ_i dP_sink,i·P_sink,i − P_sink,i·D_i = −Σ_i P_sink,i·D_i (its value
  // is zero, so dP_sink = 0), with P_sink,i = exp(sink − LSE_i).
  if (dsink) {
    Acc s = 0;
    const Acc* l = given_lse ? given_lse : lse.data();
    for (int64_t u = 0; u < nq; ++u) {
      const int64_t i = rnd.at(nq, u);
      if (h.has_sink && !std::isinf(l[i])) s += rnd.term(-std::exp(static_cast<Acc>(h.sink) - l[i]) * delta[i]);
    }
    *dsink = s;
  }
  const std::vector<Acc> ds_size = rnd.magnitude ? exact_ds_size(h, t, v, dout) : std::vector<Acc>();
  const std::vector<Acc> score_ds = rnd.magnitude && !rnd.ds_size ? score_rounding_ds(h, t, ds_size) : std::vector<Acc>();
  // 2. dV = P̃ᵀ dO
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t x = 0; x < e; ++x) {
      Acc s = 0;
      for (int64_t u = 0; u < nq; ++u) s += rnd.term(t.pd[rnd.at(nq, u) * nk + j] * dout[rnd.at(nq, u) * e + x]);
      dv[j * e + x] = rnd(s);
    }
  // 3. dP = (dO Vᵀ)∘keep, 4. dS = P ∘ (dP − D) (the bias's gradient), times the softcap derivative
  // 1 − tanh² = 1 − (capped/c)².
  const Acc cap = static_cast<Acc>(h.softcap);
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j) {
      const Acc p = t.p[i * nk + j];
      if (p == 0) {
        ds[i * nk + j] = 0;
        if (dbias) dbias[i * nk + j] = 0;
        continue;
      }
      Acc dp = 0;
      for (int64_t u = 0; u < e; ++u) dp += rnd.term(dout[i * e + rnd.at(e, u)] * v[j * e + rnd.at(e, u)]);
      const Acc keep = t.keep[i * nk + j];
      Acc g = rnd.ds_size     ? ds_size[i * nk + j]
              : rnd.magnitude ? p * (dp * keep + delta[i]) + score_ds[i * nk + j]
                              : rnd(p * (rnd(rnd(dp) * keep) - delta[i]));
      if (dbias) dbias[i * nk + j] = g;
      if (cap > 0) {
        const Acc th = t.capped[i * nk + j] / cap;
        // Precision::magnitude: 1 − t² + 2t², the derivative plus what one rounding of t moves it
        // by (2t² units): where |S| nears the cap, 1 − t² cancels and t's rounding dominates it.
        g = rnd(g * (rnd.magnitude && !rnd.ds_size ? 1 + th * th : 1 - th * th));
      }
      ds[i * nk + j] = g;
    }
  // 5. dQ = scale · dS K, 6. dK = scale · dSᵀ Q
  const Acc scale = rnd(static_cast<Acc>(h.scale));
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t x = 0; x < d; ++x) {
      Acc s = 0;
      for (int64_t u = 0; u < nk; ++u) s += rnd.term(ds[i * nk + rnd.at(nk, u)] * k[rnd.at(nk, u) * d + x]);
      dq[i * d + x] = rnd(rnd.term(scale) * rnd(s));
    }
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t x = 0; x < d; ++x) {
      Acc s = 0;
      for (int64_t u = 0; u < nq; ++u) s += rnd.term(ds[rnd.at(nq, u) * nk + j] * q[rnd.at(nq, u) * d + x]);
      dk[j * d + x] = rnd(rnd.term(scale) * rnd(s));
    }
}

}  // namespace flashattn::reference::detail
