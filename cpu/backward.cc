// Backward pass with recomputation. Work item = (sequence, query head); one thread does the whole
// item, so every gradient is reduced in an order fixed by the tile sizes alone: results are
// bitwise identical for any thread count and across calls.
//
// Per item, query blocks go in passes of Plan::pass_blocks consecutive blocks (fixed order): prepare
// each block's operands (Qᵀ, dOᵀ, Q, dO, D = rowsum(dO∘O), LSE); pass 1 walks the key blocks and
// recomputes each query block's P = exp(S − LSE) into its P cache ([keys x block_q],
// O(seqlen_k·block_q), never seqlen_q·seqlen_k) and, for fp32 outputs, the row sums that renormalise
// P exactly; pass 2, per key block and then per query block: dP = dO·Vᵀ, dS = P∘(dP − D)
// (∘ softcap derivative), dV += Pᵀ·dO and dK += dSᵀ·Q into fp32 accumulators of the whole head,
// dQ += dS·K into the block's dQ. Five tile products, S computed once; a long head's K, V, dK, dV
// stream from memory once per pass instead of once per query block. Without GQA/MQA
// dK, dV are written directly; with it each query head writes fp32 partials and a second pass
// sums each group's heads in head order (GQA/MQA still run one item per query head in parallel).
#include <algorithm>
#include <cmath>
#include <limits>

#include "bf16_dot.h"
#include "block_tiles.h"
#include "flashattn/problem.hpp"
#include "kv.h"
#include "parallel.h"
#include "plan.h"
#include "rows.h"
#include "scratch.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backward.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "bf16-inl.h"
#include "bias-inl.h"
#include "dropout-inl.h"
#include "gemm-inl.h"
#include "score-inl.h"
#include "transpose-inl.h"
#include "widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace ::flashattn::cpu::detail;  // NOLINT: Plan, scratch, rows

namespace {

// Sᵀ ← exp(scale·Sᵀ − LSE) lane-wise (product and difference rounded once, as in the forward):
// P recomputed from the forward's log-sum-exp.
template <class D>
HWY_INLINE void ExpMinusLse(D d, float* HWY_RESTRICT st, int64_t ld, int64_t nk, int64_t W, float scale,
                            const float* HWY_RESTRICT lse) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto sc = hn::Set(d, scale);
  for (int64_t w = 0; w < W; w += L) {
    const auto m = hn::Load(d, lse + w);
    for (int64_t j = 0; j < nk; ++j) {
      float* s = st + j * ld + w;
      hn::Store(FastExp(d, hn::MulSub(hn::Load(d, s), sc, m)), d, s);
    }
  }
}

// ExpMinusLse from the fp64 score tile sd (scores final but for the scale): the argument
// scale·S − LSE is exact in fp64 (ExpOfDouble); P is written to the fp32 tile st.
template <class DD>
HWY_INLINE void ExpMinusLseExact(DD dd, const double* HWY_RESTRICT sd, float* HWY_RESTRICT st, int64_t ld,
                                 int64_t nk, int64_t W, double scale, const float* HWY_RESTRICT lse) {
  const hn::Rebind<float, DD> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto sc = hn::Set(dd, scale);
  for (int64_t w = 0; w < W; w += L) {
    const auto m = hn::PromoteTo(dd, hn::Load(df, lse + w));
    for (int64_t j = 0; j < nk; ++j) {
      hn::Store(ExpOfDouble(dd, hn::MulSub(hn::Load(dd, sd + j * ld + w), sc, m)), df, st + j * ld + w);
    }
  }
}

// acc[j·ld + x] += t[j·ld + x] for j in [0, n), x in [0, W) (W a multiple of the lane count).
template <class D>
HWY_INLINE void AddRows(D d, const float* HWY_RESTRICT t, float* HWY_RESTRICT acc, int64_t ld, int64_t n, int64_t W) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t x = 0; x < W; x += L) {
      hn::Store(hn::Add(hn::Load(d, acc + j * ld + x), hn::Load(d, t + j * ld + x)), d, acc + j * ld + x);
    }
  }
}

// sum[i] += Σ_j Pᵀ[j][i] over j in [0, nk), in key order, in fp64: the renormaliser r = 1/Σ_j P
// then carries one rounding, where an fp32 sum of n equal P (a row of equal scores: scale 0) erred
// by up to ~n/2 units, all in the same direction, and moved dv by 9 units at n = 76.
HWY_INLINE void AddRowSums(const float* HWY_RESTRICT pt, int64_t ld, int64_t nk, int64_t W, double* HWY_RESTRICT sum) {
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t w = 0; w < W; ++w) sum[w] += static_cast<double>(pt[j * ld + w]);
}

// dSᵀ ← scale · Pᵀ∘(dPᵀ − D) [∘(1 − t²) with soft-capping], in place of dPᵀ.
template <class D>
HWY_INLINE void GradScores(D d, const float* HWY_RESTRICT pt, float* HWY_RESTRICT dpt,
                           const float* HWY_RESTRICT tt, int64_t ld, int64_t nk, int64_t W,
                           const float* HWY_RESTRICT dd, float scale) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto sc = hn::Set(d, scale);
  const auto one = hn::Set(d, 1.0f);
  for (int64_t w = 0; w < W; w += L) {
    const auto dv = hn::Load(d, dd + w);
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t o = j * ld + w;
      auto ds = hn::Mul(hn::Load(d, pt + o), hn::Sub(hn::Load(d, dpt + o), dv));
      if (tt) {
        const auto t = hn::Load(d, tt + o);
        ds = hn::Mul(ds, hn::NegMulAdd(t, t, one));
      }
      hn::Store(hn::Mul(ds, sc), d, dpt + o);
    }
  }
}

// Returns Σ_x a[x]·b[x] accumulated exactly like one output of Gemm (the target's MulAdd, in
// order), so D = rowsum(dO∘O) and dP = dO·Vᵀ cancel exactly when O equals a row of V.
inline float DotLikeGemm(const float* a, const float* b, int64_t n) {
  const hn::CappedTag<float, 1> d1;
  auto acc = hn::Zero(d1);
  for (int64_t x = 0; x < n; ++x) acc = hn::MulAdd(hn::Set(d1, a[x]), hn::Set(d1, b[x]), acc);
  return hn::GetLane(acc);
}

// Returns Σ_x a[x]·b[x] accumulated exactly like one output of GemmBf16Pairs over pairs of
// consecutive x (bf16_dot.h: per pair the high product first), so D and a bf16 dP cancel exactly
// when O equals a row of V, as DotLikeGemm does for the fp32 products.
inline float DotLikePairs(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t x = 0; x < n; x += 2) {
    if (x + 1 < n) acc = std::fma(a[x + 1], b[x + 1], acc);
    acc = std::fma(a[x], b[x], acc);
  }
  return acc;
}

// Prepares the operands of query block qb of query head h into b: Qᵀ, dOᵀ, Q, dO, D, LSE, key
// ranges, dQᵀ = 0, its rows and key range; with `adaptive` (exact scores chosen per tile) the largest
// squared norm of a Q row (MaxSquaredNorm). Padded rows are zero and see no key. `row` is scratch.
void PrepareBlock(const BackwardArgs& a, const Plan& p, QueryBlock& b, float* row, const Sequence& seq,
                  int64_t h, int64_t qb, bool adaptive) {
  const hn::ScalableTag<float> d;
  const Mask& mask = seq.mask;
  const int64_t r0 = qb * p.block_q;
  const int64_t rows = std::min(p.block_q, mask.seqlen_q - r0);
  const int64_t ld = p.qpad, dim = p.dim, dp = p.dpad;
  const float inf = std::numeric_limits<float>::infinity();
  const bool bf16 = kBf16Path && p.bf16_dot;
  float qmax2 = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = seq.q_start + r0 + i;
    prefetch_row(a.q.data, a.q.dtype, a.q.offset(seq.batch, r, h), dim);
    prefetch_row(a.dout.data, a.dout.dtype, a.dout.offset(seq.batch, r, h), dim);
    prefetch_row(a.out.data, a.out.dtype, a.out.offset(seq.batch, r, h), dim);
  }
  for (int64_t i = 0; i < ld; ++i) {
    float* qi = b.qr + i * dp;
    float* doi = b.dor + i * dp;
    float dsum = 0.0f;
    if (i < rows) {
      const int64_t r = seq.q_start + r0 + i;
      WidenRow(a.q.data, a.q.dtype, a.q.offset(seq.batch, r, h), dim, qi);
      WidenRow(a.dout.data, a.dout.dtype, a.dout.offset(seq.batch, r, h), dim, doi);
      WidenRow(a.out.data, a.out.dtype, a.out.offset(seq.batch, r, h), dim, row);
      dsum = bf16 ? DotLikePairs(doi, row, dim) : DotLikeGemm(doi, row, dim);  // D = rowsum(dO∘O)
      const float l = a.lse[lse_index(a, seq, h, r0 + i)];
      b.lse[i] = l == -inf ? inf : l;
      b.kbeg[i] = static_cast<int32_t>(mask.key_begin(r0 + i));
      b.kend[i] = static_cast<int32_t>(mask.key_end(r0 + i));
      if (adaptive) qmax2 = std::max(qmax2, MaxSquaredNorm(d, qi, dp, 1, dim));
    } else {
      for (int64_t x = 0; x < dim; ++x) qi[x] = doi[x] = 0.0f;
      b.lse[i] = inf;
      b.kbeg[i] = b.kend[i] = 0;
    }
    for (int64_t x = dim; x < dp; ++x) qi[x] = doi[x] = 0.0f;
    b.dd[i] = dsum;
  }
  Transpose(d, b.qr, dp, ld, dim, b.qt, ld);
  Transpose(d, b.dor, dp, ld, dim, b.dot, ld);
  std::fill(b.dqt, b.dqt + dp * ld, 0.0f);
  b.r0 = r0;
  b.r1 = r0 + rows;
  b.rows = rows;
  b.W = round_up(rows, static_cast<int64_t>(hn::Lanes(d)));
  b.tiny = false;
  if (bf16) {  // the operands as bf16 pairs, in place (QueryBlock); the values are bf16, so exact
    b.tiny = AnyTinyFloat(d, b.qr, ld * dp) || AnyTinyFloat(d, b.dor, ld * dp);
    const int64_t Wd = round_up(dim, static_cast<int64_t>(hn::Lanes(d)));
    PackProbabilityPairs(d, b.qt, ld, dim, b.W, reinterpret_cast<uint32_t*>(b.qt));
    PackProbabilityPairs(d, b.dot, ld, dim, b.W, reinterpret_cast<uint32_t*>(b.dot));
    PackProbabilityPairs(d, b.qr, dp, rows, Wd, reinterpret_cast<uint32_t*>(b.qr));
    PackProbabilityPairs(d, b.dor, dp, rows, Wd, reinterpret_cast<uint32_t*>(b.dor));
  }
  b.key_hi = mask.rows_key_end(b.r1);
  b.kb_lo = mask.rows_key_begin(r0) / p.block_k * p.block_k;  // key blocks start at multiples of block_k
  b.qmax2 = qmax2;
}

// Returns whether the backward renormalises P itself. P is recomputed as exp(S − LSE) with the
// caller's fp32 LSE, rounded by ½ ulp of |LSE| and, when it comes from a computation whose S
// rounded differently (another backend, the oracle, another target, fp32 vs fp64 scores), carrying
// that S error too: a relative error common to a row's P and its gradients. The naive algorithm
// normalises by its own sum and has no such error; in a row dominated by one key (one visible key,
// or one large score) its P is exactly 1 and its gradients exact, so fp32 outputs cannot absorb
// even a few units of it. So for fp32 inputs (except ScorePrecision::fp32) pass 1 also sums each
// row's P and pass 2 uses P·r with r = 1/Σ_j P: exactly normalised, at the cost of one add per
// element (the P cache means S is still computed once). 16-bit outputs round far above that error.
// Config::renormalize = false turns it off for callers whose lse is not this call's (ring blocks).
bool SelfNormalises(const Plan& p) { return p.exact_scores && p.renormalize; }

// Packs keys [0, nk) of head kvh of sequence seq (bf16 k, v) into the forms the bf16 products read
// (BackwardScratch kp, vp, ki, ktiny), unless `held` says the thread's buffers already hold them.
void PackHeadBf16(const AttentionArgs& a, const Plan& p, BackwardScratch& w, KvCopy& held, const Sequence& seq,
                  int64_t kvh) {
  if (!held.refill(p, seq, kvh)) return;
  const int64_t nk = seq.mask.seqlen_k, d2 = ceil_div(p.dim, 2), k2 = ceil_div(p.block_k, 2);
  for (int64_t c0 = 0; c0 < nk; c0 += p.block_k) {
    const int64_t nkb = std::min(p.block_k, nk - c0);
    uint32_t* ki = w.ki + (c0 / p.block_k) * k2 * p.dpad;
    bool tiny = false;
    for (int64_t j = 0; j < nkb; ++j) {
      tiny |= PackBf16Row(bf16_key_row(a.k, a, seq, kvh, c0 + j), p.dim, w.kp + (c0 + j) * d2);
      tiny |= PackBf16Row(bf16_key_row(a.v, a, seq, kvh, c0 + j), p.dim, w.vp + (c0 + j) * d2);
    }
    for (int64_t j = 0; j < nkb; j += 2) {  // K's tiny values were seen above
      const uint16_t* second = j + 1 < nkb ? bf16_key_row(a.k, a, seq, kvh, c0 + j + 1) : nullptr;
      PackBf16RowPair(bf16_key_row(a.k, a, seq, kvh, c0 + j), second, p.dim, ki + (j / 2) * p.dpad);
    }
    w.ktiny[c0 / p.block_k] = tiny;
  }
}

// dPᵀ = V·dOᵀ of keys [c0, c0 + nkb) x query block b into w.dpt — bf16 tile products from the
// packed V (Plan::bf16_dot; `exact`: an input is tiny, every product widens), else fp32 from v —
// then, with `drop`, dP ∘= Z/(1 − p) (the factors to keep_out when set, for P̃ = P∘Z/(1 − p)).
void DroppedGradP(const Plan& p, BackwardScratch& w, const QueryBlock& b, const Rows& v, int64_t c0, int64_t nkb,
                  bool exact, const Dropout* drop, float* keep_out) {
  const hn::ScalableTag<float> d;
  const int64_t ld = p.qpad, dim = p.dim, d2 = ceil_div(dim, 2);
  if (kBf16Path && p.bf16_dot) {  // dPᵀ[j][i] = Σ_t V(c0+j) pair t · dOᵀ pair t [i]
    GemmBf16Pairs(Matrix<float>{w.dpt, nkb, b.W, ld}, PairMatrix{w.vp + c0 * d2, nkb, d2, d2}, pairs_of(b.dot, d2, b.W, ld),
                  Accumulate::no, products_for(exact));
  } else {  // dPᵀ[j][i] = Σ_x V[c0+j][x] · dOᵀ[x][i]
    Gemm(d, Matrix<float>{w.dpt, nkb, b.W, ld}, row_block(v, c0, nkb, dim), ConstMatrix{b.dot, dim, b.W, ld},
         Accumulate::no);
  }
  if (drop) DropoutTile(d, w.dpt, ld, nkb, b.W, c0, b.r0, *drop, keep_out);
}

// Pass 2 of one tile (keys [c0, c0 + nkb) x query block b) with bf16 tile products (bf16_dot.h),
// the key block packed in w.vp, w.ki and b's operands in pairs (PrepareBlock): dP = dO·Vᵀ,
// dS = scale · P∘(dP − D) [∘(1 − t²)] in fp32, then P and dS rounded to bf16 (as GPU flash kernels
// and the naive model of the tolerance rule do) for dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K. `exact`:
// an input of the tile is tiny (bf16-inl.h), so every product widens (vdpbf16ps would flush it).
// With `drop`, dP and then P are dropped (DropoutTile), as in BackwardItem.
void BackwardTileBf16(const Plan& p, BackwardScratch& w, QueryBlock& b, int64_t c0, int64_t nkb, bool exact,
                      float scale, const Dropout* drop) {
  const hn::ScalableTag<float> d;
  const int64_t ld = p.qpad, dp = p.dpad, dim = p.dim, ldh = ld / 2;
  const int64_t Wd = round_up(dim, static_cast<int64_t>(hn::Lanes(d)));
  const int64_t row_pairs = ceil_div(b.rows, 2);
  float* pt = b.pc + c0 * ld;
  const uint32_t* ki = w.ki + (c0 / p.block_k) * ceil_div(p.block_k, 2) * dp;
  DroppedGradP(p, w, b, Rows{}, c0, nkb, exact, drop, w.zt);
  GradScores(d, pt, w.dpt, b.tc ? b.tc + c0 * ld : nullptr, ld, nkb, b.W, b.dd, scale);
  if (drop) MulTile(d, pt, w.zt, ld, nkb, b.W);
  if (exact) {  // keeps subnormal P, dS
    RoundRowsToBf16Pairs(d, pt, ld, nkb, b.W, w.prow, ldh);     // Pᵀ rows, pairs of query rows
    RoundRowsToBf16Pairs(d, w.dpt, ld, nkb, b.W, w.srow, ldh);  // dSᵀ rows likewise
    PackProbabilityPairs(d, w.dpt, ld, nkb, b.W, w.scol);       // dSᵀ, pairs of keys
  } else {
    RoundRowsToBf16PairsFast(pt, ld, nkb, b.W, w.prow, ldh);
    RoundRowsToBf16PairsFast(w.dpt, ld, nkb, b.W, w.srow, ldh);
    PairRowsToBf16Fast(w.dpt, ld, nkb, b.W, w.scol);
  }
  // dV[j][x] += Σ_t Pᵀ(j) pair t · dO pair t [x]; dK likewise from dSᵀ and Q
  const Bf16Products products = products_for(exact);
  GemmBf16Pairs(Matrix<float>{w.dvg + c0 * dp, nkb, Wd, dp}, PairMatrix{w.prow, nkb, row_pairs, ldh},
                pairs_of(b.dor, row_pairs, Wd, dp), Accumulate::yes, products);
  GemmBf16Pairs(Matrix<float>{w.dkg + c0 * dp, nkb, Wd, dp}, PairMatrix{w.srow, nkb, row_pairs, ldh},
                pairs_of(b.qr, row_pairs, Wd, dp), Accumulate::yes, products);
  // dQᵀ[x][i] += Σ_t K pair t [x] · dSᵀ pair t [i]
  const int64_t key_pairs = ceil_div(nkb, 2);
  GemmBf16Pairs(Matrix<float>{b.dqt, dim, b.W, ld}, Transposed(PairMatrix{ki, key_pairs, dim, dp}),
                PairMatrix{w.scol, key_pairs, b.W, ld}, Accumulate::yes, products);
}

// Pass 1 of one tile (keys [c0, c1) x query block b, not empty): P = exp(S − LSE) into b's P cache
// (S = Q·Kᵀ: Sᵀ[j][i] = Σ_x K[c0+j][x] · Qᵀ[x][i], in fp64 up to the exponent for fp32 inputs whose
// tile has large scores, as in the forward; the score transforms of ts, the bias of sequence s and
// query head h among them), tanh(S/softcap) beside it, and the row sums for self-normalisation.
void RecomputeTile(const AttentionArgs& a, const Plan& p, BackwardScratch& w, QueryBlock& b, const Rows& k,
                   const ConstTensor& bias, TileScores& ts, int64_t s, int64_t h, int64_t c0, int64_t c1,
                   TileKinds kinds, float kmax2, bool self_norm) {
  const hn::ScalableTag<float> d;
  const hn::ScalableTag<double> dd;  // exact scores (same columns, half the lanes or one)
  const int64_t ld = p.qpad, dim = p.dim, nkb = c1 - c0, d2 = ceil_div(dim, 2);
  const bool bf16 = kBf16Path && p.bf16_dot;
  const bool transform = ts.needs_transform();
  const float fused_scale = transform ? 1.0f : ts.scale;  // as in the forward
  const float hidden = fused_scale < 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  float* pt = b.pc + c0 * ld;
  float* tt = b.tc ? b.tc + c0 * ld : nullptr;
  ts.r0 = b.r0;
  ts.c0 = c0;
  if (p.bias) {
    const bool adaptive = p.exact_scores && p.scores == ScorePrecision::adaptive;
    ts.bias_bound = LoadBiasTile(d, bias, s, h, b.r0, b.rows, b.W, c0, nkb, w.brows, bias_ld(p), w.bt, ld, adaptive);
  }
  const ConstMatrix kb = row_block(k, c0, nkb, dim);  // K[c0, c1)
  const ConstMatrix qt{b.qt, dim, b.W, ld};            // Qᵀ [d x W]
  if (!bf16 && exact_tile(p, TileScoreBound(ts, b.qmax2, kmax2, b.r1, c1))) {
    Gemm(dd, Matrix<double>{w.sd, nkb, b.W, ld}, kb, qt, Accumulate::no);
    if (transform) TransformScoresExact(dd, w.sd, ld, nkb, b.W, ts, tt);
    if (kinds.rule == TileKind::partial) MaskScoresExact(dd, w.sd, ld, nkb, b.W, c0, b.kbeg, b.kend, hidden);
    if (kinds.blocks == TileKind::partial)
      MaskBlockTile<double>(a.block_mask, s, h, b.r0, b.rows, c0, nkb, w.sd, ld, hidden);
    ExpMinusLseExact(dd, w.sd, pt, ld, nkb, b.W, fused_scale, b.lse);
  } else {
    if (bf16) {  // Sᵀ[j][i] = Σ_t K(c0+j) pair t · Qᵀ pair t [i]
      GemmBf16Pairs(Matrix<float>{pt, nkb, b.W, ld}, PairMatrix{w.kp + c0 * d2, nkb, d2, d2}, pairs_of(b.qt, d2, b.W, ld),
                    Accumulate::no, products_for(w.ktiny[c0 / p.block_k] || b.tiny));
    } else {
      Gemm(d, Matrix<float>{pt, nkb, b.W, ld}, kb, qt, Accumulate::no);
    }
    if (transform) TransformScores(d, pt, ld, nkb, b.W, ts, tt);
    if (kinds.rule == TileKind::partial) MaskScores(d, pt, ld, nkb, b.W, c0, b.kbeg, b.kend, hidden);
    if (kinds.blocks == TileKind::partial) MaskBlockTile(a.block_mask, s, h, b.r0, b.rows, c0, nkb, pt, ld, hidden);
    ExpMinusLse(d, pt, ld, nkb, b.W, fused_scale, b.lse);
  }
  if (self_norm) AddRowSums(pt, ld, nkb, b.W, b.rsum);
}

// Starts b's fp64 row sums with the sink's share exp(sink − LSE) (padded and empty rows: LSE = +∞
// here, share 0), so renormalising keeps P summing to 1 − P_sink, not to 1.
void StartRowSums(const BackwardArgs& a, const Plan& p, QueryBlock& b, int64_t h) {
  for (int64_t x = 0; x < p.qpad; ++x) b.rsum[x] = a.sinks ? std::exp(static_cast<double>(a.sinks[h]) - b.lse[x]) : 0.0;
}

// Sets b's renormalisers r = 1/Σ_j P from its row sums; a row whose sum is 0 sees no key (its LSE
// is +∞ here): r = 0 keeps its P at 0.
void FinishRowSums(const Plan& p, QueryBlock& b) {
  for (int64_t x = 0; x < p.qpad; ++x) b.rnorm[x] = b.rsum[x] > 0 ? static_cast<float>(1.0 / b.rsum[x]) : 0.0f;
}

// Computes dq of query head h of sequence s and its contribution to dk, dv of kv head h / group:
// written to dk, dv when the group has one head, else as fp32 rows of `partial`. Query blocks go in
// passes of p.pass_blocks consecutive blocks (never across an accumulation group): each pass walks
// the keys once, so a long head's K, V, dK, dV stream from memory once per pass, not once per block.
// Every sum keeps the order of one block at a time (dK, dV rows: query blocks ascending; dQ and
// row sums: key blocks ascending), so the pass size does not change a bit of the results.
void BackwardItem(const BackwardArgs& a, const Plan& p, BackwardScratch& w, KvCopy& held, int64_t s, int64_t h,
                  float* partial) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const Sequence seq = sequence(a, s);
  const Mask& mask = seq.mask;
  const int64_t nq = mask.seqlen_q, nk = mask.seqlen_k, kvh = h / p.group;
  const int64_t nqb = ceil_div(nq, p.block_q);
  const int64_t ld = p.qpad, dim = p.dim, dp = p.dpad;
  const int64_t Wd = round_up(dim, L);
  const float scale = effective_scale(a);
  const bool adaptive = p.exact_scores && p.scores == ScorePrecision::adaptive;
  const bool self_norm = SelfNormalises(p);
  const bool bf16 = kBf16Path && p.bf16_dot;  // bf16 tile products, from the bf16 k, v rows

  Rows k, v;  // keys [0, nk) of the head as fp32 rows, or (bf16 tile products) packed in w
  if (nk > 0 && bf16) PackHeadBf16(a, p, w, held, seq, kvh);
  if (nk > 0 && !bf16) head_kv(a, p, seq, kvh, w.kv, held, k, v, {WidenRow, DequantizeRow});
  if (adaptive && nk > 0) RowSquaredNorms(d, k.data, k.ld, nk, dim, w.knorm);
  std::fill(w.dkt, w.dkt + nk * dp, 0.0f);
  std::fill(w.dvt, w.dvt + nk * dp, 0.0f);
  const bool grouped = w.dkg != w.dkt;
  const int64_t gb = group_blocks(p);
  TileScores ts;
  ts.scale = scale;
  ts.diag = mask.diag();
  ts.softcap = a.softcap;
  ts.slope = alibi_slope(a, s, h);
  ts.bias = p.bias ? w.bt : nullptr;
  const ConstTensor bias = bias_view(a);
  const Dropout drop = p.dropout ? MakeDropout(a, s, h) : Dropout{};
  for (int64_t qb0 = 0, qb1 = 0; qb0 < nqb; qb0 = qb1) {
    qb1 = std::min(qb0 + p.pass_blocks, nqb);
    if (grouped) {
      qb1 = std::min(qb1, (qb0 / gb + 1) * gb);
      if (qb0 % gb == 0) {  // a new group of query blocks
        std::fill(w.dkg, w.dkg + nk * dp, 0.0f);
        std::fill(w.dvg, w.dvg + nk * dp, 0.0f);
      }
    }
    const int64_t nb = qb1 - qb0;
    int64_t pass_lo = nk, pass_hi = 0;  // key blocks any block of the pass sees
    for (int64_t i = 0; i < nb; ++i) {
      QueryBlock& b = w.blk[i];
      PrepareBlock(a, p, b, w.row, seq, h, qb0 + i, adaptive);
      pass_lo = std::min(pass_lo, b.kb_lo);
      pass_hi = std::max(pass_hi, b.key_hi);
      if (self_norm) StartRowSums(a, p, b, h);
    }
    // Returns the first key block at or after c that some block of the pass sees: c itself without a
    // block mask; with one, blocks of unlisted tiles are passed over (never read, nor prefetched).
    const auto pass_from = [&](int64_t c) {
      if (!a.block_mask.used()) return c;
      for (; c < pass_hi; c += p.block_k)
        for (int64_t i = 0; i < nb; ++i) {
          const QueryBlock& b = w.blk[i];
          if (c >= b.kb_lo && c < b.key_hi &&
              classify_tiles(a, seq, h, b.r0, b.r1, c, std::min(c + p.block_k, nk)).kind() != TileKind::empty)
            return c;
        }
      return pass_hi;
    };
    // Pass 1: P = exp(S − LSE) of every key block the rows see, into the P caches; row sums for
    // self-normalisation.
    for (int64_t c0 = pass_from(pass_lo), c_next; c0 < pass_hi; c0 = c_next) {
      const int64_t c1 = std::min(c0 + p.block_k, nk);
      c_next = pass_from(c0 + p.block_k);
      if (!bf16) {
        for (int64_t j = c_next; j < std::min(c_next + p.block_k, nk); ++j) {  // the next block's keys
          prefetch_row(k.data, DType::f32, j * k.ld, dim, PrefetchFor::read_soon);
        }
      }
      const float kmax2 = adaptive ? MaxOf(w.knorm + c0, c1 - c0) : 0.0f;
      for (int64_t i = 0; i < nb; ++i) {
        QueryBlock& b = w.blk[i];
        if (c0 < b.kb_lo || c0 >= b.key_hi) continue;
        const TileKinds kinds = classify_tiles(a, seq, h, b.r0, b.r1, c0, c1);
        if (kinds.kind() == TileKind::empty) continue;
        RecomputeTile(a, p, w, b, k, bias, ts, s, h, c0, c1, kinds, kmax2, self_norm);
      }
    }
    for (int64_t i = 0; i < nb && self_norm; ++i) FinishRowSums(p, w.blk[i]);
    // Pass 2: the gradients, key blocks in the same order; per key block the pass's query blocks
    // in order.
    for (int64_t c0 = pass_from(pass_lo), c_next; c0 < pass_hi; c0 = c_next) {
      const int64_t c1 = std::min(c0 + p.block_k, nk), nkb = c1 - c0;
      const ConstMatrix kb = row_block(k, c0, nkb, dim);  // K[c0, c1)
      c_next = pass_from(c0 + p.block_k);
      {  // the next block's operands: long sequences stream them from memory
        const int64_t cn = std::min(c_next, nk), n1 = std::max<int64_t>(std::min(cn + p.block_k, nk) - cn, 0);
        if (!bf16) prefetch_kv_block(k, v, cn, cn + n1, nk, dim);
        prefetch_row(w.dkt + cn * dp, DType::f32, 0, n1 * dp, PrefetchFor::read_soon);
        prefetch_row(w.dvt + cn * dp, DType::f32, 0, n1 * dp, PrefetchFor::read_soon);
        for (int64_t i = 0; i < nb; ++i) {
          prefetch_row(w.blk[i].pc + cn * ld, DType::f32, 0, n1 * ld, PrefetchFor::read_soon);
        }
      }
      for (int64_t i = 0; i < nb; ++i) {
        QueryBlock& b = w.blk[i];
        if (c0 < b.kb_lo || c0 >= b.key_hi || classify_tiles(a, seq, h, b.r0, b.r1, c0, c1).kind() == TileKind::empty)
          continue;
        float* pt = b.pc + c0 * ld;
        if (bf16) {  // never self-normalising (fp32 inputs only)
          BackwardTileBf16(p, w, b, c0, nkb, w.ktiny[c0 / p.block_k] || b.tiny, scale, p.dropout ? &drop : nullptr);
          continue;
        }
        if (self_norm) RescaleColumns(d, pt, ld, nkb, b.W, b.rnorm);  // P·r
        const Matrix<float> dpt{w.dpt, nkb, b.W, ld};  // dPᵀ, then dSᵀ [nkb x W]
        const ConstMatrix ptile{pt, nkb, b.rows, ld};   // Pᵀ [nkb x rows]
        const ConstMatrix dst{w.dpt, nkb, b.rows, ld};  // dSᵀ [nkb x rows]
        // dP = dO·Vᵀ, with dropout ∘ Z/(1 − p); afterwards P̃ = P∘Z/(1 − p) for dV
        DroppedGradP(p, w, b, v, c0, nkb, false, p.dropout ? &drop : nullptr, w.zt);
        // dS = scale · P∘(dP − D) [∘(1 − t²)]
        GradScores(d, pt, w.dpt, b.tc ? b.tc + c0 * ld : nullptr, ld, nkb, b.W, b.dd, scale);
        if (p.dropout) MulTile(d, pt, w.zt, ld, nkb, b.W);
        // dV += Pᵀ·dO  (dV[j][x] += Σ_i Pᵀ[j][i] · dO[i][x])
        Gemm(d, Matrix<float>{w.dvg + c0 * dp, nkb, Wd, dp}, ptile, ConstMatrix{b.dor, b.rows, Wd, dp}, Accumulate::yes);
        // dK += dSᵀ·Q  (dK[j][x] += Σ_i dSᵀ[j][i] · Q[i][x])
        Gemm(d, Matrix<float>{w.dkg + c0 * dp, nkb, Wd, dp}, dst, ConstMatrix{b.qr, b.rows, Wd, dp}, Accumulate::yes);
        // dQ += dS·K  (dQᵀ[x][i] += Σ_j K[c0+j][x] · dSᵀ[j][i])
        Gemm(d, Matrix<float>{b.dqt, dim, b.W, ld}, Transposed(kb), dpt, Accumulate::yes);
      }
    }
    for (int64_t i = 0; i < nb; ++i) {
      QueryBlock& b = w.blk[i];
      Transpose(d, b.dqt, ld, dp, b.W, b.qr, dp);  // dQ rows, over Q's (done with)
      for (int64_t r = 0; r < b.rows; ++r) {
        store_row(a.dq.data, a.dq.dtype, a.dq.offset(seq.batch, seq.q_start + b.r0 + r, h), dim, b.qr + r * dp);
      }
    }
    if (grouped && (qb1 % gb == 0 || qb1 == nqb)) {
      AddRows(d, w.dkg, w.dkt, dp, nk, Wd);  // the group's dK, dV into the head's
      AddRows(d, w.dvg, w.dvt, dp, nk, Wd);
    }
  }
  float* partial_k = partial ? partial + ((s * p.heads_q + h) * p.max_k) * dim : nullptr;
  float* partial_v = partial ? partial_k + p.sequences * p.heads_q * p.max_k * dim : nullptr;
  for (int64_t j = 0; j < nk; ++j) {
    if (partial) {
      std::copy(w.dkt + j * dp, w.dkt + j * dp + dim, partial_k + j * dim);
      std::copy(w.dvt + j * dp, w.dvt + j * dp + dim, partial_v + j * dim);
      continue;
    }
    const int64_t r = seq.k_start + j;
    store_row(a.dk.data, a.dk.dtype, a.dk.offset(seq.batch, r, kvh), dim, w.dkt + j * dp);
    store_row(a.dv.data, a.dv.dtype, a.dv.offset(seq.batch, r, kvh), dim, w.dvt + j * dp);
  }
  // Keys past seqlens_k are never visible: zero gradient (the group sum writes them otherwise).
  for (int64_t j = nk; j < seq.k_rows && !partial; ++j) {
    const int64_t r = seq.k_start + j;
    store_zero_row(a.dk.data, a.dk.dtype, a.dk.offset(seq.batch, r, kvh), dim);
    store_zero_row(a.dv.data, a.dv.dtype, a.dv.offset(seq.batch, r, kvh), dim);
  }
}

// Writes dk, dv of kv head kvh of sequence s as the sum of its query heads' partials, in head order.
void SumGroup(const BackwardArgs& a, const Plan& p, const float* partial, float* row, int64_t s, int64_t kvh) {
  const Sequence seq = sequence(a, s);
  const int64_t dim = p.dim, g = p.group;
  const int64_t tensor = p.sequences * p.heads_q * p.max_k * dim;  // floats of the dK partials
  for (int part = 0; part < 2; ++part) {
    const Tensor& out = part == 0 ? a.dk : a.dv;
    const float* base = partial + part * tensor;
    for (int64_t j = 0; j < seq.k_rows; ++j) {
      const int64_t r = seq.k_start + j;
      if (j >= seq.mask.seqlen_k) {  // never visible: zero gradient
        store_zero_row(out.data, out.dtype, out.offset(seq.batch, r, kvh), dim);
        continue;
      }
      const float* first = base + ((s * p.heads_q + kvh * g) * p.max_k + j) * dim;
      std::copy(first, first + dim, row);
      for (int64_t hh = 1; hh < g; ++hh) {
        const float* next = first + hh * p.max_k * dim;
        for (int64_t x = 0; x < dim; ++x) row[x] += next[x];
      }
      store_row(out.data, out.dtype, out.offset(seq.batch, r, kvh), dim, row);
    }
  }
}

// Work item it of the dbias pass: dbias rows [row0, row0 + rows) of dbias batch `batch` and head
// `head`; with dbias.seq == 1 one item holds the (single) row of a (batch, head).
struct DbiasRows {
  int64_t batch = 0, head = 0, row0 = 0, rows = 1;
};

DbiasRows dbias_item(const Tensor& g, const Plan& p, int64_t it) {
  const int64_t blocks = g.seq == 1 ? 1 : ceil_div(g.seq, p.block_q);
  DbiasRows r;
  r.batch = it / (g.heads * blocks);
  r.head = (it / blocks) % g.heads;
  r.row0 = g.seq == 1 ? 0 : (it % blocks) * p.block_q;
  r.rows = g.seq == 1 ? 1 : std::min(p.block_q, g.seq - r.row0);
  return r;
}

// Writes dbias rows `item` (docs/semantics.md, "dbias"): the sum of dS = P∘(dP̃∘Z/(1 − p) − D)
// (before the softcap derivative and the scale) over every (sequence, query head, row) that reads
// them, summed into fp32 rows in a fixed order — sequences, then heads, then query blocks, rows and
// keys ascending — and rounded once. The item owns its rows, so the bits do not depend on the thread
// count. P and dP are recomputed tile by tile exactly as the backward's pass 1 and dP product do
// (RecomputeTile): 2 of the backward's 5 tile products again, only for the pairs that read the
// item's rows. Elements no visible (row, key) reads stay 0.
void DbiasItem(const BackwardArgs& a, const Plan& p, BackwardScratch& w, KvCopy& held, const DbiasRows& item) {
  const hn::ScalableTag<float> d;
  const Tensor& g = a.dbias;
  const int64_t ld = p.qpad, dim = p.dim, kw = round_up(p.max_k, kMaxLanes);
  const bool adaptive = p.exact_scores && p.scores == ScorePrecision::adaptive;
  const bool self_norm = SelfNormalises(p);
  const bool bf16 = kBf16Path && p.bf16_dot;
  const bool all_rows = g.seq == 1;
  const ConstTensor bias = bias_view(a);
  std::fill(w.dbias, w.dbias + item.rows * kw, 0.0f);
  // The sequences and heads that read the item's elements: all of them along a broadcast dim.
  const int64_t s0 = g.batch == 1 ? 0 : item.batch, s1 = g.batch == 1 ? p.sequences : item.batch + 1;
  const int64_t h0 = g.heads == 1 ? 0 : item.head, h1 = g.heads == 1 ? a.q.heads : item.head + 1;
  QueryBlock& b = w.blk[0];
  for (int64_t s = s0; s < s1; ++s) {
    const Sequence seq = sequence(a, s);
    const Mask& mask = seq.mask;
    const int64_t nk = mask.seqlen_k, nqb = ceil_div(mask.seqlen_q, p.block_q);
    // Query blocks whose rows read the item's: every block, or the block of the item's rows.
    const int64_t qb0 = all_rows ? 0 : item.row0 / p.block_q, qb1 = all_rows ? nqb : std::min(qb0 + 1, nqb);
    if (nk == 0 || qb0 >= qb1) continue;
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kvh = h / p.group;
      Rows k, v;
      if (bf16) PackHeadBf16(a, p, w, held, seq, kvh);
      if (!bf16) head_kv(a, p, seq, kvh, w.kv, held, k, v, {WidenRow, DequantizeRow});
      if (adaptive) RowSquaredNorms(d, k.data, k.ld, nk, dim, w.knorm);
      TileScores ts;
      ts.scale = effective_scale(a);
      ts.diag = mask.diag();
      ts.softcap = a.softcap;
      ts.slope = alibi_slope(a, s, h);
      ts.bias = w.bt;
      const Dropout drop = p.dropout ? MakeDropout(a, s, h) : Dropout{};
      for (int64_t qb = qb0; qb < qb1; ++qb) {
        PrepareBlock(a, p, b, w.row, seq, h, qb, adaptive);
        if (self_norm) StartRowSums(a, p, b, h);
        for (int64_t pass = 0; pass < 2; ++pass) {  // P (and its row sums) first, then dS
          if (pass == 1 && self_norm) FinishRowSums(p, b);
          for (int64_t c0 = b.kb_lo; c0 < b.key_hi; c0 += p.block_k) {
            const int64_t c1 = std::min(c0 + p.block_k, nk), nkb = c1 - c0;
            const TileKinds kinds = classify_tiles(a, seq, h, b.r0, b.r1, c0, c1);
            if (kinds.kind() == TileKind::empty) continue;
            float* pt = b.pc + c0 * ld;
            if (pass == 0) {
              RecomputeTile(a, p, w, b, k, bias, ts, s, h, c0, c1, kinds, adaptive ? MaxOf(w.knorm + c0, nkb) : 0.0f,
                            self_norm);
              continue;
            }
            if (self_norm) RescaleColumns(d, pt, ld, nkb, b.W, b.rnorm);  // P·r
            DroppedGradP(p, w, b, v, c0, nkb, bf16 && (w.ktiny[c0 / p.block_k] || b.tiny), p.dropout ? &drop : nullptr,
                         nullptr);
            GradScores(d, pt, w.dpt, nullptr, ld, nkb, b.W, b.dd, 1.0f);  // P∘(dP − D)
            for (int64_t j = 0; j < nkb; ++j) {
              const float* ds = w.dpt + j * ld;
              if (all_rows) {
                float acc = w.dbias[c0 + j];
                for (int64_t i = 0; i < b.rows; ++i) acc += ds[i];
                w.dbias[c0 + j] = acc;
              } else {
                for (int64_t i = 0; i < b.rows; ++i) w.dbias[i * kw + c0 + j] += ds[i];
              }
            }
          }
        }
      }
    }
  }
  const int64_t cols = std::min(g.dim, p.max_k);  // keys past every sequence's: no reader
  for (int64_t r = 0; r < item.rows; ++r) {
    const int64_t o = g.offset(item.batch, item.row0 + r, item.head);
    store_row(g.data, g.dtype, o, cols, w.dbias + r * kw);
    if (g.dim > cols) store_zero_row(g.data, g.dtype, o + cols, g.dim - cols);
  }
}

}  // namespace

// Runs the whole backward call on this target: work items (sequence, query head) are claimed
// dynamically and each writes only its own dq rows and dk, dv rows (or partials); with GQA/MQA a
// second loop sums the partials of each (sequence, kv head).
void BackwardTarget(const BackwardArgs& a, const Plan& p) {
  const int64_t heads = a.q.heads;
  const int64_t items = p.sequences * heads;
  if (items == 0 && !p.dbias) return;  // dbias is written (zeros) even when no sequence reads it
  const size_t floats = backward_scratch_floats(p);
  const size_t partial_floats = backward_partial_floats(p);
  float* partial = partial_floats ? call_scratch(partial_floats) : nullptr;
  struct Thread {
    float* scratch;
    KvCopy held;
  };
  ParallelFor(
      p.threads, items, 1, [&] { return Thread{thread_scratch(floats), {}}; },
      [&](int64_t it, Thread& t) {
        // A local view of the layout: its pointers stay in registers across the item's calls.
        BackwardScratch w = place<BackwardScratch>(t.scratch, p);
        BackwardItem(a, p, w, t.held, it / heads, it % heads, partial);
      });
  if (partial) {  // after every item: the groups' sums read all their heads' partials
    ParallelFor(
        p.threads, p.sequences * a.k.heads, 1, [&] { return thread_scratch(floats); },
        [&](int64_t it, float* scratch) {
          SumGroup(a, p, partial, place<BackwardScratch>(scratch, p).row, it / a.k.heads, it % a.k.heads);
        });
  }
  if (p.dbias) {  // the dbias pass: items own disjoint dbias rows
    const Tensor& g = a.dbias;
    const int64_t dbias_items = g.batch * g.heads * (g.seq == 1 ? 1 : ceil_div(g.seq, p.block_q));
    ParallelFor(
        p.threads, dbias_items, 1, [&] { return Thread{thread_scratch(floats), {}}; },
        [&](int64_t it, Thread& t) {
          BackwardScratch w = place<BackwardScratch>(t.scratch, p);
          DbiasItem(a, p, w, t.held, dbias_item(g, p, it));
        });
  }
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::cpu {
HWY_EXPORT(BackwardTarget);

void detail::backward_on_target(int64_t target, const BackwardArgs& a, const Plan& p) {
  HWY_DISPATCH_TABLE(BackwardTarget)[dispatch_index(target)](a, p);
}
}  // namespace flashattn::cpu
#endif  // HWY_ONCE
