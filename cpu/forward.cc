// Forward pass: for each (sequence, query head, block of query rows) walk the key blocks that the
// rows can see, S = Q·Kᵀ into a small fp32 tile, mask only partial tiles, online softmax,
// O += P·V; finally O /= l and LSE = m + log l. Only out and lse are written.
//
// Layout: the query rows of a block run along the vector lanes (Qᵀ, Sᵀ, Oᵀ are [. x qpad]), so the
// K and V rows are broadcast from memory in place (f32) or from one fp32 copy per head (f16, bf16),
// and row max / row sum are lane-wise.
#include <algorithm>
#include <cmath>
#include <limits>

#include "bf16_dot.h"
#include "block_tiles.h"
#include "flashattn/problem.hpp"
#include "plan.h"
#include "kv.h"
#include "parallel.h"
#include "rows.h"
#include "scratch.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "forward.cc"
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

// What one thread keeps from item to item: the SharedKv slot it holds, and which head's key norms
// w.knorm holds.
struct HeadState {
  int kv_slot = -1;
  KvCopy norms;
  KvCopy packed;  // whose K, V the bf16 pairs (ForwardScratch kp, vp, tiny) hold
};

// A forward work item: query block qb of query head h of sequence s (s < 0: none).
struct Item {
  int64_t s = -1, h = 0, qb = 0;
};

// Returns work item `it` of the call. Within a head the last query blocks come first: with a causal
// mask they see the most keys, so the cheapest items end the loop and the threads finish together.
Item item_at(int64_t it, int64_t nqb, int64_t heads) {
  return {it / (nqb * heads), (it / nqb) % heads, nqb - 1 - it % nqb};
}

// Prefetches into L2 the q rows of `next`, the item this thread runs after the current one: they
// arrive while the current item's last tile computes (software pipelining across items).
void PrefetchItemRows(const ForwardArgs& a, const Plan& p, const Item& next) {
  if (next.s < 0) return;
  const Sequence seq = sequence(a, next.s);
  const int64_t r0 = next.qb * p.block_q, r1 = std::min(r0 + p.block_q, seq.mask.seqlen_q);
  for (int64_t r = r0; r < r1; ++r) {
    prefetch_row(a.q.data, a.q.dtype, a.q.offset(seq.batch, seq.q_start + r, next.h), p.dim, PrefetchFor::read_soon);
  }
}

// Packs keys [0, seqlen_k) of head kvh of sequence seq into w.kp, w.vp, w.tiny (ForwardScratch),
// unless `packed` says the thread's buffers hold them already: consecutive work items of a head
// run on one thread, so each head is packed about once per thread instead of once per query block.
void PackHeadBf16(const AttentionArgs& a, const Plan& p, ForwardScratch& w, KvCopy& packed, const Sequence& seq,
                  int64_t kvh) {
  if (!packed.refill(p, seq, kvh)) return;
  const int64_t nk = seq.mask.seqlen_k, d2 = ceil_div(p.dim, 2);
  w.tiny[0] = 0;
  for (int64_t j = 0; j < nk; j += 2) {
    const bool two = j + 1 < nk;
    const bool t0 = PackBf16Row(bf16_key_row(a.k, a, seq, kvh, j), p.dim, w.kp + j * d2);
    const bool t1 = two && PackBf16Row(bf16_key_row(a.k, a, seq, kvh, j + 1), p.dim, w.kp + (j + 1) * d2);
    const uint16_t* v1 = two ? bf16_key_row(a.v, a, seq, kvh, j + 1) : nullptr;
    const bool v = PackBf16RowPair(bf16_key_row(a.v, a, seq, kvh, j), v1, p.dim, w.vp + (j / 2) * p.dpad);
    w.tiny[j + 1] = w.tiny[j] + (t0 || v);  // a tiny v of the pair counts for both keys
    if (two) w.tiny[j + 2] = w.tiny[j + 1] + (t1 || v);
  }
}

// One key block [c0, c0 + nk) of a bf16 forward with bf16 tile products (bf16_dot.h) from the
// head's packed K, V (PackHeadBf16): S = Q·Kᵀ, softmax as in ForwardItem, Pᵀ rounded to bf16 and
// paired (dropped first with `drop`), O += P·V. Tiles with a tiny value in q, k or v (bf16-inl.h) use the exact kernel. The
// head's value pairs are keys (2t, 2t + 1): a block that starts or ends at an odd key (under a
// window, or in a block mask's tiles) pairs its own values, so no key outside [c0, c1) enters its
// P·V (a NaN value of a key the block mask skips would otherwise meet a zero P: 0·NaN = NaN).
void ForwardTileBf16(const ForwardArgs& a, const Plan& p, ForwardScratch& w, const Sequence& seq, int64_t h,
                     int64_t kvh, int64_t c0, int64_t nk, int64_t W, int64_t rows, TileKinds kinds, bool transform,
                     float fused_scale, float hidden, const TileScores& ts, bool q_tiny, const Dropout* drop) {
  const hn::ScalableTag<float> d;
  const int64_t dim = p.dim, d2 = ceil_div(dim, 2), ld = p.qpad, c1 = c0 + nk;
  const bool tiny = q_tiny || w.tiny[c1] != w.tiny[c0];
  const uint32_t* vpairs = w.vp + (c0 / 2) * p.dpad;
  if (c0 % 2 != 0 || (c1 % 2 != 0 && c1 < seq.mask.seqlen_k)) {
    for (int64_t j = 0; j < nk; j += 2) {
      const uint16_t* r1 = j + 1 < nk ? bf16_key_row(a.v, a, seq, kvh, c0 + j + 1) : nullptr;
      PackBf16RowPair(bf16_key_row(a.v, a, seq, kvh, c0 + j), r1, dim, w.vt + (j / 2) * p.dpad);
    }
    vpairs = w.vt;
  }
  const float inf = std::numeric_limits<float>::infinity();
  float* tmax = !transform && kinds.kind() == TileKind::full && fused_scale > 0 ? w.tmax : nullptr;
  if (tmax) std::fill(tmax, tmax + W, -inf);
  // Sᵀ[j][i] = Σ_t K(c0+j) pair t · Qᵀ pair t [i]
  GemmBf16Pairs(Matrix<float>{w.st, nk, W, ld}, PairMatrix{w.kp + c0 * d2, nk, d2, d2}, pairs_of(w.qt, d2, W, ld),
                Accumulate::no, products_for(tiny), tmax);
  if (transform) TransformScores(d, w.st, ld, nk, W, ts, nullptr);
  if (kinds.rule == TileKind::partial) MaskScores(d, w.st, ld, nk, W, c0, w.kbeg, w.kend, hidden);
  if (kinds.blocks == TileKind::partial) MaskBlockTile(a.block_mask, seq.index, h, ts.r0, rows, c0, nk, w.st, ld, hidden);
  OnlineSoftmax(d, w.st, ld, nk, W, fused_scale, w.m, w.l, w.alpha, tmax);
  RescaleColumns(d, w.ot, ld, p.dim, W, w.alpha);
  if (drop) DropoutTile(d, w.st, ld, nk, W, c0, ts.r0, *drop, nullptr);
  if (tiny) {  // keeps subnormal P
    PackProbabilityPairs(d, w.st, ld, nk, W, w.pp);
  } else {
    PairRowsToBf16Fast(w.st, ld, nk, W, w.pp);
  }
  // Oᵀ[x][i] += Σ_t V pair t [x] · Pᵀ pair t [i]
  GemmBf16Pairs(Matrix<float>{w.ot, dim, W, ld}, Transposed(PairMatrix{vpairs, ceil_div(nk, 2), dim, p.dpad}),
                PairMatrix{w.pp, ceil_div(nk, 2), W, ld}, Accumulate::yes, products_for(tiny));
}

// Computes rows [r0, r0 + block_q) of query head h of sequence s; prefetches the rows of `next`.
void ForwardItem(const ForwardArgs& a, const Plan& p, ForwardScratch& w, SharedKv& shared, HeadState& held,
                 const Item& item, const Item& next) {
  const int64_t s = item.s, h = item.h, qb = item.qb;
  const hn::ScalableTag<float> d;
  const hn::ScalableTag<double> dd;  // exact scores (same columns, half the lanes or one)
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const Sequence seq = sequence(a, s);
  const Mask& mask = seq.mask;
  const int64_t r0 = qb * p.block_q;
  if (r0 >= mask.seqlen_q) {
    PrefetchItemRows(a, p, next);
    return;
  }
  const int64_t r1 = std::min(r0 + p.block_q, mask.seqlen_q);
  const int64_t rows = r1 - r0;
  const int64_t W = round_up(rows, L);
  const int64_t ld = p.qpad, dim = p.dim;
  const float scale = effective_scale(a);
  const float inf = std::numeric_limits<float>::infinity();

  // Q rows in fp32, then Qᵀ; Oᵀ = 0, row state; padded lanes see no key. qmax2: the largest
  // squared norm of the rows, for the adaptive choice of exact scores.
  const bool adaptive = p.exact_scores && p.scores == ScorePrecision::adaptive;
  float qmax2 = 0.0f;
  for (int64_t i = 0; i < rows; ++i) prefetch_row(a.q.data, a.q.dtype, a.q.offset(seq.batch, seq.q_start + r0 + i, h), dim);
  for (int64_t i = 0; i < W; ++i) {
    float* qi = w.rows + i * p.dpad;
    if (i < rows) {
      WidenRow(a.q.data, a.q.dtype, a.q.offset(seq.batch, seq.q_start + r0 + i, h), dim, qi);
      if (adaptive) qmax2 = std::max(qmax2, MaxSquaredNorm(d, qi, dim, 1, dim));
      w.kbeg[i] = static_cast<int32_t>(mask.key_begin(r0 + i));
      w.kend[i] = static_cast<int32_t>(mask.key_end(r0 + i));
    } else {
      std::fill(qi, qi + dim, 0.0f);
      w.kbeg[i] = w.kend[i] = 0;
    }
    std::fill(qi + dim, qi + p.dpad, 0.0f);
    // An attention sink is the softmax's initial state: a running max of sink with sum exp(0) = 1
    // and no value. A row that then sees no key ends with O = 0/1 = 0 and LSE = sink.
    w.m[i] = a.sinks ? a.sinks[h] : -inf;
    w.l[i] = a.sinks ? 1.0f : 0.0f;
  }
  // bf16 tile products: Qᵀ as pairs [ceil(d/2) x W] (a 32-bit transpose of the bf16 rows; the rows
  // above only prepared the row state and stay unused).
  const int64_t d2 = ceil_div(dim, 2);
  bool q_tiny = false;
  if (kBf16Path && p.bf16_dot) {
    auto* qrows = reinterpret_cast<uint32_t*>(w.rows);
    const auto* q16 = static_cast<const uint16_t*>(a.q.data);
    for (int64_t i = 0; i < W; ++i) {
      uint32_t* qi = qrows + i * p.dpad;
      if (i < rows) {
        q_tiny |= PackBf16Row(q16 + a.q.offset(seq.batch, seq.q_start + r0 + i, h), dim, qi);
      } else {
        std::fill(qi, qi + d2, 0u);
      }
      std::fill(qi + d2, qi + p.dpad, 0u);
    }
    Transpose(d, w.rows, p.dpad, W, d2, w.qt, ld);  // moves bits: pairs are not floats
  } else {
    Transpose(d, w.rows, p.dpad, W, dim, w.qt, ld);
  }
  for (int64_t x = 0; x < p.dpad; ++x) {
    for (int64_t i = 0; i < W; i += L) hn::Store(hn::Zero(d), d, w.ot + x * ld + i);
  }

  const int64_t key_lo = mask.rows_key_begin(r0), key_hi = mask.rows_key_end(r1);
  if (key_lo < key_hi) {
    Rows k, v;
    const int64_t kvh = kv_head(h, a.q.heads, a.k.heads);
    if (kBf16Path && p.bf16_dot) {
      PackHeadBf16(a, p, w, held.packed, seq, kvh);  // the bf16 rows as pairs
    } else if (p.copy_kv) {
      shared.acquire(a, seq, kvh, held.kv_slot, k, v, {WidenRow, DequantizeRow});
    } else {
      in_place_kv(a, seq, kvh, k, v);
    }
    if (adaptive && held.norms.refill(p, seq, kvh)) RowSquaredNorms(d, k.data, k.ld, mask.seqlen_k, dim, w.knorm);
    TileScores ts;
    ts.scale = scale;
    ts.r0 = r0;
    ts.diag = mask.diag();
    ts.softcap = a.softcap;
    ts.slope = alibi_slope(a, s, h);
    ts.bias = p.bias ? w.bt : nullptr;
    const ConstTensor bias = bias_view(a);
    // Dropout after the softmax step: l and the LSE sum the undropped P.
    const Dropout drop = p.dropout ? MakeDropout(a, s, h) : Dropout{};
    const bool transform = ts.needs_transform();
    // Without transforms the scale is fused into the softmax; masked raw scores must then become −∞
    // after multiplying by it.
    const float fused_scale = transform ? 1.0f : scale;
    const float hidden = fused_scale < 0 ? inf : -inf;
    const ConstMatrix qt{w.qt, dim, W, ld};  // Qᵀ [d x W]
    const Matrix<float> ot{w.ot, dim, W, ld};  // Oᵀ [d x W]
    // Returns the first tile at or after key c that the rows see: c itself without a block mask;
    // with one, tiles of unlisted blocks are passed over (never read, nor prefetched).
    const auto visited_from = [&](int64_t c) {
      while (a.block_mask.used() && c < key_hi &&
             classify_tiles(a, seq, h, r0, r1, c, std::min(c + p.block_k, key_hi)).kind() == TileKind::empty)
        c += p.block_k;
      return std::min(c, key_hi);
    };
    for (int64_t c0 = visited_from(first_key_tile(a, key_lo, p.block_k)), c_next; c0 < key_hi; c0 = c_next) {
      const int64_t c1 = std::min(c0 + p.block_k, key_hi), nk = c1 - c0;
      c_next = visited_from(c1);
      if (!(kBf16Path && p.bf16_dot)) prefetch_kv_block(k, v, c_next, c_next + p.block_k, key_hi, dim);
      if (c_next == key_hi) {  // the last tile: start the misses of this item's out rows and the next q rows
        for (int64_t i = 0; i < rows; ++i) {
          prefetch_row(a.out.data, a.out.dtype, a.out.offset(seq.batch, seq.q_start + r0 + i, h), dim, PrefetchFor::write);
        }
        PrefetchItemRows(a, p, next);
      }
      const TileKinds kinds = classify_tiles(a, seq, h, r0, r1, c0, c1);
      const TileKind kind = kinds.kind();
      if (kind == TileKind::empty) continue;
      const Matrix<float> st{w.st, nk, W, ld};  // Sᵀ, then Pᵀ [nk x W]
      // S = Q·Kᵀ  (Sᵀ[j][i] = Σ_x K[c0+j][x] · Qᵀ[x][i]; scaled below), then
      // P = exp(S − m'), l' = l·α + rowsum(P): in fp64 up to the exponent for fp32 inputs whose
      // tile has large scores
      ts.c0 = c0;
      if (p.bias) {
        ts.bias_bound = LoadBiasTile(d, bias, s, h, r0, rows, W, c0, nk, w.brows, bias_ld(p), w.bt, ld, adaptive);
      }
      const float kmax2 = adaptive ? MaxOf(w.knorm + c0, nk) : 0.0f;
      if (kBf16Path && p.bf16_dot) {
        ForwardTileBf16(a, p, w, seq, h, kvh, c0, nk, W, rows, kinds, transform, fused_scale, hidden, ts, q_tiny,
                        p.dropout ? &drop : nullptr);
        continue;
      }
      const ConstMatrix kblock = row_block(k, c0, nk, dim);  // K[c0, c1)
      if (exact_tile(p, TileScoreBound(ts, qmax2, kmax2, r1, c1))) {
        Gemm(dd, Matrix<double>{w.sd, nk, W, ld}, kblock, qt, Accumulate::no);
        if (transform) TransformScoresExact(dd, w.sd, ld, nk, W, ts, nullptr);
        if (kinds.rule == TileKind::partial) MaskScoresExact(dd, w.sd, ld, nk, W, c0, w.kbeg, w.kend, hidden);
        if (kinds.blocks == TileKind::partial)
          MaskBlockTile<double>(a.block_mask, s, h, r0, rows, c0, nk, w.sd, ld, hidden);
        OnlineSoftmaxExact(dd, w.sd, w.st, ld, nk, W, fused_scale, w.m, w.l, w.alpha);
      } else {
        // A full tile of plain scores takes its row max from the product's registers.
        float* tmax = !transform && kind == TileKind::full && fused_scale > 0 ? w.tmax : nullptr;
        if (tmax) std::fill(tmax, tmax + W, -inf);
        Gemm(d, st, kblock, qt, Accumulate::no, tmax);
        if (transform) TransformScores(d, w.st, ld, nk, W, ts, nullptr);
        if (kinds.rule == TileKind::partial) MaskScores(d, w.st, ld, nk, W, c0, w.kbeg, w.kend, hidden);
        if (kinds.blocks == TileKind::partial) MaskBlockTile(a.block_mask, s, h, r0, rows, c0, nk, w.st, ld, hidden);
        OnlineSoftmax(d, w.st, ld, nk, W, fused_scale, w.m, w.l, w.alpha, tmax);
      }
      if (p.dropout) DropoutTile(d, w.st, ld, nk, W, c0, r0, drop, nullptr);  // P̃ = P·Z/(1 − p)
      // O = O·α + P·V  (Oᵀ[x][i] = Oᵀ[x][i]·α_i + Σ_j V[c0+j][x] · Pᵀ[j][i]; one rounding of O per tile)
      GemmRescaled(d, ot, Transposed(row_block(v, c0, nk, dim)), st, w.alpha);
    }
  }

  if (key_lo >= key_hi) PrefetchItemRows(a, p, next);  // no tile: every row is empty
  // O = O / l, LSE = m + log l; a row with l == 0 saw no key: O = 0, LSE = −∞. A row whose sum is
  // NaN read a NaN (or inf − inf) score: O and LSE are NaN, never a plausible finite value.
  for (int64_t i = 0; i < W; i += L) {
    const auto l = hn::Load(d, w.l + i);
    const auto seen = hn::Or(hn::Gt(l, hn::Zero(d)), hn::IsNaN(l));
    for (int64_t x = 0; x < dim; ++x) {
      float* o = w.ot + x * ld + i;
      hn::Store(hn::IfThenElseZero(seen, hn::Div(hn::Load(d, o), l)), d, o);
    }
  }
  Transpose(d, w.ot, ld, p.dpad, W, w.rows, p.dpad);  // O rows
  for (int64_t i = 0; i < rows; ++i) {
    store_row(a.out.data, a.out.dtype, a.out.offset(seq.batch, seq.q_start + r0 + i, h), dim, w.rows + i * p.dpad);
    const float l = w.l[i];
    if (a.lse) a.lse[lse_index(a, seq, h, r0 + i)] = l > 0 || std::isnan(l) ? w.m[i] + std::log(l) : -inf;
  }
}

}  // namespace

// Chunks of consecutive work items per thread: at least this many per thread, so dynamic claiming
// still balances causal work.
constexpr int64_t kChunksPerThread = 8;

// Runs the whole forward call on this target: work items (sequence, head, query block) are claimed
// dynamically in chunks of consecutive items (mostly one head: the next item's rows are known and
// prefetched, and the bshd K/V head copy is reused); each writes its own rows, so the result does
// not depend on the thread count.
void ForwardTarget(const ForwardArgs& a, const Plan& p) {
  const int64_t nqb = ceil_div(p.max_q, p.block_q);
  const int64_t heads = a.q.heads;
  const int64_t items = num_sequences(a) * heads * nqb;
  if (items == 0) return;
  const int64_t chunk = std::clamp<int64_t>(items / (p.threads * kChunksPerThread), 1, nqb);
  const size_t shared_floats = forward_shared_floats(p);
  SharedKv shared(shared_floats ? call_scratch(shared_floats) : nullptr, p);
  const size_t floats = forward_scratch_floats(p);
  struct Thread {
    float* scratch;
    HeadState held;
  };
  ParallelFor(
      p.threads, items, chunk, [&] { return Thread{thread_scratch(floats), {}}; },
      [&](int64_t it, Thread& t) {
        // A local view of the layout: its pointers stay in registers across the item's calls.
        ForwardScratch w = place<ForwardScratch>(t.scratch, p);
        // The next item of the chunk runs on this thread next.
        const bool next_here = (it + 1) % chunk != 0 && it + 1 < items;
        ForwardItem(a, p, w, shared, t.held, item_at(it, nqb, heads), next_here ? item_at(it + 1, nqb, heads) : Item{});
      });
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::cpu {
HWY_EXPORT(ForwardTarget);

void detail::forward_on_target(int64_t target, const ForwardArgs& a, const Plan& p) {
  HWY_DISPATCH_TABLE(ForwardTarget)[dispatch_index(target)](a, p);
}
}  // namespace flashattn::cpu
#endif  // HWY_ONCE
