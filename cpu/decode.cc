// The decode path of the forward (decode.h; docs/cpu-design.md, "Decoding"). One work item =
// (sequence, run of key/value heads, split): for each of its heads, the R = Nq·g rows (row r = i·g +
// hg: query row i of head hg of the group) are scored against each tile of keys while the tile sits
// in cache, so K and V stream from memory once per call. A tile holds block_k keys of every head of
// the run, read key by key (a key's heads are adjacent in the cache, so the item reads its memory
// front to back) where it lives — f32 as is, f16/bf16 widened in registers as the dot products and
// axpys load them — through any row stride or block table; rows whose length is not a whole number
// of vectors, and quantized rows (decoded and multiplied by their scales), are widened into small
// zero-padded per-head fp32 tiles first.
//
// Layout: keys run along the vector lanes of the scores (row r of s holds the tile's keys), so the
// online softmax of each row is one pass over its own lanes; the head dim runs along the lanes of
// Q, the tiles and O. Each row follows the forward's online softmax (score-inl.h) with its own
// mask interval and ALiBi slope.
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <type_traits>

#include "decode.h"
#include "flashattn/problem.hpp"
#include "parallel.h"
#include "rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "dropout-inl.h"
#include "exp-inl.h"
#include "score-inl.h"
#include "widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace ::flashattn::cpu::detail;  // NOLINT: Plan, DecodePlan, scratch, rows

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Per-row constants of a work item. No default member values: an item keeps an array of these
// for every head it may carry, and StartHead sets the rows it uses.
struct RowInfo {
  int64_t i;     // query row in the sequence
  int64_t h;     // query head
  int64_t kbeg;  // first visible key
  int64_t kend;  // one past the last visible key
  float slope;   // ALiBi slope (0: off)
  Dropout drop;  // its head's dropout (used when Plan::dropout)
};

// Where the rows of a work item and their outputs are.
struct ItemRows {
  RowInfo info[kDecodeMaxRows];
  int64_t count;
};

// The next tile's K and V rows, asked for a few cache lines at a time from inside the current
// tile's dot products (TileDots calls Step once per key and row group), so the lines arrive while
// the tile is computed. Asked for in one burst between heads, the same lines were no faster than
// no prefetch at all for f32 (Zen 5, B = 1, Nk = 16384); spread out, they are. The walk is key by
// key, within a key the K row of each head, then the V rows: the cache's memory order.
class TilePrefetch {
 public:
  TilePrefetch(const ForwardArgs& a, const Sequence& seq, int64_t h0, int64_t nh) : a_(a), seq_(seq), h0_(h0) {
    // The run's rows of one key in K (and in V) are one span when its heads are adjacent in the
    // row (the usual [B, N, Hk, d] caches and pages), else one span per head.
    const auto spans = [&](const ConstTensor& x, int64_t& count, int64_t& bytes) {
      const int64_t row = x.dim * static_cast<int64_t>(dtype_size(x.dtype));
      const bool adjacent = nh == 1 || x.stride_head == x.dim;
      count = adjacent ? 1 : nh;
      bytes = adjacent ? nh * row : row;
    };
    spans(a.k, kspans_, kbytes_);
    spans(a.v, vspans_, vbytes_);
  }

  // Starts the walk over keys [k0, k1), its lines spread over `steps` calls of Step.
  void Start(int64_t k0, int64_t k1, int64_t steps) {
    j_ = k0;
    end_ = k1;
    t_ = kspans_ + vspans_;  // no span open: the next one is key j_'s first
    left_ = 0;
    const int64_t lines = (k1 - k0) * (kspans_ * ceil_div(kbytes_, kLine) + vspans_ * ceil_div(vbytes_, kLine));
    per_step_ = std::max<int64_t>(ceil_div(lines, std::max<int64_t>(steps, 1)), 1);
  }

  // Asks for the next share of lines.
  void Step() { Ask(per_step_); }

  // Asks for every line of the walk not asked for yet.
  void Finish() { Ask(std::numeric_limits<int64_t>::max()); }

 private:
  static constexpr int64_t kLine = 64;

  // Asks for `lines` lines, a span's lines in one tight loop (per line, the walk had cost ~30
  // instructions: a fifth of an i8 decode step's).
  void Ask(int64_t lines) {
    const char* at = at_;
    int64_t left = left_;
    while (lines > 0) {
      if (left <= 0) {
        if (t_ == kspans_ + vspans_) {  // the key's spans are done: the next key
          if (j_ >= end_) break;
          row_ = key_row(a_, seq_, j_++);
          t_ = 0;
        }
        const bool k = t_ < kspans_;
        const int64_t h = h0_ + (k ? t_ : t_ - kspans_);
        const ConstTensor& x = k ? a_.k : a_.v;
        at = static_cast<const char*>(x.data) + x.offset(row_.batch, row_.row, h) * static_cast<int64_t>(dtype_size(x.dtype));
        left = k ? kbytes_ : vbytes_;
        ++t_;
      }
      const int64_t n = std::min(lines, ceil_div(left, kLine));
      for (int64_t i = 0; i < n; ++i) prefetch_line(at + i * kLine, PrefetchFor::read_now);
      at += n * kLine;
      left -= n * kLine;
      lines -= n;
    }
    at_ = at;
    left_ = left;
  }

  const ForwardArgs& a_;
  const Sequence& seq_;
  int64_t h0_;
  int64_t kspans_ = 1, vspans_ = 1;  // spans per key in K, in V
  int64_t kbytes_ = 0, vbytes_ = 0;  // bytes of each
  int64_t j_ = 0, end_ = 0, t_ = 0, left_ = 0, per_step_ = 1;
  KeyRow row_;
  const char* at_ = nullptr;
};

// Whether the tiles read a cache row of dtype t and n elements where it lives: when n is a whole
// number of vectors (npad) and this target loads t as fp32 vectors (widen-inl.h WidensInVectors;
// LoadWide widens in registers). Otherwise from the tile's padded fp32 copy.
inline bool InPlaceRows(DType t, int64_t n, int64_t npad) { return n == npad && WidensInVectors(t); }

// The element type of the rows a tile reads (InPlaceRows: the cache's, else the copy's fp32).
inline DType TileRowType(DType t, int64_t n, int64_t npad) { return InPlaceRows(t, n, npad) ? t : DType::f32; }

// The element type of a head's tile rows: its quantized dtype when LoadTile left them in place
// (`coded`), else TileRowType.
inline DType RowType(DType t, int64_t n, int64_t npad, bool coded) { return coded ? t : TileRowType(t, n, npad); }

// The tile's row pointers typed as the element type T they point at (RowType).
template <class T>
const T* const* RowsOf(const void* const* rows) {
  return reinterpret_cast<const T* const*>(rows);
}

// Calls f(rows) with the tile's row pointers typed as the element type of RowType `t` (f32 for the
// fp32 tiles and copies).
template <class F>
void WithRows(DType t, const void* const* rows, F&& f) {
  switch (t) {
    case DType::bf16:
      return f(RowsOf<hwy::bfloat16_t>(rows));
    case DType::f16:
      return f(RowsOf<hwy::float16_t>(rows));
    case DType::i8:
      return f(RowsOf<int8_t>(rows));
    case DType::e4m3:
      return f(RowsOf<E4M3Bits>(rows));
    case DType::e5m2:
      return f(RowsOf<E5M2Bits>(rows));
    default:
      return f(RowsOf<float>(rows));
  }
}

// a_i += x_i · u and b_i += x_i · v for i = 0..3: the 4 x 2 block of multiply-adds both the scores
// (four query rows by two keys) and the P·V axpys (four rows' P by two vectors of V) run.
template <class V>
HWY_INLINE void MulAdd4x2(V x0, V x1, V x2, V x3, V u, V v, V& a0, V& b0, V& a1, V& b1, V& a2, V& b2, V& a3, V& b3) {
  a0 = hn::MulAdd(x0, u, a0);
  b0 = hn::MulAdd(x0, v, b0);
  a1 = hn::MulAdd(x1, u, a1);
  b1 = hn::MulAdd(x1, v, b1);
  a2 = hn::MulAdd(x2, u, a2);
  b2 = hn::MulAdd(x2, v, b2);
  a3 = hn::MulAdd(x3, u, a3);
  b3 = hn::MulAdd(x3, v, b3);
}

#if HWY_TARGET <= HWY_AVX3
// Returns the sums of the lanes of u, v, w and z as the four lanes of a 128-bit vector: pairs of
// lanes within each 128-bit block, then the blocks (13 operations, against ~32 for four SumOfLanes).
template <class D>
HWY_INLINE hn::Vec<hn::Full128<float>> SumOfLanes4(D d, hn::Vec<D> u, hn::Vec<D> v, hn::Vec<D> w, hn::Vec<D> z) {
  const hn::Repartition<double, D> dd;
  const auto uv = hn::Add(hn::InterleaveLower(d, u, v), hn::InterleaveUpper(d, u, v));  // u0+u2 v0+v2 u1+u3 v1+v3
  const auto wz = hn::Add(hn::InterleaveLower(d, w, z), hn::InterleaveUpper(d, w, z));
  const auto lo = hn::InterleaveLower(dd, hn::BitCast(dd, uv), hn::BitCast(dd, wz));
  const auto hi = hn::InterleaveUpper(dd, hn::BitCast(dd, uv), hn::BitCast(dd, wz));
  const auto blocks = hn::Add(hn::BitCast(d, lo), hn::BitCast(d, hi));  // per 128-bit block: u v w z
  const hn::Half<D> d256;
  const auto half = hn::Add(hn::LowerHalf(d256, blocks), hn::UpperHalf(d256, blocks));
  const hn::Half<decltype(d256)> d128;
  return hn::Add(hn::LowerHalf(d128, half), hn::UpperHalf(d128, half));
}
#endif

// Writes s[r·kpad + j] = q_r · k_j for rows [0, R) and keys [0, nk) of the tile (rows of dpad
// elements, read as fp32 by LoadInPlace; for quantized codes the sum over their values times the
// row's scale kscale[j], one multiply per dot product), four rows at a time so each key vector is
// loaded once per four dot products.
template <class D, class TK>
HWY_NOINLINE void TileDots(D d, const float* HWY_RESTRICT q, const TK* const* HWY_RESTRICT krow,
                           const float* HWY_RESTRICT kscale, int64_t dpad, int64_t R, int64_t nk, float* HWY_RESTRICT s,
                           int64_t kpad, TilePrefetch& pf) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t r = 0;
  for (; r + 4 <= R; r += 4) {
    const float* q0 = q + r * dpad;
    int64_t j = 0;
#if HWY_TARGET <= HWY_AVX3
    // 32 vector registers: four keys, sixteen independent sums (twice the FMA latency's need), for
    // quantized rows, whose decode calls are bound by their arithmetic; 16-bit and f32 rows, bound
    // by memory, ran slower from memory with them and keep the 4 x 2 blocks (docs/cpu-design.md).
    for (; kCodeRow<TK> && j + 4 <= nk; j += 4) {
      const TK* k0 = krow[j];
      const TK* k1 = krow[j + 1];
      const TK* k2 = krow[j + 2];
      const TK* k3 = krow[j + 3];
      auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      auto b0 = hn::Zero(d), b1 = hn::Zero(d), b2 = hn::Zero(d), b3 = hn::Zero(d);
      auto c0 = hn::Zero(d), c1 = hn::Zero(d), c2 = hn::Zero(d), c3 = hn::Zero(d);
      auto e0 = hn::Zero(d), e1 = hn::Zero(d), e2 = hn::Zero(d), e3 = hn::Zero(d);
      const int64_t quarter = std::max<int64_t>(dpad / (4 * L), 1) * L;
      for (int64_t x = 0; x < dpad; x += L) {
        if (x % quarter == 0) pf.Step();
        const auto key0 = LoadInPlace(d, k0 + x), key1 = LoadInPlace(d, k1 + x);
        const auto key2 = LoadInPlace(d, k2 + x), key3 = LoadInPlace(d, k3 + x);
        const auto x0 = hn::Load(d, q0 + x), x1 = hn::Load(d, q0 + dpad + x);
        const auto x2 = hn::Load(d, q0 + 2 * dpad + x), x3 = hn::Load(d, q0 + 3 * dpad + x);
        MulAdd4x2(x0, x1, x2, x3, key0, key1, a0, b0, a1, b1, a2, b2, a3, b3);
        MulAdd4x2(x0, x1, x2, x3, key2, key3, c0, e0, c1, e1, c2, e2, c3, e3);
      }
      float* sj = s + r * kpad + j;
      const hn::Full128<float> d4;
      const auto put = [&](float* at, hn::Vec<D> u, hn::Vec<D> v, hn::Vec<D> w, hn::Vec<D> z) {
        auto sums = SumOfLanes4(d, u, v, w, z);
        if constexpr (kCodeRow<TK>) sums = hn::Mul(sums, hn::LoadU(d4, kscale + j));
        hn::StoreU(sums, d4, at);
      };
      put(sj, a0, b0, c0, e0);
      put(sj + kpad, a1, b1, c1, e1);
      put(sj + 2 * kpad, a2, b2, c2, e2);
      put(sj + 3 * kpad, a3, b3, c3, e3);
    }
#endif
    for (; j + 2 <= nk; j += 2) {  // two keys: eight independent sums hide the FMA latency
      pf.Step();
      const TK* k0 = krow[j];
      const TK* k1 = krow[j + 1];
      auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      auto b0 = hn::Zero(d), b1 = hn::Zero(d), b2 = hn::Zero(d), b3 = hn::Zero(d);
      const auto products = [&](int64_t x0_, int64_t x1_) {
        for (int64_t x = x0_; x < x1_; x += L) {
          const auto ka = LoadInPlace(d, k0 + x), kb = LoadInPlace(d, k1 + x);
          const auto x0 = hn::Load(d, q0 + x), x1 = hn::Load(d, q0 + dpad + x);
          const auto x2 = hn::Load(d, q0 + 2 * dpad + x), x3 = hn::Load(d, q0 + 3 * dpad + x);
          MulAdd4x2(x0, x1, x2, x3, ka, kb, a0, b0, a1, b1, a2, b2, a3, b3);
        }
      };
      // The pair's second share of prefetches between the two halves of its products: each burst
      // of lines has half a pair's products to arrive in.
      const int64_t half = dpad / (2 * L) * L;
      products(0, half);
      pf.Step();
      products(half, dpad);
      float* sj = s + r * kpad + j;
      sj[0] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, a0)), kscale, j);
      sj[1] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, b0)), kscale, j + 1);
      sj[kpad] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, a1)), kscale, j);
      sj[kpad + 1] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, b1)), kscale, j + 1);
      sj[2 * kpad] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, a2)), kscale, j);
      sj[2 * kpad + 1] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, b2)), kscale, j + 1);
      sj[3 * kpad] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, a3)), kscale, j);
      sj[3 * kpad + 1] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, b3)), kscale, j + 1);
    }
    for (; j < nk; ++j) {
      pf.Step();
      const TK* k = krow[j];
      auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      for (int64_t x = 0; x < dpad; x += L) {
        const auto kv = LoadInPlace(d, k + x);
        a0 = hn::MulAdd(hn::Load(d, q0 + x), kv, a0);
        a1 = hn::MulAdd(hn::Load(d, q0 + dpad + x), kv, a1);
        a2 = hn::MulAdd(hn::Load(d, q0 + 2 * dpad + x), kv, a2);
        a3 = hn::MulAdd(hn::Load(d, q0 + 3 * dpad + x), kv, a3);
      }
      s[r * kpad + j] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, a0)), kscale, j);
      s[(r + 1) * kpad + j] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, a1)), kscale, j);
      s[(r + 2) * kpad + j] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, a2)), kscale, j);
      s[(r + 3) * kpad + j] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, a3)), kscale, j);
    }
  }
  for (; r < R; ++r) {
    const float* qr = q + r * dpad;
    for (int64_t j = 0; j < nk; ++j) {
      pf.Step();
      const TK* k = krow[j];
      auto acc = hn::Zero(d);
      for (int64_t x = 0; x < dpad; x += L) acc = hn::MulAdd(hn::Load(d, qr + x), LoadInPlace(d, k + x), acc);
      s[r * kpad + j] = Scaled<TK>(hn::GetLane(hn::SumOfLanes(d, acc)), kscale, j);
    }
  }
}

// TileDots in fp64 (exact scores, fp32 inputs): every product of two floats is exact and each sum
// rounds at 2^-53.
template <class DD>
void TileDotsExact(DD dd, const float* HWY_RESTRICT q, const float* const* HWY_RESTRICT krow, int64_t dpad, int64_t R,
                   int64_t nk, double* HWY_RESTRICT sd, int64_t kpad) {
  const hn::Rebind<float, DD> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  for (int64_t r = 0; r < R; ++r) {
    const float* qr = q + r * dpad;
    for (int64_t j = 0; j < nk; ++j) {
      const float* k = krow[j];
      auto acc = hn::Zero(dd);  // dpad is a multiple of kMaxLanes, so of the fp64 lane count
      for (int64_t x = 0; x < dpad; x += L) {
        acc = hn::MulAdd(hn::PromoteTo(dd, hn::LoadU(df, qr + x)), hn::PromoteTo(dd, hn::LoadU(df, k + x)), acc);
      }
      sd[r * kpad + j] = hn::GetLane(hn::SumOfLanes(dd, acc));
    }
  }
}

// The score transforms and mask of one row in fp32 (score-inl.h TransformScores / MaskScores, with
// keys along the lanes): lanes [0, W) hold keys c0 + j; `bias` (optional) the row's bias of the
// same keys; keys outside [kb, ke) and lanes past nk become `hidden`.
template <class D>
void RowScores(D d, float* HWY_RESTRICT s, int64_t W, int64_t nk, int64_t c0, int64_t kb, int64_t ke, bool transform,
               float scale, float softcap, float slope, const float* HWY_RESTRICT bias, int64_t i, int64_t diag,
               float hidden) {
  const hn::RebindToSigned<D> di;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto hid = hn::Set(d, hidden);
  const int64_t lo = std::max<int64_t>(kb - c0, 0), hi = std::min<int64_t>(ke - c0, nk);  // visible lanes
  if (!transform && lo == 0 && hi == W) return;  // every lane visible and kept as it is
  for (int64_t w = 0; w < W; w += L) {
    auto v = hn::Load(d, s + w);
    if (transform) {
      v = hn::Mul(v, hn::Set(d, scale));
      if (softcap > 0) v = hn::Mul(hn::Set(d, softcap), TanhKeepNaN(d, hn::Mul(v, hn::Set(d, 1.0f / softcap))));
      if (slope != 0) {
        // |i + diag − key|, exact while sequences stay below 2^24 keys
        const auto key = hn::Iota(d, static_cast<float>(c0 + w));
        const auto dist = hn::Abs(hn::Sub(hn::Set(d, static_cast<float>(i + diag)), key));
        v = hn::NegMulAdd(hn::Set(d, slope), dist, v);
      }
      if (bias) v = hn::Add(v, hn::Load(d, bias + w));
    }
    const auto lane = hn::Iota(di, static_cast<int32_t>(w));
    const auto vis = hn::And(hn::Lt(hn::Set(di, static_cast<int32_t>(lo - 1)), lane), hn::Lt(lane, hn::Set(di, static_cast<int32_t>(hi))));
    hn::Store(hn::IfThenElse(hn::RebindMask(d, vis), v, hid), d, s + w);
  }
}

// RowScores on the fp64 raw scores (TransformScoresExact / MaskScoresExact).
template <class DD>
void RowScoresExact(DD dd, double* HWY_RESTRICT sd, int64_t W, int64_t nk, int64_t c0, int64_t kb, int64_t ke,
                    bool transform, float scale, float softcap, float slope, const float* HWY_RESTRICT bias, int64_t i,
                    int64_t diag, double hidden) {
  const hn::Rebind<float, DD> df;
  const int64_t lo = std::max<int64_t>(kb - c0, 0), hi = std::min<int64_t>(ke - c0, nk);
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto hid = hn::Set(dd, hidden);
  for (int64_t w = 0; w < W; w += L) {
    auto v = hn::Load(dd, sd + w);
    if (transform) {
      v = hn::Mul(v, hn::Set(dd, static_cast<double>(scale)));
      if (softcap > 0) {
        const auto t = TanhKeepNaN(dd, hn::Mul(v, hn::Set(dd, 1.0 / static_cast<double>(softcap))));
        v = hn::Mul(hn::Set(dd, static_cast<double>(softcap)), t);
      }
      if (slope != 0) {
        const auto key = hn::Iota(dd, static_cast<double>(c0 + w));
        const auto dist = hn::Abs(hn::Sub(hn::Set(dd, static_cast<double>(i + diag)), key));
        v = hn::NegMulAdd(hn::Set(dd, static_cast<double>(slope)), dist, v);
      }
      if (bias) v = hn::Add(v, hn::PromoteTo(dd, hn::LoadU(df, bias + w)));
    }
    const auto lane = hn::Iota(dd, static_cast<double>(w));
    const auto vis = hn::And(hn::Le(hn::Set(dd, static_cast<double>(lo)), lane), hn::Lt(lane, hn::Set(dd, static_cast<double>(hi))));
    hn::Store(hn::IfThenElse(vis, v, hid), dd, sd + w);
  }
}

// Online softmax step of one row over lanes [0, W) of S = scale·s (score-inl.h OnlineSoftmax with
// keys along the lanes): m' = max(m, max S), P = exp(scale·s − m') written over s,
// l' = l·α + Σ P. Returns α = exp(m − m'); a row that has seen only −∞ uses 0 for m'.
template <class D>
float RowSoftmax(D d, float* HWY_RESTRICT s, int64_t W, float scale, float& m, float& l) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto sc = hn::Set(d, scale);
  auto mx = hn::Set(d, -kInf);
  for (int64_t w = 0; w < W; w += L) mx = hn::Max(mx, hn::Mul(hn::Load(d, s + w), sc));
  const float m_new = std::max(m, hn::GetLane(hn::MaxOfLanes(d, mx)));
  const float m_use = m_new == -kInf ? 0.0f : m_new;
  const auto mu = hn::Set(d, m_use);
  auto sum = hn::Zero(d);
  for (int64_t w = 0; w < W; w += L) {
    const auto pv = FastExp(d, hn::MulSub(hn::Load(d, s + w), sc, mu));
    hn::Store(pv, d, s + w);
    sum = hn::Add(sum, pv);
  }
  const float alpha = hn::GetLane(FastExp(d, hn::Set(d, m - m_use)));
  l = l * alpha + hn::GetLane(hn::SumOfLanes(d, sum));
  m = m_new;
  return alpha;
}

// RowSoftmax from fp64 raw scores (OnlineSoftmaxExact): m kept in fp32, the exponent argument exact
// in fp64 (ExpOfDouble); P written to the fp32 row s.
template <class DD>
float RowSoftmaxExact(DD dd, const double* HWY_RESTRICT sd, float* HWY_RESTRICT s, int64_t W, double scale, float& m,
                      float& l) {
  const hn::Rebind<float, DD> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto sc = hn::Set(dd, scale);
  auto mx = hn::Set(dd, -std::numeric_limits<double>::infinity());
  for (int64_t w = 0; w < W; w += L) mx = hn::Max(mx, hn::Mul(hn::Load(dd, sd + w), sc));
  const float m_new = std::max(m, static_cast<float>(hn::GetLane(hn::MaxOfLanes(dd, mx))));
  const float m_use = m_new == -kInf ? 0.0f : m_new;
  const auto mu = hn::Set(dd, static_cast<double>(m_use));
  auto sum = hn::Zero(df);
  for (int64_t w = 0; w < W; w += L) {
    const auto pv = ExpOfDouble(dd, hn::MulSub(hn::Load(dd, sd + w), sc, mu));
    hn::StoreU(pv, df, s + w);
    sum = hn::Add(sum, pv);
  }
  const hn::ScalableTag<float> d1;
  const float alpha = hn::GetLane(FastExp(d1, hn::Set(d1, m - m_use)));
  l = l * alpha + hn::GetLane(hn::SumOfLanes(df, sum));
  m = m_new;
  return alpha;
}

// p_r[j] ·= scale[j] for rows [0, n) (kpad apart) and keys [j0, j1): the scales of quantized value
// rows read in place, applied once per probability (after the row sums, which add the unscaled P)
// instead of once per vector of the row in RowsAxpy.
template <class D>
void ScaleProbabilities(D d, float* HWY_RESTRICT p, int64_t kpad, int64_t n, const float* HWY_RESTRICT scale,
                        int64_t j0, int64_t j1) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < n; ++r) {
    float* pr = p + r * kpad;
    int64_t j = j0;
    for (; j + L <= j1; j += L) hn::StoreU(hn::Mul(hn::LoadU(d, pr + j), hn::LoadU(d, scale + j)), d, pr + j);
    for (; j < j1; ++j) pr[j] *= scale[j];
  }
}

// o_r = o_r·alpha_r + Σ_j p_r[j] · v_j for keys j in [j0, j1) of the tile, for `n` (1..4) rows
// starting at r that share the key interval: the sum starts from zero and reaches o_r by one fused
// multiply-add, so o_r rounds once per tile at its own size, not once per key (as the general
// forward's GemmRescaled). Each value vector is loaded once for the n rows, and four rows run two
// vectors of the head dim per pass over the keys, so each p_r[j] broadcast serves two FMAs. Value
// rows are read by LoadInPlace (quantized codes: their values, the rows' scales already in p,
// ScaleProbabilities).
template <class D, class TV>
HWY_NOINLINE void RowsAxpy(D d, const float* HWY_RESTRICT p, int64_t kpad, const TV* const* HWY_RESTRICT vrow,
                           int64_t dvpad, float* HWY_RESTRICT o,
                           const float* HWY_RESTRICT alpha, int64_t n, int64_t j0, int64_t j1) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  // Returns o·alpha + acc for the vector at o.
  const auto finish = [&](const float* at, float f, hn::Vec<D> acc) { return hn::MulAdd(hn::Load(d, at), hn::Set(d, f), acc); };
  if (n == 4) {
    const float* p0 = p;
    const float* p1 = p + kpad;
    const float* p2 = p + 2 * kpad;
    const float* p3 = p + 3 * kpad;
    int64_t x = 0;
#if HWY_TARGET <= HWY_AVX3
    // 32 vector registers: four vectors of the head dim, sixteen independent sums (quantized rows,
    // as TileDots' four keys).
    for (; kCodeRow<TV> && x + 4 * L <= dvpad; x += 4 * L) {
      float* o0 = o + x;
      auto a0 = hn::Zero(d), b0 = hn::Zero(d), a1 = hn::Zero(d), b1 = hn::Zero(d);
      auto a2 = hn::Zero(d), b2 = hn::Zero(d), a3 = hn::Zero(d), b3 = hn::Zero(d);
      auto c0 = hn::Zero(d), e0 = hn::Zero(d), c1 = hn::Zero(d), e1 = hn::Zero(d);
      auto c2 = hn::Zero(d), e2 = hn::Zero(d), c3 = hn::Zero(d), e3 = hn::Zero(d);
      for (int64_t j = j0; j < j1; ++j) {
        const auto va = LoadInPlace(d, vrow[j] + x), vb = LoadInPlace(d, vrow[j] + x + L);
        const auto vc = LoadInPlace(d, vrow[j] + x + 2 * L), ve = LoadInPlace(d, vrow[j] + x + 3 * L);
        const auto q0 = hn::Set(d, p0[j]), q1 = hn::Set(d, p1[j]), q2 = hn::Set(d, p2[j]), q3 = hn::Set(d, p3[j]);
        MulAdd4x2(q0, q1, q2, q3, va, vb, a0, b0, a1, b1, a2, b2, a3, b3);
        MulAdd4x2(q0, q1, q2, q3, vc, ve, c0, e0, c1, e1, c2, e2, c3, e3);
      }
      const auto put = [&](float* at, float f, hn::Vec<D> u, hn::Vec<D> v, hn::Vec<D> w, hn::Vec<D> z) {
        hn::Store(finish(at, f, u), d, at);
        hn::Store(finish(at + L, f, v), d, at + L);
        hn::Store(finish(at + 2 * L, f, w), d, at + 2 * L);
        hn::Store(finish(at + 3 * L, f, z), d, at + 3 * L);
      };
      put(o0, alpha[0], a0, b0, c0, e0);
      put(o0 + dvpad, alpha[1], a1, b1, c1, e1);
      put(o0 + 2 * dvpad, alpha[2], a2, b2, c2, e2);
      put(o0 + 3 * dvpad, alpha[3], a3, b3, c3, e3);
    }
#endif
    for (; x + 2 * L <= dvpad; x += 2 * L) {
      float* o0 = o + x;
      auto a0 = hn::Zero(d), b0 = hn::Zero(d), a1 = hn::Zero(d), b1 = hn::Zero(d);
      auto a2 = hn::Zero(d), b2 = hn::Zero(d), a3 = hn::Zero(d), b3 = hn::Zero(d);
      for (int64_t j = j0; j < j1; ++j) {
        const auto va = LoadInPlace(d, vrow[j] + x), vb = LoadInPlace(d, vrow[j] + x + L);
        const auto q0 = hn::Set(d, p0[j]), q1 = hn::Set(d, p1[j]), q2 = hn::Set(d, p2[j]), q3 = hn::Set(d, p3[j]);
        MulAdd4x2(q0, q1, q2, q3, va, vb, a0, b0, a1, b1, a2, b2, a3, b3);
      }
      hn::Store(finish(o0, alpha[0], a0), d, o0);
      hn::Store(finish(o0 + L, alpha[0], b0), d, o0 + L);
      hn::Store(finish(o0 + dvpad, alpha[1], a1), d, o0 + dvpad);
      hn::Store(finish(o0 + dvpad + L, alpha[1], b1), d, o0 + dvpad + L);
      hn::Store(finish(o0 + 2 * dvpad, alpha[2], a2), d, o0 + 2 * dvpad);
      hn::Store(finish(o0 + 2 * dvpad + L, alpha[2], b2), d, o0 + 2 * dvpad + L);
      hn::Store(finish(o0 + 3 * dvpad, alpha[3], a3), d, o0 + 3 * dvpad);
      hn::Store(finish(o0 + 3 * dvpad + L, alpha[3], b3), d, o0 + 3 * dvpad + L);
    }
    for (; x < dvpad; x += L) {
      auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      for (int64_t j = j0; j < j1; ++j) {
        const auto v = LoadInPlace(d, vrow[j] + x);
        a0 = hn::MulAdd(hn::Set(d, p0[j]), v, a0);
        a1 = hn::MulAdd(hn::Set(d, p1[j]), v, a1);
        a2 = hn::MulAdd(hn::Set(d, p2[j]), v, a2);
        a3 = hn::MulAdd(hn::Set(d, p3[j]), v, a3);
      }
      hn::Store(finish(o + x, alpha[0], a0), d, o + x);
      hn::Store(finish(o + dvpad + x, alpha[1], a1), d, o + dvpad + x);
      hn::Store(finish(o + 2 * dvpad + x, alpha[2], a2), d, o + 2 * dvpad + x);
      hn::Store(finish(o + 3 * dvpad + x, alpha[3], a3), d, o + 3 * dvpad + x);
    }
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* pr = p + t * kpad;
    float* orow = o + t * dvpad;
    for (int64_t x = 0; x < dvpad; x += L) {
      auto acc = hn::Zero(d);
      for (int64_t j = j0; j < j1; ++j) {
        acc = hn::MulAdd(hn::Set(d, pr[j]), LoadInPlace(d, vrow[j] + x), acc);
      }
      hn::Store(finish(orow + x, alpha[t], acc), d, orow + x);
    }
  }
}

// Writes the n elements at element offset `off` of `data` (dtype t) to dst as floats: f32 rows are
// copied with this target's vectors (widen-inl.h WidenRow widens 16-bit rows; its f32 case is the
// scalar rows.h loop, compiled for the baseline target).
inline void LoadRow(const void* data, DType t, int64_t off, int64_t n, float* HWY_RESTRICT dst) {
  if (t != DType::f32) return WidenRow(data, t, off, n, dst);
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const float* s = static_cast<const float*>(data) + off;
  int64_t x = 0;
#pragma GCC unroll 4
  for (; x + L <= n; x += L) hn::Store(hn::LoadU(d, s + x), d, dst + x);
  for (; x < n; ++x) dst[x] = s[x];
}

// Returns the squared norm of an f32 key row exactly as MaxSquaredNorm(row, n) (score-inl.h) computes
// it (same vectors, same order, same non-finite rule): the adaptive choice of exact scores needs
// every key's norm. With kStore the row is also copied to dst (LoadRow) while it passes through the
// registers.
template <bool kStore>
float KeyRowNorm(const float* HWY_RESTRICT s, int64_t n, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int64_t x = 0;
#pragma GCC unroll 4
  for (; x + L <= n; x += L) {
    const auto v = hn::LoadU(d, s + x);
    if (kStore) hn::Store(v, d, dst + x);
    acc = hn::MulAdd(v, v, acc);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; x < n; ++x) {
    if (kStore) dst[x] = s[x];
    sum += s[x] * s[x];
  }
  if (std::isfinite(sum)) return sum;
  return MaxSquaredNorm(d, s, n, 1, n);  // the rare non-finite row: MaxSquaredNorm's own rule
}

// Makes keys [c0, c1) of the item's heads [h0, h0 + nh) readable as rows of whole vectors:
// w.krow / w.vrow[t·block_k + j − c0] point at the rows where they live in the cache when
// TileRowType keeps their dtype, and at widened, zero-padded fp32 copies in the tiles kt / vt
// otherwise (their pad columns hold the zeros already there). Keys are taken in order and within a
// key head by head: the order of the usual [B, N, Hk, d] caches and of a page, where each key holds
// its heads side by side. With `knorm` (f32 keys, adaptive exact scores) each key row's squared norm
// goes to knorm[t·block_k + j − c0].
//
// Quantized rows: with `codes` (DecodeItem: the target dequantizes the dtype in registers, rows are
// whole vectors, scores are fp32) each head's rows are read where they live and their scales times
// DequantizeScaleFactor go to w.kscale / w.vscale (w.coded[t] set), applied to each dot product
// and probability (TileDots, ScaleProbabilities); a head whose tile holds a scale that would make
// some dequantized value infinite (ScaledCodesUsable) or an e4m3 NaN code (which LoadCodes does not
// decode) is dequantized into the tiles instead, as without `codes`. Either way the tile computes
// with the same values, up to rounding.
void LoadTile(const ForwardArgs& a, const Sequence& seq, int64_t h0, int64_t nh, int64_t c0, int64_t c1,
              const DecodePlan& dp, DecodeScratch& w, float* knorm, bool codes) {
  const int64_t dim = a.k.dim, dv = a.v.dim;
  const bool k_direct = InPlaceRows(a.k.dtype, dim, dp.dpad);
  const bool v_direct = InPlaceRows(a.v.dtype, dv, dp.dvpad);
  const bool quantized = is_quantized(a.k.dtype);
  // Quantized key j's rows of head t dequantized into the tiles (each row decoded times its scale).
  const auto dequantize = [&](const KeyRow& at, int64_t t, int64_t row) {
    float* kdst = w.kt + row * dp.dpad;
    float* vdst = w.vt + row * dp.dvpad;
    w.krow[row] = kdst;
    w.vrow[row] = vdst;
    DequantizeRow(a.k.data, a.k.dtype, a.k.offset(at.batch, at.row, h0 + t), dim,
                  kv_scale(a, a.kv_scales.k, at.batch, at.row, h0 + t), kdst);
    DequantizeRow(a.v.data, a.v.dtype, a.v.offset(at.batch, at.row, h0 + t), dv,
                  kv_scale(a, a.kv_scales.v, at.batch, at.row, h0 + t), vdst);
    if (knorm) knorm[row] = KeyRowNorm<false>(kdst, dim, nullptr);
  };
  // Where key `at`'s row of the item's head t lives in x: base + t·step bytes (the key's rows are
  // found once per key, not per head).
  struct HeadRows {
    const char* base;
    int64_t step;
  };
  // The step is used only between the nh heads read: with one head the stride may be anything
  // (validation bounds a stride only where its dimension has more than one element), and
  // stride · element size could overflow.
  const auto rows_of = [&](const ConstTensor& x, const KeyRow& at) {
    const int64_t size = static_cast<int64_t>(dtype_size(x.dtype));
    return HeadRows{static_cast<const char*>(x.data) + x.offset(at.batch, at.row, h0) * size,
                    nh > 1 ? x.stride_head * size : 0};
  };
  if (quantized && codes) {
    const DType qt = a.k.dtype;
    const float factor = DequantizeScaleFactor(qt), largest = MaxCodeMagnitude(qt);
    const ScaleGranularity g = a.kv_scales.granularity;
    const int64_t scale_step = g == ScaleGranularity::tensor ? 0 : 1;  // between the heads of a key
    // Points the tile rows of key j (column col) of every head at their codes in x (K or V, scales
    // `scales`) and keeps their scales; a row LoadCodes cannot read sends its head's tile to
    // the copy.
    const auto point = [&](const ConstTensor& x, const float* scales, const KeyRow& at, int64_t col, const void** rows,
                           float* rscale) {
      const HeadRows r = rows_of(x, at);
      const float* sc = scales + kv_scale_index(g, a.k.seq, a.k.heads, at.batch, at.row, h0);
      for (int64_t t = 0; t < nh; ++t) {
        const char* at_codes = r.base + t * r.step;
        const float scale = sc[t * scale_step];
        rows[t * dp.block_k + col] = at_codes;
        rscale[t * dp.block_k + col] = scale * factor;
        const bool nan = qt == DType::e4m3 && HasE4M3NaN(reinterpret_cast<const uint8_t*>(at_codes), x.dim);
        if (nan || !ScaledCodesUsable(scale, largest)) w.coded[t] = false;
      }
    };
    for (int64_t t = 0; t < nh; ++t) w.coded[t] = true;
    for (int64_t j = c0; j < c1; ++j) {
      const KeyRow at = key_row(a, seq, j);
      point(a.k, a.kv_scales.k, at, j - c0, w.krow, w.kscale);
      point(a.v, a.kv_scales.v, at, j - c0, w.vrow, w.vscale);
    }
    for (int64_t t = 0; t < nh; ++t) {
      if (w.coded[t]) continue;
      for (int64_t j = c0; j < c1; ++j) dequantize(key_row(a, seq, j), t, t * dp.block_k + j - c0);
    }
    return;
  }
  for (int64_t t = 0; t < nh; ++t) w.coded[t] = false;
  for (int64_t j = c0; j < c1; ++j) {
    const KeyRow at = key_row(a, seq, j);
    if (quantized) {
      for (int64_t t = 0; t < nh; ++t) dequantize(at, t, t * dp.block_k + j - c0);
      continue;
    }
    const HeadRows kr = rows_of(a.k, at), vr = rows_of(a.v, at);
    for (int64_t t = 0; t < nh; ++t) {
      const int64_t row = t * dp.block_k + j - c0;
      const char* k = kr.base + t * kr.step;
      if (k_direct) {
        w.krow[row] = k;
        if (knorm) knorm[row] = KeyRowNorm<false>(reinterpret_cast<const float*>(k), dim, nullptr);
      } else {
        float* dst = w.kt + row * dp.dpad;
        w.krow[row] = dst;
        if (knorm) {
          knorm[row] = KeyRowNorm<true>(reinterpret_cast<const float*>(k), dim, dst);
        } else {
          LoadRow(a.k.data, a.k.dtype, a.k.offset(at.batch, at.row, h0 + t), dim, dst);
        }
      }
    }
    for (int64_t t = 0; t < nh; ++t) {
      const int64_t row = t * dp.block_k + j - c0;
      if (v_direct) {
        w.vrow[row] = vr.base + t * vr.step;
      } else {
        float* dst = w.vt + row * dp.dvpad;
        w.vrow[row] = dst;
        LoadRow(a.v.data, a.v.dtype, a.v.offset(at.batch, at.row, h0 + t), dv, dst);
      }
    }
  }
}

// Adds a sink logit to a finished row (O normalised over its keys, LSE = log Σ exp S): the sink
// joins the denominator with no value, as one more merged part with O = 0: m = max(LSE, sink),
// O ·= exp(LSE − m) / (exp(LSE − m) + exp(sink − m)), LSE = m + log(that sum). A row that saw no
// key keeps O = 0 and gets LSE = sink; a NaN row stays NaN. Returns the new LSE.
float AddSink(float* HWY_RESTRICT o, int64_t dv, float lse, float sink) {
  const float m = std::fmax(lse, sink);
  const float wl = lse == -kInf ? 0.0f : std::exp(lse - m), ws = std::exp(sink - m);
  const float sum = wl + ws;
  const float c = wl / sum;
  for (int64_t x = 0; x < dv; ++x) o[x] *= c;
  return m + std::log(sum);
}

// One key/value head's rows in a work item: where its parts of the item's scratch are, and the
// constants of its rows.
struct HeadPart {
  int64_t kvh = 0;        // the key/value head
  float* q = nullptr;     // [rows x dpad]
  float* o = nullptr;     // [rows x dvpad]
  const void* const* krow = nullptr;  // [block_k] its key tile's rows (dpad readable elements, LoadTile)
  const void* const* vrow = nullptr;  // [block_k] its value tile's rows (dvpad readable elements)
  const float* kscale = nullptr;  // [block_k] its quantized key rows' scales (LoadTile, when *coded)
  const float* vscale = nullptr;  // [block_k] the same for its value rows
  const bool* coded = nullptr;    // whether its quantized rows are read in place this tile (LoadTile)
  const float* knorm = nullptr;  // [block_k] its key rows' squared norms (adaptive exact scores)
  float* m = nullptr;     // [rows]
  float* l = nullptr;     // [rows]
  ItemRows rows;
  float qmax2 = 0.0f;     // the largest squared norm of its query rows (adaptive exact scores)
  float max_slope = 0.0f; // the largest |ALiBi slope| of its rows
  bool transform = false; // scores are transformed (scale not fused into the exponent)
};

// Returns head t (key/value head kvh) of the item's scratch, with Q widened, O = 0, m = −∞, l = 0
// and each row's mask interval, slope and dropout stream.
HeadPart StartHead(const ForwardArgs& a, const Plan& p, const DecodePlan& dp, const DecodeScratch& w,
                   const Sequence& seq, int64_t s, int64_t t, int64_t kvh) {
  const hn::ScalableTag<float> d;
  const Mask& mask = seq.mask;
  const int64_t g = dp.group, R = mask.seqlen_q * g, dim = a.q.dim;
  HeadPart hp;
  hp.kvh = kvh;
  hp.q = w.q + t * dp.rows * dp.dpad;
  hp.o = w.o + t * dp.rows * dp.dvpad;
  hp.krow = w.krow + t * dp.block_k;
  hp.vrow = w.vrow + t * dp.block_k;
  hp.kscale = w.kscale + t * dp.block_k;
  hp.vscale = w.vscale + t * dp.block_k;
  hp.coded = w.coded + t;
  hp.knorm = w.knorm ? w.knorm + t * dp.block_k : nullptr;
  hp.m = w.m + t * dp.rows;
  hp.l = w.l + t * dp.rows;
  hp.rows.count = R;
  const bool adaptive = p.exact_scores && p.scores == ScorePrecision::adaptive;
  bool any_slope = false;
  for (int64_t r = 0; r < R; ++r) {
    RowInfo& ri = hp.rows.info[r];
    ri.i = r / g;
    ri.h = kvh * g + r % g;
    ri.kbeg = mask.key_begin(ri.i);
    ri.kend = mask.key_end(ri.i);
    ri.slope = alibi_slope(a, s, ri.h);
    if (p.dropout) ri.drop = MakeDropout(a, s, ri.h);
    any_slope = any_slope || ri.slope != 0;
    hp.max_slope = std::max(hp.max_slope, std::fabs(ri.slope));
    float* qr = hp.q + r * dp.dpad;
    WidenRow(a.q.data, a.q.dtype, a.q.offset(seq.batch, seq.q_start + ri.i, ri.h), dim, qr);
    std::fill(qr + dim, qr + dp.dpad, 0.0f);
    if (adaptive) hp.qmax2 = std::max(hp.qmax2, MaxSquaredNorm(d, qr, dim, 1, dim));
    std::fill(hp.o + r * dp.dvpad, hp.o + (r + 1) * dp.dvpad, 0.0f);
    hp.m[r] = -kInf;
    hp.l[r] = 0.0f;
  }
  hp.transform = a.softcap > 0 || any_slope || effective_scale(a) == 0 || p.bias;
  return hp;
}

// Runs keys [c0, c1) of one head of a work item, its tile loaded: scores, online softmax (each row's
// α in w.alpha), then O = O·α + P·V over each row's visible keys, four rows at a time where they
// share them.
void HeadTile(const ForwardArgs& a, const Plan& p, const DecodePlan& dp, DecodeScratch& w, const Sequence& seq,
              int64_t s, HeadPart& hp, int64_t c0, int64_t c1, TilePrefetch& pf) {
  const hn::ScalableTag<float> d;
  const hn::ScalableTag<double> dd;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const Mask& mask = seq.mask;
  const int64_t R = hp.rows.count, nk = c1 - c0, W = round_up(nk, L), kpad = w.kpad;
  const float scale = effective_scale(a);
  const bool adaptive = p.exact_scores && p.scores == ScorePrecision::adaptive;
  // Without transforms the scale is fused into the exponent; hidden raw scores must then become
  // −∞ after multiplying by it.
  const float fused_scale = hp.transform ? 1.0f : scale;
  const float hidden = fused_scale < 0 ? kInf : -kInf;
  const ConstTensor bias = bias_view(a);
  TileScores ts;  // for the score bound of adaptive exact scores only
  ts.scale = scale;
  ts.r0 = 0;
  ts.diag = mask.diag();
  ts.softcap = a.softcap;
  ts.slope = hp.max_slope;
  ts.c0 = c0;
  // The bias of the rows that see a key of the tile, lanes past nk zero; its largest finite entry
  // joins the exact-score bound.
  ts.bias_bound = 0.0f;
  for (int64_t r = 0; r < R && p.bias; ++r) {
    const RowInfo& ri = hp.rows.info[r];
    if (ri.kend <= c0 || c1 <= ri.kbeg) continue;
    float* br = w.bias + r * kpad;
    WidenRow(bias.data, bias.dtype, bias.offset(s, ri.i, ri.h) + c0, nk, br);
    std::fill(br + nk, br + kpad, 0.0f);
    for (int64_t j = 0; j < nk && adaptive; ++j) {
      if (std::isfinite(br[j])) ts.bias_bound = std::max(ts.bias_bound, std::fabs(br[j]));
    }
  }
  bool exact = false;
  if (p.exact_scores) {
    const float kmax2 = adaptive ? MaxOf(hp.knorm, nk) : 0.0f;  // LoadTile's norms of the tile's keys
    exact = exact_tile(p, TileScoreBound(ts, hp.qmax2, kmax2, mask.seqlen_q, c1));
  }
  if (exact) {  // f32 inputs: the rows are f32
    TileDotsExact(dd, hp.q, RowsOf<float>(hp.krow), dp.dpad, R, nk, w.sd, kpad);
  } else {
    WithRows(RowType(a.k.dtype, a.k.dim, dp.dpad, *hp.coded), hp.krow,
             [&](auto krow) { TileDots(d, hp.q, krow, hp.kscale, dp.dpad, R, nk, w.s, kpad, pf); });
  }
  for (int64_t r = 0; r < R; ++r) {
    const RowInfo& ri = hp.rows.info[r];
    if (ri.kend <= c0 || c1 <= ri.kbeg) continue;  // sees no key of the tile: its state is unchanged
    float& alpha = w.alpha[r];
    const float* brow = p.bias ? w.bias + r * kpad : nullptr;
    if (exact) {
      double* sdr = w.sd + r * kpad;
      const int64_t Wd = round_up(nk, static_cast<int64_t>(hn::Lanes(dd)));
      RowScoresExact(dd, sdr, Wd, nk, c0, ri.kbeg, ri.kend, hp.transform, scale, a.softcap, ri.slope, brow, ri.i,
                     mask.diag(), static_cast<double>(hidden));
      alpha = RowSoftmaxExact(dd, sdr, w.s + r * kpad, Wd, fused_scale, hp.m[r], hp.l[r]);
    } else {
      float* sr = w.s + r * kpad;
      RowScores(d, sr, W, nk, c0, ri.kbeg, ri.kend, hp.transform, scale, a.softcap, ri.slope, brow, ri.i,
                mask.diag(), hidden);
      alpha = RowSoftmax(d, sr, W, fused_scale, hp.m[r], hp.l[r]);
    }
    if (p.dropout) {  // after the softmax step: l and the LSE sum the undropped P
      DropoutRow(w.s + r * kpad, c0, std::max(ri.kbeg, c0) - c0, std::min(ri.kend, c1) - c0, ri.i, ri.drop);
    }
  }
  const DType vt = RowType(a.v.dtype, a.v.dim, dp.dvpad, *hp.coded);
  for (int64_t r = 0; r < R;) {
    const RowInfo& ri = hp.rows.info[r];
    const int64_t j0 = std::max(ri.kbeg, c0) - c0, j1 = std::min(ri.kend, c1) - c0;
    int64_t n4 = 1;  // rows from r sharing the interval (same query row: same mask)
    while (n4 < 4 && r + n4 < R && hp.rows.info[r + n4].i == ri.i) ++n4;
    const float* pr = w.s + r * kpad;
    float* o = hp.o + r * dp.dvpad;
    if (j0 < j1) {
      if (is_quantized(vt)) ScaleProbabilities(d, w.s + r * kpad, kpad, n4, hp.vscale, j0, j1);
      WithRows(vt, hp.vrow, [&](auto vrow) { RowsAxpy(d, pr, kpad, vrow, dp.dvpad, o, w.alpha + r, n4, j0, j1); });
    }
    r += n4;
  }
}

// Ends one head of a work item: O = O / l, LSE = m + log l; a row with l == 0 saw no key: O = 0,
// LSE = −∞; a NaN sum gives NaN (as the general forward). With one split it writes the rows' out and
// lse (sink added); otherwise their normalised partial O and LSE to part_o [rows x dv] / part_lse
// [rows].
void FinishHead(const ForwardArgs& a, const DecodePlan& dp, const Sequence& seq, const HeadPart& hp, float* part_o,
                float* part_lse) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t dv = a.v.dim;
  for (int64_t r = 0; r < hp.rows.count; ++r) {
    const RowInfo& ri = hp.rows.info[r];
    const float l = hp.l[r];
    const bool seen = l > 0 || std::isnan(l);
    float* o = hp.o + r * dp.dvpad;
    const auto lv = hn::Set(d, l);
    for (int64_t x = 0; x < dp.dvpad; x += L) {
      hn::Store(seen ? hn::Div(hn::Load(d, o + x), lv) : hn::Zero(d), d, o + x);
    }
    float lse = seen ? hp.m[r] + std::log(l) : -kInf;
    if (!part_o && a.sinks) lse = AddSink(o, dv, lse, a.sinks[ri.h]);
    if (part_o) {
      std::copy(o, o + dv, part_o + r * dv);
      part_lse[r] = lse;
    } else {
      store_row(a.out.data, a.out.dtype, a.out.offset(seq.batch, seq.q_start + ri.i, ri.h), dv, o);
      if (a.lse) a.lse[lse_index(a, seq, ri.h, ri.i)] = lse;
    }
  }
}

// Where the split partials of (sequence s, key/value head kvh, split c) go: O at part_o + index·rows·dv,
// LSE at part_lse + index·rows, index = (s·Hk + kvh)·splits + c (CombineSplits reads them so).
int64_t partial_index(const DecodePlan& dp, int64_t hk, int64_t s, int64_t kvh, int64_t c) {
  return (s * hk + kvh) * dp.splits + c;
}

// Runs work item (sequence s, key/value heads [h0, h0 + nh), split c). With one split it writes the
// rows' out and lse; otherwise each head's partials (partial_index) into part_o / part_lse.
void DecodeItem(const ForwardArgs& a, const Plan& p, const DecodePlan& dp, DecodeScratch& w, int64_t s, int64_t h0,
                int64_t nh, int64_t c, float* part_o, float* part_lse) {
  const Sequence seq = sequence(a, s);
  const Mask& mask = seq.mask;
  const int64_t nq = mask.seqlen_q;
  if (nq * dp.group == 0 || nh <= 0) return;
  // The item's heads, constructed only for the nh it carries: a HeadPart holds rows for
  // kDecodeMaxRows, and default-constructing all kMaxDecodeHeads of them (64 KiB) took as long as a
  // short item's dot products.
  union HeadSlot {
    HeadSlot() {}
    HeadPart part;
  } slots[kMaxDecodeHeads];
  static_assert(std::is_trivially_destructible_v<HeadPart>);
  for (int64_t t = 0; t < nh; ++t) new (&slots[t].part) HeadPart(StartHead(a, p, dp, w, seq, s, t, h0 + t));
  // The tiles' columns past d stay zero: dot products and axpys run over whole vectors. (Rows past
  // a short last tile's keys are never read.)
  const int64_t dim = a.k.dim, dv = a.v.dim;
  for (int64_t row = 0; row < nh * dp.block_k; ++row) {
    std::fill(w.kt + row * dp.dpad + dim, w.kt + (row + 1) * dp.dpad, 0.0f);
    std::fill(w.vt + row * dp.dvpad + dv, w.vt + (row + 1) * dp.dvpad, 0.0f);
  }
  // Exact scores are for fp32 inputs; k has q's dtype (its rows are f32) or is quantized (its tile
  // copies are, and LoadTile takes the norms from them).
  const bool norms = p.exact_scores && p.scores == ScorePrecision::adaptive;
  // Quantized rows read in place (LoadTile): fp32 scores of rows whose lengths are whole vectors.
  const bool codes = is_quantized(a.k.dtype) && !p.exact_scores && DequantizesInVectors(a.k.dtype) &&
                     dim == dp.dpad && dv == dp.dvpad;

  // This item's keys: its split's chunk of the keys the rows may see.
  const int64_t n = mask.seqlen_k;
  const int64_t key_lo = std::max(mask.rows_key_begin(0), split_begin(n, dp.splits, dp.block_k, c));
  const int64_t key_hi = std::min(mask.rows_key_end(nq), split_begin(n, dp.splits, dp.block_k, c + 1));
  TilePrefetch pf(a, seq, h0, nh);
  pf.Start(key_lo, std::min(key_lo + dp.block_k, key_hi), 1);
  pf.Finish();  // the first tile: nothing to overlap it with
  // TileDots steps once per key for each group of up to four rows (R = nq·g rows).
  const int64_t steps = nh * dp.block_k * (nq * dp.group / 4 + nq * dp.group % 4);
  for (int64_t c0 = key_lo; c0 < key_hi; c0 += dp.block_k) {
    const int64_t c1 = std::min(c0 + dp.block_k, key_hi);
    LoadTile(a, seq, h0, nh, c0, c1, dp, w, norms ? w.knorm : nullptr, codes);
    pf.Start(c1, std::min(c1 + dp.block_k, key_hi), steps);
    for (int64_t t = 0; t < nh; ++t) HeadTile(a, p, dp, w, seq, s, slots[t].part, c0, c1, pf);
    pf.Finish();  // what the steps left (fp64 scores do not step)
  }
  const int64_t hk = a.k.heads;
  for (int64_t t = 0; t < nh; ++t) {
    const int64_t at = part_o ? partial_index(dp, hk, s, h0 + t, c) : 0;
    FinishHead(a, dp, seq, slots[t].part, part_o ? part_o + at * dp.rows * dv : nullptr,
               part_o ? part_lse + at * dp.rows : nullptr);
  }
}

// Combines the splits' partials of (sequence s, key/value head kvh) in split order, as
// flashattn::merge folds two: m = max LSE_c, w_c = exp(LSE_c − m), O = Σ (w_c / Σ w) O_c,
// LSE = m + log Σ w; rows empty in every split give O = 0, LSE = −∞, and a NaN LSE makes the row NaN.
void CombineSplits(const ForwardArgs& a, const DecodePlan& dp, int64_t s, int64_t kvh, const float* part_o,
                   const float* part_lse, float* row) {
  const Sequence seq = sequence(a, s);
  const int64_t g = dp.group, R = seq.mask.seqlen_q * g, dv = a.v.dim, stride = dp.rows;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t i = r / g, h = kvh * g + r % g;
    float m = -kInf;
    bool nan = false;
    for (int64_t c = 0; c < dp.splits; ++c) {
      const float lc = part_lse[c * stride + r];
      nan = nan || std::isnan(lc);
      m = std::fmax(m, lc);
    }
    float lse;
    if (nan) {
      std::fill(row, row + dv, std::numeric_limits<float>::quiet_NaN());
      lse = std::numeric_limits<float>::quiet_NaN();
    } else if (m == -kInf) {
      std::fill(row, row + dv, 0.0f);
      lse = -kInf;
    } else {
      float sum = 0.0f;
      for (int64_t c = 0; c < dp.splits; ++c) sum += std::exp(part_lse[c * stride + r] - m);
      std::fill(row, row + dv, 0.0f);
      for (int64_t c = 0; c < dp.splits; ++c) {
        const float wc = std::exp(part_lse[c * stride + r] - m) / sum;
        if (wc == 0.0f) continue;  // an empty split (LSE −∞) holds O = 0 and adds nothing
        const float* oc = part_o + (c * stride + r) * dv;
        for (int64_t x = 0; x < dv; ++x) row[x] += wc * oc[x];
      }
      lse = m + std::log(sum);
    }
    if (a.sinks) lse = AddSink(row, dv, lse, a.sinks[h]);
    store_row(a.out.data, a.out.dtype, a.out.offset(seq.batch, seq.q_start + i, h), dv, row);
    if (a.lse) a.lse[lse_index(a, seq, h, i)] = lse;
  }
}

}  // namespace

// Runs a decode-shaped call on this target: items (sequence, run of key/value heads, split) are
// claimed dynamically one at a time (each streams a whole chunk of keys); with splits, a second loop
// combines each (sequence, key/value head) in split order. No item's result depends on which thread
// ran it, so the output is bitwise identical for any thread count.
void DecodeTarget(const ForwardArgs& a, const Plan& p, const DecodePlan& dp) {
  const int64_t seqs = num_sequences(a), hk = a.k.heads;
  const int64_t items = seqs * dp.head_runs * dp.splits;
  if (items == 0) return;
  const int64_t dv = a.v.dim;
  const size_t part_floats = decode_partial_floats(dp, seqs, hk, dv);
  float* part = part_floats ? call_scratch(part_floats) : nullptr;
  float* part_lse = part;
  float* part_o = part ? part + seqs * hk * dp.splits * dp.rows : nullptr;
  const size_t floats = decode_scratch_floats(dp, p.exact_scores);
  ParallelFor(
      p.threads, items, 1, [&] { return thread_scratch(floats); },
      [&](int64_t it, float* scratch) {
        Carver carver(scratch);
        DecodeScratch w(carver, dp, p.exact_scores);
        const int64_t c = it % dp.splits, run = (it / dp.splits) % dp.head_runs, s = it / (dp.splits * dp.head_runs);
        const int64_t h0 = run * dp.heads;
        DecodeItem(a, p, dp, w, s, h0, std::min(dp.heads, hk - h0), c, part_o, part_lse);
      });
  if (!part) return;
  ParallelFor(
      p.threads, seqs * hk, 1, [&] { return thread_scratch(static_cast<size_t>(round_up(dv, kMaxLanes))); },
      [&](int64_t it, float* row) {
        const int64_t kvh = it % hk, s = it / hk;
        const int64_t first = partial_index(dp, hk, s, kvh, 0);
        CombineSplits(a, dp, s, kvh, part_o + first * dp.rows * dv, part_lse + first * dp.rows, row);
      });
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::cpu {
HWY_EXPORT(DecodeTarget);

void detail::decode_on_target(int64_t target, const ForwardArgs& a, const Plan& p, const DecodePlan& dp) {
  HWY_DISPATCH_TABLE(DecodeTarget)[dispatch_index(target)](a, p, dp);
}
}  // namespace flashattn::cpu
#endif  // HWY_ONCE
