// Backward pass with recomputation. Work item = (sequence, query head); one thread does the whole
// item, so every gradient is reduced in an order fixed by the tile sizes alone: results are
// bitwise identical for any thread count and across calls.
//
// Per item, for each query block (fixed order): prepare its operands (Qᵀ, dOᵀ, Q, dO, D =
// rowsum(dO∘O), LSE); pass 1 recomputes P = exp(S − LSE) for every key block it sees into a P
// cache of the block ([keys x block_q], O(seqlen_k·block_q), never seqlen_q·seqlen_k) and, for fp32
// outputs, the row sums that renormalise P exactly; pass 2, per key block: dP = dO·Vᵀ, dS =
// P∘(dP − D) (∘ softcap derivative), dV += Pᵀ·dO and dK += dSᵀ·Q into fp32 accumulators of the
// whole head, dQ += dS·K into the block's dQ. Five tile products, S computed once. Without GQA/MQA
// dK, dV are written directly; with it each query head writes fp32 partials and a second pass
// sums each group's heads in head order (GQA/MQA still run one item per query head in parallel).
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
#include "transpose-inl.h"
#include "widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace ::flashattn::cpu::detail;  // NOLINT: Plan, scratch, rows

namespace {

// Views one backward work item's scratch (sizes in plan.cpp: backward_scratch_floats): operands of
// the current query block, the P cache of that block, and the head's dK, dV accumulators.
struct BackwardScratch {
  double* sd;     // [block_k x qpad] raw Sᵀ in fp64 (exact scores only, else null)
  float* qt;      // [d x qpad] Qᵀ
  float* dot;     // [d x qpad] dOᵀ
  float* dqt;     // [dpad x qpad] dQᵀ accumulator (fp32; rows past d stay 0)
  float* qr;      // [qpad x dpad] Q, rows zero-padded to dpad
  float* dor;     // [qpad x dpad] dO
  float* dd;      // [qpad] D = rowsum(dO∘O)
  float* lse;     // [qpad] LSE, +∞ for rows that see no key (so P = 0)
  float* rnorm;   // [qpad] 1 / Σ_j exp(S − LSE) when self-normalising
  int32_t* kbeg;  // [qpad] first visible key per row
  int32_t* kend;  // [qpad] one past the last visible key
  float* pc;      // [kpad x qpad] Pᵀ of every key block of the query block (the P cache)
  float* tc;      // [kpad x qpad] tanh(S/softcap) likewise (soft-capping only, else null)
  float* dpt;     // [block_k x qpad] dPᵀ, then dSᵀ
  float* dkt;     // [max_k x dpad] dK accumulator of the head (fp32)
  float* dvt;     // [max_k x dpad] dV accumulator of the head (fp32)
  float* dkg;     // [max_k x dpad] dK of the current group of query blocks (backward_grouped), else dkt
  float* dvg;     // [max_k x dpad] dV likewise, else dvt
  float* row;     // [dpad]
  float* kv;      // [2 x max_k x d] fp32 copy of one head of k, v (kv.h)
  float* knorm;   // [max_k] squared norms of the head's key rows (adaptive exact scores, else null)

  BackwardScratch(float* s, const Plan& p) {
    const int64_t tq = p.dim * p.qpad, tr = p.qpad * p.dpad, kpad = round_up(p.max_k, p.block_k);
    sd = nullptr;
    if (p.exact_scores) {  // first: doubles stay 64-byte aligned (all sizes are multiples of qpad)
      sd = reinterpret_cast<double*>(s);
      s = reinterpret_cast<float*>(sd + p.block_k * p.qpad);
    }
    qt = s;
    dot = qt + tq;
    dqt = dot + tq;
    qr = dqt + p.dpad * p.qpad;
    dor = qr + tr;
    dd = dor + tr;
    lse = dd + p.qpad;
    rnorm = lse + p.qpad;
    kbeg = reinterpret_cast<int32_t*>(rnorm + p.qpad);
    kend = kbeg + p.qpad;
    pc = reinterpret_cast<float*>(kend + p.qpad);
    tc = p.softcap ? pc + kpad * p.qpad : nullptr;
    dpt = pc + (p.softcap ? 2 : 1) * kpad * p.qpad;
    dkt = dpt + p.block_k * p.qpad;
    dvt = dkt + p.max_k * p.dpad;
    dkg = dkt;
    dvg = dvt;
    float* after = dvt + p.max_k * p.dpad;
    if (backward_grouped(p)) {
      dkg = after;
      dvg = dkg + p.max_k * p.dpad;
      after = dvg + p.max_k * p.dpad;
    }
    row = after;
    kv = row + p.dpad;
    knorm = p.exact_scores ? kv + (p.copy_kv ? 2 * p.max_k * p.dim : 0) : nullptr;
  }
};

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

// sum[i] += Σ_j Pᵀ[j][i] over j in [0, nk), in key order.
template <class D>
HWY_INLINE void AddRowSums(D d, const float* HWY_RESTRICT pt, int64_t ld, int64_t nk, int64_t W,
                           float* HWY_RESTRICT sum) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t w = 0; w < W; w += L) {
    auto acc = hn::Load(d, sum + w);
    for (int64_t j = 0; j < nk; ++j) acc = hn::Add(acc, hn::Load(d, pt + j * ld + w));
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

// Prepares the operands of query block qb of query head h: Qᵀ, dOᵀ, Q, dO, D, LSE, key ranges,
// dQᵀ = 0. Padded rows are zero and see no key. Returns the largest squared norm of a Q row
// (MaxSquaredNorm) when `adaptive` (exact scores chosen per tile), else 0.
float PrepareBlock(const BackwardArgs& a, const Plan& p, BackwardScratch& w, const Sequence& seq, int64_t h,
                   int64_t qb, bool adaptive) {
  const hn::ScalableTag<float> d;
  const Mask& mask = seq.mask;
  const int64_t r0 = qb * p.block_q;
  const int64_t rows = std::min(p.block_q, mask.seqlen_q - r0);
  const int64_t ld = p.qpad, dim = p.dim, dp = p.dpad;
  const float inf = std::numeric_limits<float>::infinity();
  float qmax2 = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = seq.q_start + r0 + i;
    prefetch_row(a.q.data, a.q.dtype, a.q.offset(seq.batch, r, h), dim);
    prefetch_row(a.dout.data, a.dout.dtype, a.dout.offset(seq.batch, r, h), dim);
    prefetch_row(a.out.data, a.out.dtype, a.out.offset(seq.batch, r, h), dim);
  }
  for (int64_t i = 0; i < ld; ++i) {
    float* qi = w.qr + i * dp;
    float* doi = w.dor + i * dp;
    float dsum = 0.0f;
    if (i < rows) {
      const int64_t r = seq.q_start + r0 + i;
      WidenRow(a.q.data, a.q.dtype, a.q.offset(seq.batch, r, h), dim, qi);
      WidenRow(a.dout.data, a.dout.dtype, a.dout.offset(seq.batch, r, h), dim, doi);
      WidenRow(a.out.data, a.out.dtype, a.out.offset(seq.batch, r, h), dim, w.row);
      dsum = DotLikeGemm(doi, w.row, dim);  // D = rowsum(dO∘O)
      const float l = a.lse[lse_index(a, seq, h, r0 + i)];
      w.lse[i] = l == -inf ? inf : l;
      w.kbeg[i] = static_cast<int32_t>(mask.key_begin(r0 + i));
      w.kend[i] = static_cast<int32_t>(mask.key_end(r0 + i));
      if (adaptive) qmax2 = std::max(qmax2, MaxSquaredNorm(d, qi, dp, 1, dim));
    } else {
      for (int64_t x = 0; x < dim; ++x) qi[x] = doi[x] = 0.0f;
      w.lse[i] = inf;
      w.kbeg[i] = w.kend[i] = 0;
    }
    for (int64_t x = dim; x < dp; ++x) qi[x] = doi[x] = 0.0f;
    w.dd[i] = dsum;
  }
  Transpose(d, w.qr, dp, ld, dim, w.qt, ld);
  Transpose(d, w.dor, dp, ld, dim, w.dot, ld);
  std::fill(w.dqt, w.dqt + dp * ld, 0.0f);
  return qmax2;
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
bool SelfNormalises(const Plan& p) { return p.exact_scores; }

// Computes dq of query head h of sequence s and its contribution to dk, dv of kv head h / group:
// written to dk, dv when the group has one head, else as fp32 rows of `partial`.
void BackwardItem(const BackwardArgs& a, const Plan& p, BackwardScratch& w, KvCopy& held, int64_t s, int64_t h,
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
  const bool adaptive = p.exact_scores && p.scores == ScorePrecision::adaptive;
  const bool self_norm = SelfNormalises(p);

  Rows k, v;  // keys [0, nk) of the head
  if (nk > 0) head_kv(a, p, seq, kvh, w.kv, held, k, v, WidenRow);
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
  const bool transform = ts.softcap > 0 || ts.slope != 0;
  const float fused_scale = transform ? 1.0f : scale;  // as in the forward
  const float hidden = fused_scale < 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  for (int64_t qb = 0; qb < nqb; ++qb) {
    if (grouped && qb % gb == 0) {  // a new group of query blocks
      std::fill(w.dkg, w.dkg + nk * dp, 0.0f);
      std::fill(w.dvg, w.dvg + nk * dp, 0.0f);
    }
    const int64_t r0 = qb * p.block_q, r1 = std::min(r0 + p.block_q, nq), rows = r1 - r0;
    const int64_t W = round_up(rows, L);
    const float qmax2 = PrepareBlock(a, p, w, seq, h, qb, adaptive);
    const int64_t key_lo = mask.rows_key_begin(r0), key_hi = mask.rows_key_end(r1);
    const int64_t kb_lo = key_lo / p.block_k * p.block_k;  // key blocks start at multiples of block_k
    ts.r0 = r0;
    // Pass 1: P = exp(S − LSE) of every key block the rows see, into the P cache (S = Q·Kᵀ:
    // Sᵀ[j][i] = Σ_x K[c0+j][x] · Qᵀ[x][i], in fp64 up to the exponent for fp32 inputs whose tile
    // has large scores, as in the forward); row sums for self-normalisation.
    if (self_norm) std::fill(w.rnorm, w.rnorm + ld, 0.0f);
    for (int64_t c0 = kb_lo; c0 < key_hi; c0 += p.block_k) {
      const int64_t c1 = std::min(c0 + p.block_k, nk), nkb = c1 - c0;
      const TileKind kind = mask.classify(r0, r1, c0, c1);
      if (kind == TileKind::empty) continue;
      float* pt = w.pc + c0 * ld;
      float* tt = w.tc ? w.tc + c0 * ld : nullptr;
      const float* kb = k.data + c0 * k.ld;
      ts.c0 = c0;
      for (int64_t j = c1; j < std::min(c1 + p.block_k, nk); ++j) {  // the next block's keys
        prefetch_row(k.data, DType::f32, j * k.ld, dim, PrefetchFor::read_soon);
      }
      const float kmax2 = adaptive ? MaxOf(w.knorm + c0, nkb) : 0.0f;
      if (exact_tile(p, TileScoreBound(ts, qmax2, kmax2, r1, c1))) {
        Gemm(dd, nkb, W, kb, k.ld, 1, w.qt, ld, dim, w.sd, ld, false);
        if (transform) TransformScoresExact(dd, w.sd, ld, nkb, W, ts, tt);
        if (kind == TileKind::partial) MaskScoresExact(dd, w.sd, ld, nkb, W, c0, w.kbeg, w.kend, hidden);
        ExpMinusLseExact(dd, w.sd, pt, ld, nkb, W, fused_scale, w.lse);
      } else {
        Gemm(d, nkb, W, kb, k.ld, 1, w.qt, ld, dim, pt, ld, false);
        if (transform) TransformScores(d, pt, ld, nkb, W, ts, tt);
        if (kind == TileKind::partial) MaskScores(d, pt, ld, nkb, W, c0, w.kbeg, w.kend, hidden);
        ExpMinusLse(d, pt, ld, nkb, W, fused_scale, w.lse);
      }
      if (self_norm) AddRowSums(d, pt, ld, nkb, W, w.rnorm);
    }
    // A row whose sum is 0 sees no key (its LSE is +∞ here): r = 0 keeps its P at 0.
    if (self_norm) {
      for (int64_t i = 0; i < ld; ++i) w.rnorm[i] = w.rnorm[i] > 0 ? 1.0f / w.rnorm[i] : 0.0f;
    }
    // Pass 2: the gradients, key blocks in the same order.
    for (int64_t c0 = kb_lo; c0 < key_hi; c0 += p.block_k) {
      const int64_t c1 = std::min(c0 + p.block_k, nk), nkb = c1 - c0;
      if (mask.classify(r0, r1, c0, c1) == TileKind::empty) continue;
      float* pt = w.pc + c0 * ld;
      const float* kb = k.data + c0 * k.ld;
      const float* vb = v.data + c0 * v.ld;
      {  // the next block's operands: long sequences stream them from memory
        const int64_t n1 = std::max<int64_t>(std::min(c1 + p.block_k, nk) - c1, 0);
        prefetch_kv_block(k, v, c1, c1 + n1, nk, dim);
        prefetch_row(w.dkt + c1 * dp, DType::f32, 0, n1 * dp, PrefetchFor::read_soon);
        prefetch_row(w.dvt + c1 * dp, DType::f32, 0, n1 * dp, PrefetchFor::read_soon);
        prefetch_row(w.pc + c1 * ld, DType::f32, 0, n1 * ld, PrefetchFor::read_soon);
      }
      if (self_norm) RescaleColumns(d, pt, ld, nkb, W, w.rnorm);  // P·r
      // dP = dO·Vᵀ  (dPᵀ[j][i] = Σ_x V[c0+j][x] · dOᵀ[x][i])
      Gemm(d, nkb, W, vb, v.ld, 1, w.dot, ld, dim, w.dpt, ld, false);
      // dS = scale · P∘(dP − D) [∘(1 − t²)]
      GradScores(d, pt, w.dpt, w.tc ? w.tc + c0 * ld : nullptr, ld, nkb, W, w.dd, scale);
      // dV += Pᵀ·dO  (dV[j][x] += Σ_i Pᵀ[j][i] · dO[i][x])
      Gemm(d, nkb, Wd, pt, ld, 1, w.dor, dp, rows, w.dvg + c0 * dp, dp, true);
      // dK += dSᵀ·Q  (dK[j][x] += Σ_i dSᵀ[j][i] · Q[i][x])
      Gemm(d, nkb, Wd, w.dpt, ld, 1, w.qr, dp, rows, w.dkg + c0 * dp, dp, true);
      // dQ += dS·K  (dQᵀ[x][i] += Σ_j K[c0+j][x] · dSᵀ[j][i])
      Gemm(d, dim, W, kb, 1, k.ld, w.dpt, ld, nkb, w.dqt, ld, true);
    }
    Transpose(d, w.dqt, ld, dp, W, w.qr, dp);  // dQ rows, over Q's (done with)
    for (int64_t i = 0; i < rows; ++i) {
      store_row(a.dq.data, a.dq.dtype, a.dq.offset(seq.batch, seq.q_start + r0 + i, h), dim, w.qr + i * dp);
    }
    if (grouped && (qb % gb == gb - 1 || qb == nqb - 1)) {
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
    KvCopy held;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      if (!scratch) continue;
      BackwardScratch w(scratch, p);
      BackwardItem(a, p, w, held, it / heads, it % heads, partial);
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
