// The deterministic dQ kernel: one CTA per (query block, query head, sequence), no atomics. Like the
// forward, Q and dO stay in shared memory and K/V tiles stream through a double-buffered pipeline;
// per key tile, recomputing P from LSE:
//   S = Q·Kᵀ (plus the bias), dP = dO·Vᵀ, P = exp(S − LSE), dS = P∘(dP∘Z/(1 − p) − D)·softcap',
//   dQ += dS·K (Z: the dropout keep decisions, all 1 without dropout).
// Every dQ element is summed by one thread in a fixed order, so results are bitwise repeatable.
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

// This thread's two rows' LSE·log2(e) (+inf where the row saw no key, so its P is 0 without a test,
// and for rows past the sequence) and D = rowsum(dO∘O) (0 past the sequence).
__device__ __forceinline__ void load_row_constants(const BackwardParams& p, const SeqInfo& si, int h,
                                                   const int64_t (&row)[2], float (&lse2)[2], float (&dot)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool ok = row[r] < si.mask.seqlen_q;
    const float lse = ok ? ld(p.lse + lse_index(p, si, h, row[r])) : -INFINITY;
    lse2[r] = lse == -INFINITY ? INFINITY : lse * kLog2e;
    dot[r] = ok ? ld(p.dot + lse_index(p, si, h, row[r])) : 0.0f;
  }
}

// The recomputed score gradients of one key tile for this thread's two rows (S, dP fragments: row
// row[e / 2], key c0 + 8·nb + 2t + e % 2): acc_dp ← dS = P∘(dP∘Z/(1 − p) − D)·(1 − tanh²) for
// soft-capping, P = exp(mask(bias + transform(scale·S)) − LSE). kMasked: every element is tested
// (rows past the sequence, the mask, the block mask's hidden bits); the options' variant tests the
// mask only in partial tiles, and reads the bias only for elements it shows.
template <bool kMasked, bool kExtras, int kN, class Bias>
__device__ __forceinline__ void dq_gradient_tile(const float (&acc_s)[kN][4], float (&acc_dp)[kN][4],
                                                 const BackwardParams& p, const Mask& m, const ScoreTransform& score,
                                                 const Bias& bias, const int64_t (&row)[2], int64_t c0,
                                                 const float (&lse2)[2], const float (&dot)[2], bool partial,
                                                 uint32_t block_hidden, uint32_t keep, bool dropout, int t) {
#pragma unroll
  for (int nb = 0; nb < kN; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t i = row[e / 2], j = c0 + nb * kMmaCols + 2 * t + e % 2;
      float th = 0;
      bool seen = true;
      if constexpr (kMasked)
        seen = ((kExtras && !partial) || (i < m.seqlen_q && m.visible(i, j))) && !((block_hidden >> (4 * nb + e)) & 1u);
      float pr = 0.0f;
      if constexpr (kExtras)
        pr = seen ? exp2f(score(acc_s[nb][e], i, j, bias(i, j), th) - lse2[e / 2]) : 0.0f;
      else
        pr = seen ? exp2_ftz(fmaf(acc_s[nb][e], score.scale2, -lse2[e / 2])) : 0.0f;
      const bool kept = (keep >> (4 * nb + e)) & 1u;
      const float dp = dropout ? (kept ? acc_dp[nb][e] * p.dropout_scale : 0.0f) : acc_dp[nb][e];
      float ds = pr * (dp - dot[e / 2]);
      if (kExtras && p.softcap > 0) ds *= 1.0f - th * th;
      acc_dp[nb][e] = ds;
    }
}

// dq = scale·acc_dq rounded to T for this thread's two rows (none past the sequence).
template <class T, int kDTiles>
__device__ __forceinline__ void store_dq_rows(const BackwardParams& p, const SeqInfo& si, int h,
                                              const int64_t (&row)[2], const float (&acc_dq)[kDTiles][4], int t) {
  T* dq = static_cast<T*>(p.dq.data);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= si.mask.seqlen_q) continue;
    T* qrow = dq + p.dq.offset(si.batch, si.q_start + row[r], h);
#pragma unroll
    for (int nd = 0; nd < kDTiles; ++nd)
      st(reinterpret_cast<uint32_t*>(qrow + nd * kMmaCols + 2 * t),
         Elem<T>::pack(p.scale * acc_dq[nd][2 * r], p.scale * acc_dq[nd][2 * r + 1]));
  }
}

// kExtras: the code of the bias, dropout, softcap and ALiBi is compiled in; without it (calls that
// use none of them: backward_extras) P = exp2(acc·scale·log2 e − LSE·log2 e) is one FFMA and ex2,
// as in the dK/dV kernel's plain variant. kBlockSparse: the block-mask code (only with kExtras).
template <int D, int DV, class T, bool kExtras, bool kBlockSparse>
__global__ void __launch_bounds__(DqTraits<D, DV>::kThreads) dq_kernel(const BackwardParams p) {
  using Tr = DqTraits<D, DV>;
  constexpr int Br = Tr::kBr, Bc = Tr::kBc;
  using QL = TileLayout<Br, D>;
  using OL = TileLayout<Br, DV>;
  using KL = TileLayout<Bc, D>;
  using VL = TileLayout<Bc, DV>;
  constexpr int kNTiles = Bc / kMmaCols;
  constexpr int kDTiles = D / kMmaCols;

  const int s = blockIdx.z, h = blockIdx.y;
  const SeqInfo si = sequence_info(p, s);
  const Mask& m = si.mask;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * Br;
  if (r0 >= m.seqlen_q) return;
  const int64_t r1 = r0 + Br < m.seqlen_q ? r0 + Br : m.seqlen_q;
  const int hk = static_cast<int>(kv_head(h, p.heads_q, p.heads_k));

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + QL::kElems;
  T* sK = sdO + OL::kElems;      // [2][Bc][stride]
  T* sV = sK + 2 * KL::kElems;   // [2][Bc][stride]

  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int g = lane / 4, t = lane % 4;

  const T* k = static_cast<const T*>(p.k.data) + p.k.offset(si.batch, si.k_start, hk);
  const T* v = static_cast<const T*>(p.v.data) + p.v.offset(si.batch, si.k_start, hk);
  // As the forward: the window rule's tiles, of them those classify_tile does not call empty, and of
  // a tile only the key rows of listed blocks.
  const BlockMask& bm = p.block_mask;
  const TileRange tiles = key_tiles<Bc>(m, r0, r1);
  auto load_kv = [&](int64_t tile, int buf) {
    const int64_t c0 = tile * Bc;
    const int valid = static_cast<int>(m.seqlen_k - c0 < Bc ? m.seqlen_k - c0 : Bc);
    const uint64_t rows = listed_rows<kBlockSparse, Bc>(bm, s, h, h + 1, r0, r1, c0);
    load_listed_rows<kBlockSparse, Bc, D, Tr::kThreads>(
        sK + buf * KL::kElems, StridedRows<T>{k + c0 * p.k.stride_seq, p.k.stride_seq}, k, valid, rows, tid);
    load_listed_rows<kBlockSparse, Bc, DV, Tr::kThreads>(
        sV + buf * VL::kElems, StridedRows<T>{v + c0 * p.v.stride_seq, p.v.stride_seq}, v, valid, rows, tid);
  };
  load_tile<Br, D, Tr::kThreads>(sQ, static_cast<const T*>(p.q.data) + p.q.offset(si.batch, si.q_start + r0, h),
                                 p.q.stride_seq, static_cast<int>(r1 - r0), tid);
  load_tile<Br, DV, Tr::kThreads>(sdO, static_cast<const T*>(p.dout.data) + p.dout.offset(si.batch, si.q_start + r0, h),
                                  p.dout.stride_seq, static_cast<int>(r1 - r0), tid);
  const int64_t first = next_visited<kBlockSparse, Bc>(m, bm, s, h, r0, r1, tiles.first, tiles.last);
  if (first < tiles.last) load_kv(first, 0);
  cp_async_commit();

  const ScoreTransform score{p.scale, p.softcap, alibi_slope(p, s, h), m.diag()};
  const BiasRows bias(p, s, h);
  const DropoutStream drop(p, s, h);
  const int64_t row[2] = {r0 + warp * kMmaRows + g, r0 + warp * kMmaRows + g + 8};
  float lse2[2], dot[2];  // LSE in the log2 domain (+inf: the row sees no key, P = 0) and D
  load_row_constants(p, si, h, row, lse2, dot);
  float acc_dq[kDTiles][4] = {};

  int parity = 0;  // block-sparse variant: the buffer of this visited tile (they alternate)
  // (Without kBlockSparse next is tile + 1; stepping by tile + 1 there keeps `next` dead after the
  // prefetch, as before block masks.)
  for (int64_t tile = first, next; tile < tiles.last;
       tile = kBlockSparse ? next : tile + 1, parity ^= kBlockSparse) {
    const int buf = kBlockSparse ? parity : static_cast<int>((tile - tiles.first) & 1);
    next = next_visited<kBlockSparse, Bc>(m, bm, s, h, r0, r1, tile + 1, tiles.last);  // prefetched while this one computes
    if (next < tiles.last) {
      load_kv(next, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* tK = sK + buf * KL::kElems;
    const T* tV = sV + buf * VL::kElems;
    const int64_t c0 = tile * Bc;

    // S = Q·Kᵀ and dP = dO·Vᵀ (this warp's 16 rows x Bc keys)
    float acc_s[kNTiles][4] = {}, acc_dp[kNTiles][4] = {};
    mma_abt<D, Bc>(acc_s, sQ + warp * kMmaRows * QL::kStride, QL::kStride, tK, KL::kStride, lane);
    mma_abt<DV, Bc>(acc_dp, sdO + warp * kMmaRows * OL::kStride, OL::kStride, tV, VL::kStride, lane);

    // P = exp(mask(bias + transform(scale·S)) − LSE);  dS = P∘(dP∘Z/(1 − p) − D)·(1 − tanh²) for
    // soft-capping. A block with rows past the sequence tests every tile: those rows read no bias.
    const bool partial = m.classify(r0, r1, c0, c0 + Bc) != TileKind::full || r1 - r0 < Br;
    // The elements the block mask hides (a bit each), in tiles it leaves partial; none without kBlockSparse.
    uint32_t block_hidden = 0;
    if constexpr (kBlockSparse) {
      if (block_kind<kBlockSparse>(bm, s, h, r0, r1, c0, c0 + Bc) != TileKind::full)
        block_hidden = block_hidden_bits<kNTiles>(m, bm, s, h, [&](int nb, int e, int64_t& i, int64_t& j) {
          i = e < 2 ? row[0] : row[1];  // selects: no dynamic index into registers
          j = c0 + nb * kMmaCols + 2 * t + e % 2;
        });
    }
    const bool dropout = kExtras && p.dropout_p > 0;
    const uint32_t keep = dropout ? keep_mask_rows<kNTiles>(drop, row, c0, lane) : ~0u;
    // The plain variant has two copies of the element loop, chosen once per tile: a partial tile
    // tests every element, a full one none (a row that saw no key has lse2 = +inf: P = 0 without a
    // test). The options' variants keep one (a second spilled: 104 B at d = 128).
    if (kExtras || partial)
      dq_gradient_tile<true, kExtras>(acc_s, acc_dp, p, m, score, bias, row, c0, lse2, dot, partial, block_hidden,
                                      keep, dropout, t);
    else
      dq_gradient_tile<false, kExtras>(acc_s, acc_dp, p, m, score, bias, row, c0, lse2, dot, partial, block_hidden,
                                       keep, dropout, t);

    // dQ += dS·K (dS rounded to T; scaled at the end)
    mma_pb_tiles<T, KL::kStride>(reinterpret_cast<float(&)[1][kDTiles][4]>(acc_dq),
                                 reinterpret_cast<const float(&)[1][kNTiles][4]>(acc_dp), tK, lane);
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }
  cp_async_wait<0>();

  store_dq_rows<T>(p, si, h, row, acc_dq, t);
}

// Returns the dq kernel variant of a call: with the block-mask code (and the options') when it has a
// block mask, with the options' code when it uses one (backward_extras), else the plain one. Every
// variant has the shape DqTraits<D, DV>.
template <int D, int DV, class T>
auto dq_variant(const BackwardParams& p) {
  if (uses_block_mask(p)) return dq_kernel<D, DV, T, true, true>;
  return backward_extras(p) ? dq_kernel<D, DV, T, true, false> : dq_kernel<D, DV, T, false, false>;
}

}  // namespace flashattn::gpu::detail
