// Dropout on transposed probability tiles (Pᵀ[j][i]: key j of the tile, query row i in the lanes):
// the keep decisions of flashattn/philox.hpp (the one definition), generated per tile instead of
// stored. With rows in the lanes, one vector of Philox4x32-10 calls decides 8 consecutive keys of
// as many rows as there are lanes: counter (key group, row, stream) differs only in the row word.
// The 32x32 -> 64-bit products of the rounds come from MulEven on the even lanes and on the odd
// lanes shifted down, recombined into the high and low halves lane-wise.
//
// Per-target include guard (Highway's toggle idiom): re-included once per target by foreach_target.
#if defined(FLASHATTN_CPU_DROPOUT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_DROPOUT_INL_H_
#undef FLASHATTN_CPU_DROPOUT_INL_H_
#else
#define FLASHATTN_CPU_DROPOUT_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "flashattn/args.hpp"
#include "flashattn/philox.hpp"
#include "flashattn/problem.hpp"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The dropout of one (sequence, query head): its Philox stream and what a kept P is scaled by.
struct Dropout {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint32_t threshold = 0;  // keep iff the 16 random bits are >= threshold
  float keep_scale = 1;    // 1 / (1 − p)
};

// Returns the dropout of query head h of sequence s of a call with dropout_p > 0.
inline Dropout MakeDropout(const AttentionArgs& a, int64_t s, int64_t h) {
  Dropout r;
  r.seed = a.dropout_seed;
  r.stream = dropout_stream(a.dropout_offset, s, a.q.heads, h);
  r.threshold = dropout_threshold(a.dropout_p);
  r.keep_scale = dropout_keep_scale(a.dropout_p);
  return r;
}

#if HWY_TARGET != HWY_SCALAR
// hi, lo = the high and low 32 bits of x·m lane-wise (u32 lanes).
template <class DU>
HWY_INLINE void MulHiLo(DU du, hn::Vec<DU> x, hn::Vec<DU> m, hn::Vec<DU>& hi, hn::Vec<DU>& lo) {
  const hn::Repartition<uint64_t, DU> d64;
  const auto even = hn::MulEven(x, m);  // products of lanes 0, 2, … as u64
  const auto odd = hn::MulEven(hn::BitCast(du, hn::ShiftRight<32>(hn::BitCast(d64, x))), m);
  hi = hn::OddEven(hn::BitCast(du, odd), hn::BitCast(du, hn::ShiftRight<32>(even)));
  lo = hn::OddEven(hn::BitCast(du, hn::ShiftLeft<32>(odd)), hn::BitCast(du, even));
}

// (x0, x1, x2, x3) = Philox4x32-10((j8, row of each lane, stream), seed) for the lanes' rows r0,
// r0 + 1, … (philox4x32_10 of flashattn/philox.hpp, lane-wise). Four named vectors, not an array:
// SVE vectors are sizeless types, which cannot be array elements.
template <class DU>
HWY_INLINE void PhiloxRows(DU du, const Dropout& dr, int64_t j8, int64_t r0, hn::Vec<DU>& x0, hn::Vec<DU>& x1,
                           hn::Vec<DU>& x2, hn::Vec<DU>& x3) {
  x0 = hn::Set(du, static_cast<uint32_t>(j8));
  x1 = hn::Iota(du, static_cast<uint32_t>(r0));
  x2 = hn::Set(du, static_cast<uint32_t>(dr.stream));
  x3 = hn::Set(du, static_cast<uint32_t>(dr.stream >> 32));
  const auto m0 = hn::Set(du, 0xD2511F53u), m1 = hn::Set(du, 0xCD9E8D57u);
  uint32_t k0 = static_cast<uint32_t>(dr.seed), k1 = static_cast<uint32_t>(dr.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    hn::Vec<DU> hi0, lo0, hi1, lo1;
    MulHiLo(du, x0, m0, hi0, lo0);
    MulHiLo(du, x2, m1, hi1, lo1);
    x0 = hn::Xor(hn::Xor(hi1, x1), hn::Set(du, k0));
    x1 = lo1;
    x2 = hn::Xor(hn::Xor(hi0, x3), hn::Set(du, k1));
    x3 = lo0;
  }
}
#endif

// Multiplies Pᵀ[j][i] (t[j·ld + i], keys c0 + j for j < nk, query rows r0 + i for i < W) by
// Z_ij / (1 − p): 0 for a dropped element, keep_scale for a kept one; with keep_out set, also writes
// the factors there (same layout), for a second tile that drops the same elements. Lanes past the
// block's rows get decisions of rows past it: harmless, they hold no result.
template <class D>
HWY_INLINE void DropoutTile(D d, float* HWY_RESTRICT t, int64_t ld, int64_t nk, int64_t W, int64_t c0, int64_t r0,
                            const Dropout& dr, float* HWY_RESTRICT keep_out) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t c1 = c0 + nk;
#if HWY_TARGET == HWY_SCALAR
  for (int64_t w = 0; w < W; w += L) {
    for (int64_t j8 = c0 / 8; j8 * 8 < c1; ++j8) {
      const uint32_t bits = dropout_keep_bits(dr.seed, dr.stream, r0 + w, j8, dr.threshold);
      for (int64_t key = std::max(j8 * 8, c0); key < std::min(j8 * 8 + 8, c1); ++key) {
        const float f = (bits >> (key % 8)) & 1u ? dr.keep_scale : 0.0f;
        float* e = t + (key - c0) * ld + w;
        *e *= f;
        if (keep_out) keep_out[(key - c0) * ld + w] = f;
      }
    }
  }
#else
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto thr = hn::Set(di, static_cast<int32_t>(dr.threshold));
  const auto keep = hn::Set(d, dr.keep_scale);
  const auto low16 = hn::Set(du, 0xFFFFu);
  for (int64_t w = 0; w < W; w += L) {
    for (int64_t j8 = c0 / 8; j8 * 8 < c1; ++j8) {
#if HWY_HAVE_SCALABLE
      hn::Vec<decltype(du)> x0, x1, x2, x3;  // SVE vectors cannot be array elements
      PhiloxRows(du, dr, j8, r0 + w, x0, x1, x2, x3);
#else
      hn::Vec<decltype(du)> x[4];
      PhiloxRows(du, dr, j8, r0 + w, x[0], x[1], x[2], x[3]);
#endif
      for (int64_t key = std::max(j8 * 8, c0); key < std::min(j8 * 8 + 8, c1); ++key) {
        const int word = static_cast<int>(key % 8);
#if HWY_HAVE_SCALABLE
        const auto xw = word < 2 ? x0 : word < 4 ? x1 : word < 6 ? x2 : x3;  // x[word / 2]
#else
        const auto& xw = x[word / 2];
#endif
        const auto half = word % 2 ? hn::ShiftRight<16>(xw) : hn::And(xw, low16);
        // r < threshold: dropped (both below 2^16, so the signed compare is exact)
        const auto dropped = hn::Lt(hn::BitCast(di, half), thr);
        const auto f = hn::IfThenZeroElse(hn::RebindMask(d, dropped), keep);
        float* e = t + (key - c0) * ld + w;
        hn::Store(hn::Mul(hn::Load(d, e), f), d, e);
        if (keep_out) hn::Store(f, d, keep_out + (key - c0) * ld + w);
      }
    }
  }
#endif
}

// t[j·ld + i] *= f[j·ld + i] for j < nk, i < W: a second tile dropped like the one DropoutTile saw.
template <class D>
HWY_INLINE void MulTile(D d, float* HWY_RESTRICT t, const float* HWY_RESTRICT f, int64_t ld, int64_t nk, int64_t W) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 0; j < nk; ++j) {
    for (int64_t w = 0; w < W; w += L) hn::Store(hn::Mul(hn::Load(d, t + j * ld + w), hn::Load(d, f + j * ld + w)), d, t + j * ld + w);
  }
}

// Multiplies p[j] (keys c0 + j for j in [j0, j1)) of row i by Z_ij / (1 − p): the decode path's
// rows, keys along the lanes.
inline void DropoutRow(float* HWY_RESTRICT p, int64_t c0, int64_t j0, int64_t j1, int64_t i, const Dropout& dr) {
  uint32_t bits = 0;
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t key = c0 + j;
    if (j == j0 || key % 8 == 0) bits = dropout_keep_bits(dr.seed, dr.stream, i, key / 8, dr.threshold);
    p[j] *= (bits >> (key % 8)) & 1u ? dr.keep_scale : 0.0f;
  }
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_DROPOUT_INL_H_
