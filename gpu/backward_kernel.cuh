// The fused backward kernel: one CTA per (key block, key/value head, sequence). K and V of the
// block stay in shared memory; Q, dO, LSE and D = rowsum(dO∘O) of each query block stream through
// a double-buffered cp.async pipeline. Per query block, recomputing P from LSE (never stored in
// global memory):
//   Sᵀ = K·Qᵀ (plus the bias), dPᵀ = V·dOᵀ, Pᵀ = exp(Sᵀ − LSE), dSᵀ = Pᵀ∘(dPᵀ∘Z/(1 − p) − D)·softcap',
//   dV += (Pᵀ∘Z)·dO (times 1/(1 − p) at the end), dK += dSᵀ·Q, and (atomic mode) dQ_accum +=
//   dS·K with fp32 atomics (dq_convert_kernel applies the scale); Z: the dropout keep decisions (all
//   1 without dropout).
// dK and dV sum over the query heads of the GQA group inside the block: no atomics, so they are
// bitwise repeatable; dQ is repeatable only through the separate dq kernel (deterministic mode).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "block_sparse.cuh"
#include "dropout.cuh"
#include "flashattn/problem.hpp"
#include "params.cuh"
#include "tile.cuh"
#include "traits.cuh"

namespace flashattn::gpu::detail {

// Returns the query blocks [first, last) of width Br whose rows see some key of [k0, k1) under m.
// The rows seeing a key range form one interval (both ends of a row's key interval grow with the
// row), so every block between the first and the last non-empty one is non-empty too.
template <int Br>
__device__ inline TileRange query_blocks(const Mask& m, int64_t k0, int64_t k1) {
  const int64_t blocks = (m.seqlen_q + Br - 1) / Br;
  TileRange r{0, 0};
  int64_t b = 0;
  for (; b < blocks; ++b) {
    const int64_t i1 = (b + 1) * Br < m.seqlen_q ? (b + 1) * Br : m.seqlen_q;
    if (m.classify(b * Br, i1, k0, k1) != TileKind::empty) break;
  }
  r.first = b;
  for (; b < blocks; ++b) {
    const int64_t i1 = (b + 1) * Br < m.seqlen_q ? (b + 1) * Br : m.seqlen_q;
    if (m.classify(b * Br, i1, k0, k1) == TileKind::empty) break;
  }
  r.last = b;
  return r;
}

// Loads the CTA's key block (keys k0 + [0, Bc) of key/value head hk) of K and V into sK, sV: with a
// block mask only the key rows some visited step's lists name (the query heads of the group, the
// query blocks that see the key block), all rows otherwise; rows past the sequence read zeros.
template <int D, int DV, class Tr, bool kBlockSparse, class T>
__device__ __forceinline__ void load_key_block(const BackwardParams& p, const SeqInfo& si, int s, int hk, int group, int64_t k0,
                                      T* sK, T* sV, int tid) {
  constexpr int Br = Tr::kBr, Bc = Tr::kBc;
  const Mask& m = si.mask;
  const int64_t visible = m.seqlen_k - k0;
  const int valid = static_cast<int>(visible < 0 ? 0 : visible < Bc ? visible : Bc);
  uint64_t rows = ~uint64_t{0};  // the key rows to load (all without kBlockSparse)
  if constexpr (kBlockSparse) {
    const TileRange q = query_blocks<Br>(m, k0, k0 + Bc);
    const int64_t qr1 = q.last * Br < m.seqlen_q ? q.last * Br : m.seqlen_q;
    rows = listed_rows<kBlockSparse, Bc>(p.block_mask, s, hk * group, hk * group + group, q.first * Br, qr1, k0);
  }
  const T* k = static_cast<const T*>(p.k.data) + p.k.offset(si.batch, si.k_start + k0, hk);
  const T* v = static_cast<const T*>(p.v.data) + p.v.offset(si.batch, si.k_start + k0, hk);
  load_listed_rows<kBlockSparse, Bc, D, Tr::kThreads>(sK, StridedRows<T>{k, p.k.stride_seq}, k, valid, rows, tid);
  load_listed_rows<kBlockSparse, Bc, DV, Tr::kThreads>(sV, StridedRows<T>{v, p.v.stride_seq}, v, valid, rows, tid);
}

// Loads query step (query head hq, query block from row i0) into one buffer of the pipeline: Q and
// dO rows, and in the same cp.async group LSE·log2(e) and D = rowsum(dO∘O); rows past the sequence
// read 0 (the mask hides them: their tiles are partial and Mask::row_end stops at seqlen_q).
template <int D, int DV, class Tr, class T>
__device__ __forceinline__ void load_query_step(const BackwardParams& p, const SeqInfo& si, int hq, int64_t i0, T* sQ, T* sdO,
                                       float* sLse, float* sDot, int tid) {
  constexpr int Br = Tr::kBr;
  const int valid = static_cast<int>(si.mask.seqlen_q - i0 < Br ? si.mask.seqlen_q - i0 : Br);
  load_tile<Br, D, Tr::kThreads>(sQ, static_cast<const T*>(p.q.data) + p.q.offset(si.batch, si.q_start + i0, hq),
                                 p.q.stride_seq, valid, tid);
  load_tile<Br, DV, Tr::kThreads>(sdO, static_cast<const T*>(p.dout.data) + p.dout.offset(si.batch, si.q_start + i0, hq),
                                  p.dout.stride_seq, valid, tid);
  for (int r = tid; r < Br; r += Tr::kThreads) {
    const bool ok = r < valid;
    const int64_t idx = ok ? lse_index(p, si, hq, i0 + r) : 0;
    cp_async_4(sLse + r, p.lse2 + idx, ok);
    cp_async_4(sDot + r, p.dot + idx, ok);
  }
}

// The recomputed probabilities and score gradients of one query step for this thread's two keys
// (key[0], key[1]; Sᵀ/dPᵀ fragments: row = key, column = query il = q0 + 8·nb + 2t + e % 2 of the
// block starting at i0): acc_s ← Pᵀ∘Z, acc_dp ← dSᵀ = Pᵀ∘(dPᵀ∘Z/(1 − p) − D)·(1 − tanh²) for
// soft-capping. kMasked: every element is tested against its key's rows [lo, hi) (relative to i0),
// the rows the forward saw nothing of (lse2 = +inf) and the block mask's hidden bits; else none.
template <bool kMasked, bool kExtras, int kQTiles, class Key>
__device__ __forceinline__ void gradient_tile(float (&acc_s)[kQTiles][4], float (&acc_dp)[kQTiles][4], const BackwardParams& p,
                                     const ScoreTransform& score, const BiasRows& bias, const float* tLse,
                                     const float* tDot, int64_t i0, const Key (&key)[2], const int (&lo)[2],
                                     const int (&hi)[2], uint32_t block_hidden, uint32_t keep, bool dropout, int q0,
                                     int t) {
#pragma unroll
  for (int nb = 0; nb < kQTiles; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int il = q0 + nb * kMmaCols + 2 * t + e % 2;  // query row within the block
      const int64_t i = i0 + il, j = key[e / 2];
      float th = 0;
      const float lse2 = ld(tLse + il);
      bool seen = true;
      if constexpr (kMasked)
        seen = lse2 != INFINITY && lo[e / 2] <= il && il < hi[e / 2] && !((block_hidden >> (4 * nb + e)) & 1u);
      // (the variant without the options' code: exp2(acc·scale2 − lse2) in one FFMA and ex2, as
      // the forward's plain variant; the bias is read only for seen elements)
      const float pr = seen ? exp2_ftz(kExtras ? score(acc_s[nb][e], i, j, bias(i, j), th) - lse2
                                               : fmaf(acc_s[nb][e], score.scale2, -lse2))
                            : 0.0f;
      const bool kept = (keep >> (4 * nb + e)) & 1u;
      const float dp = dropout ? (kept ? acc_dp[nb][e] * p.dropout_scale : 0.0f) : acc_dp[nb][e];
      float ds = pr * (dp - ld(tDot + il));
      if (kExtras && p.softcap > 0) ds *= 1.0f - th * th;
      acc_s[nb][e] = kept ? pr : 0.0f;
      acc_dp[nb][e] = ds;
    }
}

// Stores a warp's Sᵀ-shaped fragments (its slab's 16 keys x kQTiles·8 queries from q0), rounded to
// T, to dst as [key][query] with row stride `stride`.
template <class T, int kQTiles>
__device__ __forceinline__ void store_transposed(T* dst, int stride, const float (&acc)[kQTiles][4], int slab, int q0, int g,
                                        int t) {
#pragma unroll
  for (int nb = 0; nb < kQTiles; ++nb)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      st(reinterpret_cast<uint32_t*>(dst + (slab * kMmaRows + g + 8 * r) * stride + q0 + nb * kMmaCols + 2 * t),
         Elem<T>::pack(acc[nb][2 * r], acc[nb][2 * r + 1]));
}

// dV += Pᵀ·dO and dK += dSᵀ·Q for one query step (this warp's columns col0 of dK, vcol0 of dV; dK is
// scaled at the end): the A fragments of 16 queries come from shared memory (sPt, sdSt; kShare) or
// this warp's registers (acc_s = Pᵀ∘Z, acc_dp = dSᵀ), the B fragments transposed from dO and Q.
template <class Tr, class T, int kQTiles, int kColTiles, int kVColTiles>
__device__ __forceinline__ void mma_dkdv(float (&acc_dk)[kColTiles][4], float (&acc_dv)[kVColTiles][4],
                                const float (&acc_s)[kQTiles][4], const float (&acc_dp)[kQTiles][4], const T* sPt,
                                const T* sdSt, const T* tQ, const T* tdO, int slab, int col0, int vcol0, int lane) {
  using QL = typename Tr::QL;
  using OL = typename Tr::OL;
  using PL = typename Tr::PL;
#pragma unroll
  for (int ks = 0; ks < Tr::kBr / kMmaRows; ++ks) {
    uint32_t ap[4], ads[4];
    if constexpr (Tr::kShare) {
      const int arow = (slab * kMmaRows + lane % 16) * PL::kStride + ks * kMmaRows + 8 * (lane / 16);
      ldmatrix_x4(ap, sPt + arow);
      ldmatrix_x4(ads, sdSt + arow);
    } else {
      pack_a<T>(ap, acc_s[2 * ks], acc_s[2 * ks + 1]);
      pack_a<T>(ads, acc_dp[2 * ks], acc_dp[2 * ks + 1]);
    }
    const int krow = ks * kMmaRows + lane % 8 + 8 * ((lane / 8) % 2);  // the ldmatrix row of this lane
#pragma unroll
    for (int nd = 0; nd < kVColTiles; nd += 2) {
      uint32_t bo[4];
      ldmatrix_x4_trans(bo, tdO + krow * OL::kStride + vcol0 + nd * kMmaCols + 8 * (lane / 16));
      mma<T>(acc_dv[nd], ap, bo[0], bo[1]);
      mma<T>(acc_dv[nd + 1], ap, bo[2], bo[3]);
    }
#pragma unroll
    for (int nd = 0; nd < kColTiles; nd += 2) {
      uint32_t bq[4];
      ldmatrix_x4_trans(bq, tQ + krow * QL::kStride + col0 + nd * kMmaCols + 8 * (lane / 16));
      mma<T>(acc_dk[nd], ads, bq[0], bq[1]);
      mma<T>(acc_dk[nd + 1], ads, bq[2], bq[3]);
    }
  }
}

// dQ_accum += dS·K for one query step (this warp's 16 query rows and kQCols columns from qcol0, rows
// from i0 + qslab·16): the A fragments of dS come transposed from dSᵀ in shared memory (lane l names
// key 16·ks + l % 8 + 8·(l / 16), query 8·((l / 8) % 2)); K from sK. The pairs of adjacent columns
// go out as fp32 reductions (dq_convert applies the scale). A row past the sequence reduces into
// p.dq_sink, a scratch row nobody reads, so no reduction is behind a row guard: ptxas wraps a
// guarded one, even a predicated `red`, in its own divergent branch (BSSY, BRA, BSYNC).
template <int D, class Tr, class T>
__device__ __forceinline__ void accumulate_dq(const BackwardParams& p, const SeqInfo& si, int hq, int64_t i0, const T* sdSt,
                                     const T* sK, int warp, int lane) {
  constexpr int Bc = Tr::kBc;
  using KL = typename Tr::KL;
  using PL = typename Tr::PL;
  const int g = lane / 4, t = lane % 4;
  const int qslab = warp / Tr::kQSplit, qcol0 = (warp % Tr::kQSplit) * Tr::kQCols;
  uint32_t ads[Bc / kMmaRows][4];
#pragma unroll
  for (int ks = 0; ks < Bc / kMmaRows; ++ks)
    ldmatrix_x4_trans(ads[ks], sdSt + (ks * kMmaRows + lane % 8 + 8 * (lane / 16)) * PL::kStride +
                                   qslab * kMmaRows + 8 * ((lane / 8) % 2));
  // This thread's two dQ rows (g and g + 8 of the warp's 16), or the sink for a row past the
  // sequence: one address each per query block, every reduction of the row at an immediate offset.
  const int64_t row = i0 + qslab * kMmaRows + g;
  float* const dq_row = p.dq_accum + ((si.batch * p.q_seq + si.q_start + row) * p.heads_q + hq) * D + qcol0 + 2 * t;
  float* const sink = p.dq_sink + qcol0 + 2 * t;
  float* const dq_rows[2] = {row < si.mask.seqlen_q ? dq_row : sink,
                             row + 8 < si.mask.seqlen_q ? dq_row + 8 * static_cast<int64_t>(p.heads_q) * D : sink};
#pragma unroll
  for (int nd = 0; nd < Tr::kQCols / kMmaCols; nd += 2) {
    float acc[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < Bc / kMmaRows; ++ks) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, sK + (ks * kMmaRows + lane % 8 + 8 * ((lane / 8) % 2)) * KL::kStride + qcol0 +
                               nd * kMmaCols + 8 * (lane / 16));
      mma<T>(acc[0], ads[ks], b[0], b[1]);
      mma<T>(acc[1], ads[ks], b[2], b[3]);
    }
#pragma unroll
    for (int e = 0; e < 8; e += 2)  // the C fragment's pairs of adjacent columns (scaled in dq_convert)
      atomic_add_pair(dq_rows[(e % 4) / 2] + (nd + e / 4) * kMmaCols, acc[e / 4][e % 4], acc[e / 4][e % 4 + 1]);
  }
}

// Epilogue of a warp's two keys: dK = scale·acc_dk, dV = dv_scale·acc_dv (1/(1 − p) with dropout) in
// this warp's columns (col0, vcol0); nothing for keys past the sequence's rows.
template <class T, int kColTiles, int kVColTiles, class Key>
__device__ __forceinline__ void store_key_rows(const BackwardParams& p, const SeqInfo& si, int hk, const Key (&key)[2],
                                      float dv_scale, const float (&acc_dk)[kColTiles][4],
                                      const float (&acc_dv)[kVColTiles][4], int col0, int vcol0, int t) {
  T* dk = static_cast<T*>(p.dk.data);
  T* dv = static_cast<T*>(p.dv.data);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= si.k_rows) continue;
    T* krow = dk + p.dk.offset(si.batch, si.k_start + key[r], hk);
    T* vrow = dv + p.dv.offset(si.batch, si.k_start + key[r], hk);
#pragma unroll
    for (int nd = 0; nd < kColTiles; ++nd)
      st(reinterpret_cast<uint32_t*>(krow + col0 + nd * kMmaCols + 2 * t),
         Elem<T>::pack(p.scale * acc_dk[nd][2 * r], p.scale * acc_dk[nd][2 * r + 1]));
#pragma unroll
    for (int nd = 0; nd < kVColTiles; ++nd)
      st(reinterpret_cast<uint32_t*>(vrow + vcol0 + nd * kMmaCols + 2 * t),
         Elem<T>::pack(dv_scale * acc_dv[nd][2 * r], dv_scale * acc_dv[nd][2 * r + 1]));
  }
}

// In a partial tile, key r of this thread is seen by the query block's rows [lo[r], hi[r])
// (Mask::row_begin/row_end relative to i0, clamped to the block; rows past the sequence see nothing).
template <int Br, class Key>
__device__ __forceinline__ void key_row_intervals(const Mask& m, const Key (&key)[2], int64_t i0, int (&lo)[2],
                                                  int (&hi)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lo[r] = tile_offset(m.row_begin(key[r]) - i0, Br);
    hi[r] = tile_offset(m.row_end(key[r]) - i0, Br);
  }
}

// Returns the elements of this thread's Sᵀ fragments the block mask hides (a bit each: 4·nb + e) in a
// tile it leaves partial, and sets `partial` to whether it does; 0 and false without kBlockSparse.
template <bool kBlockSparse, int kQTiles, int Bc, class Key>
__device__ __forceinline__ uint32_t block_tile_bits(const Mask& m, const BlockMask& bm, int s, int hq, int64_t i0,
                                                    int64_t i1, int64_t k0, const Key (&key)[2], int q0, int t,
                                                    bool& partial) {
  if constexpr (kBlockSparse) {
    partial = block_kind<kBlockSparse>(bm, s, hq, i0, i1, k0, k0 + Bc) != TileKind::full;
    if (partial)
      return block_hidden_bits<kQTiles>(m, bm, s, hq, [&](int nb, int e, int64_t& i, int64_t& j) {
        i = i0 + q0 + nb * kMmaCols + 2 * t + e % 2;
        j = e < 2 ? key[0] : key[1];  // selects: no dynamic index into registers
      });
  }
  return 0;
}

// The dK/dV kernel's shared memory: K and V of the key block, two buffers of each query step's Q, dO,
// LSE·log2(e) and D, and the dSᵀ and Pᵀ∘Z tiles ([key][query], rounded to T; Pᵀ with kShare only).
template <class Tr, class T>
struct BackwardSmem {
  T *k, *v, *q, *dout, *dst, *pt;
  float *lse, *dot;
  __device__ explicit BackwardSmem(unsigned char* raw) {
    k = reinterpret_cast<T*>(raw);
    v = k + Tr::KL::kElems;
    q = v + Tr::VL::kElems;
    dout = q + 2 * Tr::QL::kElems;
    dst = dout + 2 * Tr::OL::kElems;
    pt = dst + Tr::PL::kElems;
    lse = reinterpret_cast<float*>(pt + (Tr::kShare ? Tr::PL::kElems : 0));
    dot = lse + 2 * Tr::kBr;
  }
};

// A step of the dK/dV kernel: one query head of the group and one query block.
struct QueryStep {
  int head;   // in the group; `group`: past the last step
  int block;  // query block index (a sequence has fewer than 2^31 blocks of rows)
};

// The steps of a key block: every query block of [first, last) (those whose rows see the keys), head
// by head. A step's pair is carried from the last one: dividing a 64-bit step index cost a call or
// ~20 instructions per step.
struct QuerySteps {
  int group, first, last;
  __device__ QueryStep begin() const { return last > first ? QueryStep{0, first} : QueryStep{group, 0}; }
  __device__ bool done(const QueryStep& x) const { return x.head >= group; }
  __device__ QueryStep advance(QueryStep x) const {
    if (++x.block == last) {
      x.block = first;
      ++x.head;
    }
    return x;
  }
};

// Returns the first step at or after x whose tile classify_tile does not call empty (x itself without
// the block-mask code or without a block mask).
template <int Br, int Bc, bool kBlockSparse>
__device__ __forceinline__ QueryStep next_visited(const QuerySteps& steps, QueryStep x, const Mask& m,
                                                  const BlockMask& bm, int s, int hk, int64_t k0) {
  if constexpr (kBlockSparse) {
    if (bm.used())
      for (; !steps.done(x); x = steps.advance(x)) {
        const int64_t i0 = static_cast<int64_t>(x.block) * Br;
        const int64_t i1 = i0 + Br < m.seqlen_q ? i0 + Br : m.seqlen_q;
        if (classify_tile(m, bm, s, hk * steps.group + x.head, i0, i1, k0, k0 + Bc, DeviceRead{}) != TileKind::empty) break;
      }
  }
  return x;
}

// kExtras: the code of the bias, dropout, softcap and ALiBi is compiled in. The launcher picks the
// variant without it for calls that use none of them (uses_score_options), which has fewer
// registers (the tile shapes are the same, traits.cuh; with the options the d = 32 and d = 64
// kernels reach 255 registers and spill; docs/gpu.md). kBlockSparse: the
// block-mask code is compiled in; it comes only with kExtras (backward_variant: three variants, not
// four), so calls without a block mask run the code they ran before block masks.
template <int D, int DV, class T, bool kExtras, bool kBlockSparse>
__global__ void __launch_bounds__(BackwardTraits<D, DV, kExtras>::kThreads)
    backward_kernel(const BackwardParams p, const bool atomic_dq) {
  using Tr = BackwardTraits<D, DV, kExtras>;
  constexpr int Br = Tr::kBr, Bc = Tr::kBc;
  using KL = typename Tr::KL;
  using VL = typename Tr::VL;
  using QL = typename Tr::QL;
  using OL = typename Tr::OL;
  using PL = typename Tr::PL;
  constexpr int kQTiles = Tr::kQPart / kMmaCols;     // 8-column blocks of this warp's Sᵀ (queries)
  constexpr int kColTiles = Tr::kCols / kMmaCols;    // 8-column blocks of this warp's dK
  constexpr int kVColTiles = Tr::kVCols / kMmaCols;  // 8-column blocks of this warp's dV

  const int s = blockIdx.z, hk = blockIdx.y;
  const SeqInfo si = sequence_info(p, s);
  const Mask& m = si.mask;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * Bc;
  if (k0 >= si.k_rows) return;
  const int group = p.heads_q / p.heads_k;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const BackwardSmem<Tr, T> sm(smem_raw);
  T* const sK = sm.k;
  T* const sdSt = sm.dst;
  T* const sPt = sm.pt;

  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int slab = warp / Tr::kSplit, part = warp % Tr::kSplit;
  const int col0 = part * Tr::kCols, vcol0 = part * Tr::kVCols;  // this warp's first dK / dV column
  const int q0 = Tr::kShare ? part * Tr::kQPart : 0;  // this warp's first query column of Sᵀ and dPᵀ

  // With a block mask, only the (query head, query block) steps classify_tile does not call empty
  // are visited, and only the key rows some visited step's lists name are loaded.
  const BlockMask& bm = p.block_mask;
  load_key_block<D, DV, Tr, kBlockSparse>(p, si, s, hk, group, k0, sK, sm.v, tid);

  const TileRange qblocks = query_blocks<Br>(m, k0, k0 + Bc);
  const QuerySteps steps{group, static_cast<int>(qblocks.first), static_cast<int>(qblocks.last)};
  auto load_q = [&](const QueryStep& x, int buf) {
    load_query_step<D, DV, Tr>(p, si, hk * group + x.head, static_cast<int64_t>(x.block) * Br,
                               sm.q + buf * QL::kElems, sm.dout + buf * OL::kElems, sm.lse + buf * Br,
                               sm.dot + buf * Br, tid);
  };
  const QueryStep first = next_visited<Br, Bc, kBlockSparse>(steps, steps.begin(), m, bm, s, hk, k0);
  if (!steps.done(first)) load_q(first, 0);
  cp_async_commit();

  float acc_dk[kColTiles][4] = {}, acc_dv[kVColTiles][4] = {};
  // This thread's keys: 32-bit in the kWide kernels (d = 96/128; a sequence has fewer than 2^31
  // keys), whose whole-d dK/dV accumulators leave no room for 64-bit ones (they spilled 16 B at
  // d = 128); elsewhere 64-bit kept fewer instructions and registers.
  using Key = std::conditional_t<Tr::kWide, int, int64_t>;
  const Key key[2] = {static_cast<Key>(k0 + slab * kMmaRows + g), static_cast<Key>(k0 + slab * kMmaRows + g + 8)};

  int buf = 0;  // the buffer of this step's Q, dO, LSE and D (they alternate)
  for (QueryStep step = first, next; !steps.done(step); step = kBlockSparse ? next : steps.advance(step), buf ^= 1) {
    next = next_visited<Br, Bc, kBlockSparse>(steps, steps.advance(step), m, bm, s, hk, k0);  // prefetched now
    if (!steps.done(next)) {
      load_q(next, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int hq = hk * group + step.head;
    const int64_t i0 = static_cast<int64_t>(step.block) * Br;
    const int64_t i1 = i0 + Br < m.seqlen_q ? i0 + Br : m.seqlen_q;
    const T* tQ = sm.q + buf * QL::kElems;
    const T* tdO = sm.dout + buf * OL::kElems;
    const float* tLse = sm.lse + buf * Br;
    const float* tDot = sm.dot + buf * Br;

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (this slab's 16 keys x this warp's kQPart queries from q0)
    float acc_s[kQTiles][4] = {}, acc_dp[kQTiles][4] = {};
    mma_abt<D, Tr::kQPart>(acc_s, sK + slab * kMmaRows * KL::kStride, KL::kStride, tQ + q0 * QL::kStride, QL::kStride,
                           lane);
    mma_abt<DV, Tr::kQPart>(acc_dp, sm.v + slab * kMmaRows * VL::kStride, VL::kStride, tdO + q0 * OL::kStride,
                            OL::kStride, lane);

    // Pᵀ = exp(mask(bias + transform(scale·Sᵀ)) − LSE);  dSᵀ = Pᵀ∘(dPᵀ∘Z/(1 − p) − D)·(1 − tanh²)
    // for soft-capping; Pᵀ∘Z stays for dV.
    const ScoreTransform score{p.scale, p.softcap, alibi_slope(p, s, hq), m.diag()};
    const BiasRows bias(p, s, hq);
    const bool partial = m.classify(i0, i1, k0, k0 + Bc) != TileKind::full || i1 - i0 < Br;
    int lo[2] = {0, 0}, hi[2] = {Br, Br};
    if (partial) key_row_intervals<Br>(m, key, i0, lo, hi);
    bool block_partial = false;
    const uint32_t block_hidden =
        block_tile_bits<kBlockSparse, kQTiles, Bc>(m, bm, s, hq, i0, i1, k0, key, q0, t, block_partial);
    const bool dropout = kExtras && p.dropout_p > 0;
    const uint32_t keep = dropout ? keep_mask_keys<kQTiles>(DropoutStream(p, s, hq), k0 + slab * kMmaRows, i0 + q0, lane)
                                  : ~0u;
    // The plain variant has two copies of the element loop, chosen once per step (as the forward):
    // a partial tile tests every element against the mask, a full one none (a row that saw no key
    // in the forward has lse2 = +inf, so its P = exp2(s − lse2) is 0 without a test). The options'
    // variants keep one, which tests every element (their registers have no room for a second).
    if (kExtras || partial || block_partial)
      gradient_tile<true, kExtras>(acc_s, acc_dp, p, score, bias, tLse, tDot, i0, key, lo, hi, block_hidden,
                                   keep, dropout, q0, t);
    else
      gradient_tile<false, kExtras>(acc_s, acc_dp, p, score, bias, tLse, tDot, i0, key, lo, hi, block_hidden,
                                    keep, dropout, q0, t);

    // Pᵀ∘Z and dSᵀ of this warp's queries, rounded to T, to shared memory as [key][query]: with
    // kShare the slab's other warps read them for their dV/dK columns; dSᵀ also feeds the dQ step
    // (without kShare one warp of each slab holds all of it). (Storing after dV/dK instead, where
    // kShare does not need it before, spilled more at d = 32/64: tried.)
    if (Tr::kShare) store_transposed(sPt, PL::kStride, acc_s, slab, q0, g, t);
    if (Tr::kShare || (atomic_dq && part == 0)) store_transposed(sdSt, PL::kStride, acc_dp, slab, q0, g, t);
    if (Tr::kShare || atomic_dq) __syncthreads();  // the slab's Pᵀ and dSᵀ are whole

    mma_dkdv<Tr>(acc_dk, acc_dv, acc_s, acc_dp, sPt, sdSt, tQ, tdO, slab, col0, vcol0, lane);

    if (atomic_dq) accumulate_dq<D, Tr>(p, si, hq, i0, sdSt, sK, warp, lane);
    __syncthreads();  // the next iteration's copy overwrites this buffer (and sPt, sdSt)
  }
  cp_async_wait<0>();

  store_key_rows<T>(p, si, hk, key, kExtras && p.dropout_p > 0 ? p.dropout_scale : 1.0f, acc_dk, acc_dv, col0, vcol0, t);
}

// Returns the dK/dV kernel variant of a call: with the block-mask code when it has a block mask
// (and then with the options' code too), else with the options' code (bias, dropout, softcap,
// ALiBi) only when it uses one; its traits are BackwardTraits<D, DV, backward_extras(p)>.
template <int D, int DV, class T>
auto backward_variant(const BackwardParams& p) {
  if (uses_block_mask(p)) return backward_kernel<D, DV, T, true, true>;
  return backward_extras(p) ? backward_kernel<D, DV, T, true, false> : backward_kernel<D, DV, T, false, false>;
}

}  // namespace flashattn::gpu::detail
