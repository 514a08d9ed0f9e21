// flashattn::reference — the scalar oracle. Materialises S and P, accumulates in fp64.
//
// Slow by design (O(N²) memory per head); its job is to be obviously right. The same_as_input
// precision rounds S, P, O (and the backward's intermediates) to the input dtype with fp32
// accumulation, like a naive low-precision implementation; it exists to set test tolerances.
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/args.hpp"
#include "flashattn/mask.hpp"

namespace flashattn::reference {

enum class Precision : uint8_t {
  fp64,                    // fp64 accumulation and intermediates (the oracle)
  same_as_input,           // fp32 accumulation, intermediates rounded to the input dtype
  same_as_input_reversed,  // the same with every sum taken in reverse order: another, equally
                           // naive implementation (tests take the worst of the orders as the
                           // error of "the naive algorithm", not one lucky rounding of it)
  same_as_input_alternating,  // the same with every sum taken from both ends alternately (terms
                              // 0, n−1, 1, n−2, …): a third equally naive order
  magnitude,               // fp64, but every sum of the outputs accumulates the absolute values of
                           // its terms (out = P|V|, D = Σ|dO∘O|, dP = |dO||V|ᵀ, dS = P∘(dP + D)
                           // + R (the largest first-order move of dS when each S_ij moves by the
                           // size T_ij of its terms, below), times (1 − t² + 2t²) with soft-capping
                           // (t = tanh(S/cap): the derivative plus the 2t² units one rounding of t
                           // moves it by),
                           // dq = |scale|·dS|K|, dk = |scale|·dSᵀ|Q|, dv = Pᵀ|dO|): per element,
                           // the size of the terms whose rounding it carries, where a sum that
                           // cancels is far smaller than its terms (tests scale their floor with
                           // it). P itself is the fp64 oracle's; lse is the size of the terms LSE
                           // rounds at: max(|lse|, Σ_j P_ij T_ij), T_ij = |scale|·Σ_x|q_ix k_jx|
                           // + |ALiBi bias_ij|; score_terms (below) uses the same T_ij.
  fp32,                    // fp32 accumulation and intermediates, inputs as stored: nothing is
                           // rounded to 16 bits (for f32 inputs the same as same_as_input). Tests
                           // take their naive LSE from it: LSE is an fp32 output whose error comes
                           // from the inputs only through S, which needs no 16-bit rounding
  fp32_reversed,           // the same with every sum reversed
  fp32_alternating,        // the same with every sum taken from both ends alternately
  fp64_given_out,          // backward only: fp64, but D = Σ dout∘out from the call's `out` as given
                           // (rounded to its dtype) instead of the exact O
  fp64_given,              // backward only: fp64 with D from the given `out` and P = exp(S − lse)
                           // from the given fp32 `lse`: the exact result of the documented formulas
                           // on the inputs as the call holds them. Its distance to fp64 is the error
                           // that taking out and lse as given makes unavoidable (tests add it).
  ds_magnitude,            // backward only: fp64, but dq = |scale|·|dS|·|K|, dk = |scale|·|dS|ᵀ·|Q| and
                           // dbias = Σ|dS| with the exact dS = P∘(dP − D)∘(1 − t²) (dv is P|dO|, as in
                           // magnitude): the size of the sums that dS, once rounded to the input
                           // dtype (as a 16-bit tile product and the naive model round it), feeds.
};

// One (batch, head) problem, dense row-major fp64: q [nq x d], k [nk x d], v [nk x dv].
struct Head {
  int64_t nq = 0, nk = 0, d = 0;
  int64_t dv = 0;                            // value head dim; 0: d
  double scale = 1, softcap = 0, slope = 0;  // softcap 0: off; slope 0: no ALiBi
  bool has_sink = false;                     // an attention sink joins each row's denominator
  double sink = 0;                           // its logit (used when has_sink)
  Mask mask;                                 // mask.seqlen_q == nq, mask.seqlen_k == nk
  const double* bias = nullptr;              // [nq x nk] added after ALiBi (−∞ hides); null: none
  const uint8_t* blocks = nullptr;           // [nq x nk] 1 where the block mask shows the element
                                             // (flashattn/block_mask.hpp); null: no block mask
  float dropout_p = 0;                       // > 0: P_ij kept iff dropout_keep(seed, stream, i, j)
  uint64_t dropout_seed = 0, dropout_stream = 0;  // (flashattn/philox.hpp), kept values ·1/(1 − p)
  int64_t vdim() const { return dv ? dv : d; }
};

// Forward of one head in fp64, written as numbered passes (S, softcap, ALiBi, bias, mask, P,
// dropout, O, LSE).
// out [nq x dv]; lse [nq] (-inf for rows that see no key, whose out row is 0; with a sink: the sink).
void head_forward(const Head& h, const double* q, const double* k, const double* v, double* out,
                  double* lse);

// Backward of one head in fp64 with P materialised: D = rowsum(dO∘O), dV = Pᵀ dO, dP = dO Vᵀ,
// dS = P∘(dP − D) (times the softcap derivative), dQ = scale·dS K, dK = scale·dSᵀ Q; with dropout
// dV = P̃ᵀ dO and dP = (dO Vᵀ)∘Z/(1 − p). dq [nq x d], dk [nk x d] and dv [nk x dv] are
// overwritten; with a sink, *dsink (if not null) is set to d loss / d sink = −Σ_i exp(sink − LSE_i)·D_i;
// dbias [nq x nk] (if not null) receives d loss / d bias = P∘(dP − D).
void head_backward(const Head& h, const double* q, const double* k, const double* v, const double* dout,
                   double* dq, double* dk, double* dv, double* dsink = nullptr, double* dbias = nullptr);

// Unrounded results of a whole call. out is dense [B, Nq, Hq, dv] with q's sizes and v's dim
// (varlen: B = 1), lse dense [B, Hq, Nq]; dq dense like q, dk like k, dv like v; dsinks [Hq] (empty
// without sinks).
struct ForwardValues {
  std::vector<double> out, lse;
  // Precision::magnitude only (else empty), dense like out: Σ_j P_ij·T_ij·|v_jx − O_ix| with T_ij
  // the size of S_ij's terms (as for lse above) — the effect on out of one rounding of every score
  // at the size of its terms (∂O_ix/∂S_ij = P_ij (v_jx − O_ix)).
  std::vector<double> score_terms;
};
struct BackwardValues {
  std::vector<double> dq, dk, dv, dsinks;
  std::vector<double> dbias;  // dense with dbias's sizes [b, i, h, j] when a.dbias is set, else empty
};

// Validates the inputs and options of `a`, then returns the forward results before rounding to
// the output dtype (nothing is written: a ForwardArgs or a BackwardArgs may be passed).
ForwardValues forward_values(const AttentionArgs& a, Precision p = Precision::fp64);

// Validates `a`, then returns the gradients before rounding to the output dtype. The oracle
// recomputes the forward itself from q, k, v; a.out and a.lse are validated but not read, except by
// Precision::fp64_given_out (a.out) and fp64_given (a.out and a.lse).
BackwardValues backward_values(const BackwardArgs& a, Precision p = Precision::fp64);

// Validates `a` and writes a.out (rounded to nearest even in its dtype), a.lse and a.dropout_mask
// if set. With an append, first writes the new rows into the caches (flashattn::apply_append) and
// attends over them; num_splits is ignored (the oracle never splits).
void forward(const ForwardArgs& a, Precision p = Precision::fp64);

// Validates `a` and writes a.dq, a.dk, a.dv, and a.dsinks and a.dbias if set.
void backward(const BackwardArgs& a, Precision p = Precision::fp64);

}  // namespace flashattn::reference
