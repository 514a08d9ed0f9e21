// Backward pass with recomputation. Work item = (sequence, query head); one thread does the whole
// item, so every gradient element is reduced in an order fixed by the tile sizes alone: results are
// bitwise identical for any thread count and across calls.
//
// Per item: D = rowsum(dO∘O) and the operands of every query block are prepared once; then for each
// key block (its dK, dV owned by the item), for each query block (fixed order): recompute P from
// LSE, dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − D) (∘ softcap derivative), dK += dSᵀ·Q, dQ += dS·K into
// an fp32 per-item dQ buffer. Five tile products, S computed once; no buffer grows with
// seqlen_q·seqlen_k. Without GQA/MQA dK, dV are written directly; with it each query head writes
// fp32 partials and a second pass sums each group's heads in head order (GQA/MQA still run one item
// per query head in parallel).
#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>

#include "flashattn/problem.hpp"
#include "kv.h"
#include "plan.h"
#include "rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backward.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "gemm-inl.h"
#include "score-inl.h"
#include "widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace ::flashattn::cpu::detail;  // NOLINT: Plan, scratch, rows

namespace {

// Views one backward work item's scratch (sizes in plan.cpp: backward_scratch_floats). The first
// groups hold one slab per query block bi.
struct BackwardScratch {
  int64_t blocks;  // nqb slabs
  double* sd;      // [block_k x qpad] raw Sᵀ in fp64 (exact scores only, else null)
  float* qt;       // [blocks][d x qpad] Qᵀ
  float* dot;      // [blocks][d x qpad] dOᵀ
  float* dqt;      // [blocks][d x qpad] dQᵀ accumulator (fp32)
  float* qr;       // [blocks][qpad x dpad] Q, rows zero-padded to dpad
  float* dor;      // [blocks][qpad x dpad] dO
  float* dd;       // [blocks][qpad] D = rowsum(dO∘O)
  float* lse;      // [blocks][qpad] LSE, +∞ for rows that see no key (so P = 0)
  float* rnorm;    // [blocks][qpad] 1 / Σ_j exp(S − LSE) when self-normalising, else 1
  int32_t* kbeg;   // [blocks][qpad] first visible key per row
  int32_t* kend;   // [blocks][qpad] one past the last visible key
  float* st;       // [block_k x qpad] Sᵀ, then Pᵀ
  float* dpt;      // [block_k x qpad] dPᵀ, then dSᵀ
  float* tt;       // [block_k x qpad] tanh(S/softcap)
  float* dkt;      // [block_k x dpad] dK of the key block
  float* dvt;      // [block_k x dpad] dV of the key block
  float* row;      // [dpad]
  float* row2;     // [dpad]
  float* kv;       // [2 x block_k x d] fp32 copy of one key block of k, v (kv.h)

  BackwardScratch(float* s, const Plan& p) {
    blocks = ceil_div(p.max_q, p.block_q);
    const int64_t tq = p.dim * p.qpad, tr = p.qpad * p.dpad;
    sd = nullptr;
    if (p.exact_scores) {  // first: doubles stay 64-byte aligned (all sizes are multiples of qpad)
      sd = reinterpret_cast<double*>(s);
      s = reinterpret_cast<float*>(sd + p.block_k * p.qpad);
    }
    qt = s;
    dot = qt + blocks * tq;
    dqt = dot + blocks * tq;
    qr = dqt + blocks * tq;
    dor = qr + blocks * tr;
    dd = dor + blocks * tr;
    lse = dd + blocks * p.qpad;
    rnorm = lse + blocks * p.qpad;
    kbeg = reinterpret_cast<int32_t*>(rnorm + blocks * p.qpad);
    kend = kbeg + blocks * p.qpad;
    st = reinterpret_cast<float*>(kend + blocks * p.qpad);
    dpt = st + p.block_k * p.qpad;
    tt = dpt + p.block_k * p.qpad;
    dkt = tt + p.block_k * p.qpad;
    dvt = dkt + p.block_k * p.dpad;
    row = dvt + p.block_k * p.dpad;
    row2 = row + p.dpad;
    kv = row2 + p.dpad;
  }
};

// Sᵀ ← exp(scale·Sᵀ − LSE)·r lane-wise (product and difference rounded once, as in the forward):
// P recomputed from the forward's log-sum-exp (r = 1, or the self-normalisation factor).
template <class D>
HWY_INLINE void ExpMinusLse(D d, float* HWY_RESTRICT st, int64_t ld, int64_t nk, int64_t W, float scale,
                            const float* HWY_RESTRICT lse, const float* HWY_RESTRICT rnorm) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto sc = hn::Set(d, scale);
  for (int64_t w = 0; w < W; w += L) {
    const auto m = hn::Load(d, lse + w);
    const auto r = hn::Load(d, rnorm + w);
    for (int64_t j = 0; j < nk; ++j) {
      float* s = st + j * ld + w;
      hn::Store(hn::Mul(ExpKeepNaN(d, hn::MulSub(hn::Load(d, s), sc, m)), r), d, s);
    }
  }
}

// ExpMinusLse from the fp64 score tile sd (scores final but for the scale): the argument
// scale·S − LSE is exact before its one rounding to fp32; P is written to the fp32 tile st.
template <class DD>
HWY_INLINE void ExpMinusLseExact(DD dd, const double* HWY_RESTRICT sd, float* HWY_RESTRICT st, int64_t ld,
                                 int64_t nk, int64_t W, double scale, const float* HWY_RESTRICT lse,
                                 const float* HWY_RESTRICT rnorm) {
  const hn::Rebind<float, DD> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto sc = hn::Set(dd, scale);
  for (int64_t w = 0; w < W; w += L) {
    const auto m = hn::PromoteTo(dd, hn::Load(df, lse + w));
    const auto r = hn::Load(df, rnorm + w);
    for (int64_t j = 0; j < nk; ++j) {
      const auto x = hn::DemoteTo(df, hn::MulSub(hn::Load(dd, sd + j * ld + w), sc, m));
      hn::Store(hn::Mul(ExpKeepNaN(df, x), r), df, st + j * ld + w);
    }
  }
}

// AddExpMinusLse from the fp64 score tile sd, each term exactly as ExpMinusLseExact computes it.
template <class DD>
HWY_INLINE void AddExpMinusLseExact(DD dd, const double* HWY_RESTRICT sd, int64_t ld, int64_t nk, int64_t W,
                                    double scale, const float* HWY_RESTRICT lse, float* HWY_RESTRICT sum) {
  const hn::Rebind<float, DD> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto sc = hn::Set(dd, scale);
  for (int64_t w = 0; w < W; w += L) {
    const auto m = hn::PromoteTo(dd, hn::Load(df, lse + w));
    auto acc = hn::Load(df, sum + w);
    for (int64_t j = 0; j < nk; ++j)
      acc = hn::Add(acc, ExpKeepNaN(df, hn::DemoteTo(df, hn::MulSub(hn::Load(dd, sd + j * ld + w), sc, m))));
    hn::Store(acc, df, sum + w);
  }
}

// sum[i] += Σ_j exp(scale·Sᵀ[j][i] − LSE[i]).
template <class D>
HWY_INLINE void AddExpMinusLse(D d, const float* HWY_RESTRICT st, int64_t ld, int64_t nk, int64_t W, float scale,
                               const float* HWY_RESTRICT lse, float* HWY_RESTRICT sum) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto sc = hn::Set(d, scale);
  for (int64_t w = 0; w < W; w += L) {
    const auto m = hn::Load(d, lse + w);
    auto acc = hn::Load(d, sum + w);
    for (int64_t j = 0; j < nk; ++j) acc = hn::Add(acc, ExpKeepNaN(d, hn::MulSub(hn::Load(d, st + j * ld + w), sc, m)));
    hn::Store(acc, d, sum + w);
  }
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

// Prepares the operands of query block qb of query head h (slab bi): Qᵀ, dOᵀ, Q, dO, D, LSE,
// key ranges, dQᵀ = 0. Padded rows are zero and see no key.
void PrepareBlock(const BackwardArgs& a, const Plan& p, BackwardScratch& w, const Sequence& seq,
                  int64_t h, int64_t qb, int64_t bi) {
  const Mask& mask = seq.mask;
  const int64_t r0 = qb * p.block_q;
  const int64_t rows = std::min(p.block_q, mask.seqlen_q - r0);
  const int64_t ld = p.qpad, dim = p.dim, dp = p.dpad;
  const float inf = std::numeric_limits<float>::infinity();
  float* qt = w.qt + bi * dim * ld;
  float* dot = w.dot + bi * dim * ld;
  float* dqt = w.dqt + bi * dim * ld;
  float* qr = w.qr + bi * ld * dp;
  float* dor = w.dor + bi * ld * dp;
  for (int64_t i = 0; i < ld; ++i) {
    float* qi = qr + i * dp;
    float* doi = dor + i * dp;
    float dsum = 0.0f;
    if (i < rows) {
      const int64_t r = seq.q_start + r0 + i;
      WidenRow(a.q.data, a.q.dtype, a.q.offset(seq.batch, r, h), dim, qi);
      WidenRow(a.dout.data, a.dout.dtype, a.dout.offset(seq.batch, r, h), dim, doi);
      WidenRow(a.out.data, a.out.dtype, a.out.offset(seq.batch, r, h), dim, w.row);
      dsum = DotLikeGemm(doi, w.row, dim);  // D = rowsum(dO∘O)
      const float l = a.lse[lse_index(a, seq, h, r0 + i)];
      w.lse[bi * ld + i] = l == -inf ? inf : l;
      w.kbeg[bi * ld + i] = static_cast<int32_t>(mask.key_begin(r0 + i));
      w.kend[bi * ld + i] = static_cast<int32_t>(mask.key_end(r0 + i));
    } else {
      for (int64_t x = 0; x < dim; ++x) qi[x] = doi[x] = 0.0f;
      w.lse[bi * ld + i] = inf;
      w.kbeg[bi * ld + i] = w.kend[bi * ld + i] = 0;
    }
    for (int64_t x = dim; x < dp; ++x) qi[x] = doi[x] = 0.0f;
    w.dd[bi * ld + i] = dsum;
    w.rnorm[bi * ld + i] = 1.0f;
    for (int64_t x = 0; x < dim; ++x) {
      qt[x * ld + i] = qi[x];
      dot[x * ld + i] = doi[x];
      dqt[x * ld + i] = 0.0f;
    }
  }
}

// Returns whether the backward renormalises P itself. P is recomputed as exp(S − LSE) with the
// caller's fp32 LSE. When that LSE comes from a computation whose S rounded differently (another
// backend, the oracle, a different target), a nearly one-hot row keeps the rounding error of its
// dominant S uncancelled: relative error ~ d^½·2^-24·|q||k|·scale in P and the gradients, which an
// fp32 output cannot absorb (the naive algorithm normalises by its own sum and has no such error).
// So for fp32 outputs each query block first computes r = 1/Σ_j exp(S − LSE) with its own S (one
// extra S product, +1/5 of the backward's work) and uses P = exp(S − LSE)·r, exactly normalised.
// 16-bit outputs round far above that error and skip it.
bool NeedsSelfNorm(const BackwardArgs& a) { return a.dq.dtype == DType::f32; }

// Adds Σ_j exp(S − LSE) over the keys of block [c0, c0 + nkb) to rnorm of slab bi (query block qb).
template <class D>
void AddRowSums(D d, const Plan& p, BackwardScratch& w, const Mask& mask, const Rows& k, TileScores ts,
                int64_t c0, int64_t nkb, int64_t qb, int64_t bi) {
  const int64_t ld = p.qpad, dim = p.dim, L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t r0 = qb * p.block_q, r1 = std::min(r0 + p.block_q, mask.seqlen_q), W = round_up(r1 - r0, L);
  const TileKind kind = mask.classify(r0, r1, c0, c0 + nkb);
  if (kind == TileKind::empty) return;
  const bool transform = ts.softcap > 0 || ts.slope != 0;
  const float fused_scale = transform ? 1.0f : ts.scale;
  const float hidden = fused_scale < 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  ts.c0 = c0;
  ts.r0 = r0;
  if (p.exact_scores) {
    const hn::ScalableTag<double> dd;
    Gemm(dd, nkb, W, k.data, k.ld, 1, w.qt + bi * dim * ld, ld, dim, w.sd, ld, false);
    if (transform) TransformScoresExact(dd, w.sd, ld, nkb, W, ts, nullptr);
    if (kind == TileKind::partial)
      MaskScoresExact(dd, w.sd, ld, nkb, W, c0, w.kbeg + bi * ld, w.kend + bi * ld, hidden);
    AddExpMinusLseExact(dd, w.sd, ld, nkb, W, fused_scale, w.lse + bi * ld, w.rnorm + bi * ld);
    return;
  }
  Gemm(d, nkb, W, k.data, k.ld, 1, w.qt + bi * dim * ld, ld, dim, w.st, ld, false);
  if (transform) TransformScores(d, w.st, ld, nkb, W, ts, nullptr);
  if (kind == TileKind::partial) MaskScores(d, w.st, ld, nkb, W, c0, w.kbeg + bi * ld, w.kend + bi * ld, hidden);
  AddExpMinusLse(d, w.st, ld, nkb, W, fused_scale, w.lse + bi * ld, w.rnorm + bi * ld);
}

// Computes dq of query head h of sequence s and its contribution to dk, dv of kv head h / group:
// written to dk, dv when the group has one head, else as fp32 rows of `partial`.
void BackwardItem(const BackwardArgs& a, const Plan& p, BackwardScratch& w, int64_t s, int64_t h,
                  float* partial) {
  const hn::ScalableTag<float> d;
  const hn::ScalableTag<double> dd;  // exact scores (same columns, half the lanes or one)
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const Sequence seq = sequence(a, s);
  const Mask& mask = seq.mask;
  const int64_t nq = mask.seqlen_q, nk = mask.seqlen_k, kvh = h / p.group;
  const int64_t nqb = ceil_div(nq, p.block_q);
  const int64_t ld = p.qpad, dim = p.dim, dp = p.dpad;
  const int64_t Wd = round_up(dim, L);
  const float scale = effective_scale(a);

  for (int64_t qb = 0; qb < nqb; ++qb) PrepareBlock(a, p, w, seq, h, qb, qb);

  Rows k, v;  // keys [c0, c1) of the current block
  TileScores ts;
  ts.scale = scale;
  ts.diag = mask.diag();
  ts.softcap = a.softcap;
  ts.slope = alibi_slope(a, s, h);
  if (nk > 0 && NeedsSelfNorm(a)) {
    // rnorm = 1 / Σ_j exp(S − LSE), key blocks in the same order as below (sums start from 0).
    std::fill(w.rnorm, w.rnorm + w.blocks * ld, 0.0f);
    for (int64_t c0 = 0; c0 < nk; c0 += p.block_k) {
      const int64_t nkb = std::min(p.block_k, nk - c0);
      block_kv(a, p, seq, kvh, c0, nkb, w.kv, k, v, WidenRow);
      for (int64_t qb = 0; qb < nqb; ++qb) AddRowSums(d, p, w, mask, k, ts, c0, nkb, qb, qb);
    }
    // A row whose sum is 0 sees no key (its LSE is +∞ here): r = 0 keeps its P at 0.
    for (int64_t i = 0; i < w.blocks * ld; ++i) w.rnorm[i] = w.rnorm[i] > 0 ? 1.0f / w.rnorm[i] : 0.0f;
  }
  const bool transform = ts.softcap > 0 || ts.slope != 0;
  const float fused_scale = transform ? 1.0f : scale;  // as in the forward
  const float hidden = fused_scale < 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  float* partial_k = partial ? partial + ((s * p.heads_q + h) * p.max_k) * dim : nullptr;
  float* partial_v = partial ? partial_k + p.sequences * p.heads_q * p.max_k * dim : nullptr;
  for (int64_t c0 = 0; c0 < nk; c0 += p.block_k) {
    const int64_t c1 = std::min(c0 + p.block_k, nk), nkb = c1 - c0;
    std::fill(w.dkt, w.dkt + nkb * dp, 0.0f);
    std::fill(w.dvt, w.dvt + nkb * dp, 0.0f);
    block_kv(a, p, seq, kvh, c0, nkb, w.kv, k, v, WidenRow);
    const float* kb = k.data;
    const float* vb = v.data;
    for (int64_t qb = 0; qb < nqb; ++qb) {
      const int64_t r0 = qb * p.block_q, r1 = std::min(r0 + p.block_q, nq), rows = r1 - r0;
      const TileKind kind = mask.classify(r0, r1, c0, c1);
      if (kind == TileKind::empty) continue;
      const int64_t W = round_up(rows, L), bi = qb;
      const float* qt = w.qt + bi * dim * ld;
      const float* dot = w.dot + bi * dim * ld;
      float* dqt = w.dqt + bi * dim * ld;
      const float* qr = w.qr + bi * ld * dp;
      const float* dor = w.dor + bi * ld * dp;
      // S = Q·Kᵀ  (Sᵀ[j][i] = Σ_x K[c0+j][x] · Qᵀ[x][i]; scaled below), P = exp(S − LSE)·r
      // (in fp64 up to the exponent for fp32 inputs, as in the forward)
      ts.c0 = c0;
      ts.r0 = r0;
      float* tt = ts.softcap > 0 ? w.tt : nullptr;
      if (p.exact_scores) {
        Gemm(dd, nkb, W, kb, k.ld, 1, qt, ld, dim, w.sd, ld, false);
        if (transform) TransformScoresExact(dd, w.sd, ld, nkb, W, ts, tt);
        if (kind == TileKind::partial)
          MaskScoresExact(dd, w.sd, ld, nkb, W, c0, w.kbeg + bi * ld, w.kend + bi * ld, hidden);
        ExpMinusLseExact(dd, w.sd, w.st, ld, nkb, W, fused_scale, w.lse + bi * ld, w.rnorm + bi * ld);
      } else {
        Gemm(d, nkb, W, kb, k.ld, 1, qt, ld, dim, w.st, ld, false);
        if (transform) TransformScores(d, w.st, ld, nkb, W, ts, tt);
        if (kind == TileKind::partial)
          MaskScores(d, w.st, ld, nkb, W, c0, w.kbeg + bi * ld, w.kend + bi * ld, hidden);
        ExpMinusLse(d, w.st, ld, nkb, W, fused_scale, w.lse + bi * ld, w.rnorm + bi * ld);
      }
      // dP = dO·Vᵀ  (dPᵀ[j][i] = Σ_x V[c0+j][x] · dOᵀ[x][i])
      Gemm(d, nkb, W, vb, v.ld, 1, dot, ld, dim, w.dpt, ld, false);
      // dS = scale · P∘(dP − D) [∘(1 − t²)]
      GradScores(d, w.st, w.dpt, ts.softcap > 0 ? w.tt : nullptr, ld, nkb, W, w.dd + bi * ld, scale);
      // dV += Pᵀ·dO  (dV[j][x] += Σ_i Pᵀ[j][i] · dO[i][x])
      Gemm(d, nkb, Wd, w.st, ld, 1, dor, dp, rows, w.dvt, dp, true);
      // dK += dSᵀ·Q  (dK[j][x] += Σ_i dSᵀ[j][i] · Q[i][x])
      Gemm(d, nkb, Wd, w.dpt, ld, 1, qr, dp, rows, w.dkt, dp, true);
      // dQ += dS·K  (dQᵀ[x][i] += Σ_j K[c0+j][x] · dSᵀ[j][i])
      Gemm(d, dim, W, kb, 1, k.ld, w.dpt, ld, nkb, dqt, ld, true);
    }
    for (int64_t j = 0; j < nkb; ++j) {
      if (partial) {
        std::copy(w.dkt + j * dp, w.dkt + j * dp + dim, partial_k + (c0 + j) * dim);
        std::copy(w.dvt + j * dp, w.dvt + j * dp + dim, partial_v + (c0 + j) * dim);
        continue;
      }
      const int64_t r = seq.k_start + c0 + j;
      store_row(a.dk.data, a.dk.dtype, a.dk.offset(seq.batch, r, kvh), dim, w.dkt + j * dp);
      store_row(a.dv.data, a.dv.dtype, a.dv.offset(seq.batch, r, kvh), dim, w.dvt + j * dp);
    }
  }
  // Keys past seqlens_k are never visible: zero gradient (the group sum writes them otherwise).
  for (int64_t j = nk; j < seq.k_rows && !partial; ++j) {
    const int64_t r = seq.k_start + j;
    store_zero_row(a.dk.data, a.dk.dtype, a.dk.offset(seq.batch, r, kvh), dim);
    store_zero_row(a.dv.data, a.dv.dtype, a.dv.offset(seq.batch, r, kvh), dim);
  }
  for (int64_t qb = 0; qb < nqb; ++qb) {
    const int64_t r0 = qb * p.block_q, rows = std::min(p.block_q, nq - r0);
    const float* dqt = w.dqt + qb * dim * ld;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t x = 0; x < dim; ++x) w.row[x] = dqt[x * ld + i];
      store_row(a.dq.data, a.dq.dtype, a.dq.offset(seq.batch, seq.q_start + r0 + i, h), dim, w.row);
    }
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

}  // namespace

// Runs the whole backward call on this target: work items (sequence, query head) are claimed
// dynamically and each writes only its own dq rows and dk, dv rows (or partials); with GQA/MQA a
// second loop sums the partials of each (sequence, kv head).
void BackwardTarget(const BackwardArgs& a, const Plan& p) {
  const int64_t heads = a.q.heads;
  const int64_t items = p.sequences * heads;
  if (items == 0) return;
  const size_t floats = backward_scratch_floats(p);
  const size_t partial_floats = backward_partial_floats(p);
  float* partial = partial_floats ? call_scratch(partial_floats) : nullptr;
  const int64_t groups = p.sequences * a.k.heads;
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(p.threads)
  {
    float* scratch = nullptr;
    try {
      scratch = thread_scratch(floats);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      error = std::current_exception();
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      if (!scratch) continue;
      BackwardScratch w(scratch, p);
      BackwardItem(a, p, w, it / heads, it % heads, partial);
    }
    if (partial) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < groups; ++it) {
        if (!scratch) continue;
        BackwardScratch w(scratch, p);
        SumGroup(a, p, partial, w.row, it / a.k.heads, it % a.k.heads);
      }
    }
  }
  if (error) std::rethrow_exception(error);
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
