// The fused forward kernel: one CTA per (query block, query head, sequence) — times num_splits
// with split-KV, each split taking a consecutive slice of the key tiles. The Q tile stays in shared
// memory; K/V tiles (contiguous or paged) stream through a double-buffered cp.async pipeline;
// S = Q·Kᵀ and O += P·V run on tensor cores (mma.sync m16n8k16); the online softmax lives in
// registers and starts from the attention sink when there is one (split 0 only). The additive bias
// joins each visible score; dropout zeroes dropped P entries before P·V (the row sums keep the
// undropped P) and the epilogue scales O by 1/(1 − p). Writes O (rounded to nearest even) and LSE,
// or with split-KV the fp32 partials that the combine kernel merges.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "block_sparse.cuh"
#include "dropout.cuh"
#include "flashattn/problem.hpp"
#include "params.cuh"
#include "softmax.cuh"
#include "tile.cuh"
#include "traits.cuh"

namespace flashattn::gpu::detail {

// Returns the key tiles of width Bc that mask m leaves full for every row of [r0, r1) (Mask::classify
// says full for exactly these: [ceil(full_key_begin / Bc), floor(full_key_end / Bc))), none when the
// block has fewer than Br rows (the rows past the sequence must see nothing). Tile indices fit int:
// sequence sizes are below 2^31 (flashattn/mask.hpp).
template <int Br, int Bc>
__device__ inline TileRange full_tiles(const Mask& m, int64_t r0, int64_t r1) {
  if (r1 - r0 < Br) return {0, 0};
  const int64_t kb = m.full_key_begin(r1), ke = m.full_key_end(r0);
  return {(kb + Bc - 1) / Bc, ke / Bc};
}

// S ← mask(bias + alibi(softcap(scale·S))) over one key tile (keys c0 + [0, 8·kN)) of a warp's kM
// m-tiles, in the log2 domain with the options' code (kExtras; the plain variant keeps the unscaled
// S until the exponent), and each thread row's maximum over the tile in tile_max. kMasked (a partial
// tile: of the window rule, of the block mask, or of a block with rows past the sequence, whose rows
// must not read the bias) tests every element; a full tile tests none. row_of(mt, r): the sequence
// row of the thread's row r of m-tile mt.
template <bool kMasked, bool kExtras, bool kBlockSparse, int kM, int kN, class RowOf>
__device__ __forceinline__ void score_tile(float (&acc_s)[kM][kN][4], float (&tile_max)[kM][2], const Mask& m,
                                  const BlockMask& bm, int64_t s, int64_t h, int64_t c0, bool block_partial,
                                  const ScoreTransform& score, const BiasRows& bias, const RowOf& row_of, int t) {
  constexpr int Bc = kN * kMmaCols;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    // A masked tile: row r of this thread's m-tile sees the tile's columns [lo[r], hi[r])
    // (Mask::visible, relative to c0; empty for rows past the sequence), and the block mask
    // hides the elements of block_hidden (a bit each) in tiles it leaves partial.
    int lo[2] = {0, 0}, hi[2] = {Bc, Bc};
    uint32_t block_hidden = 0;
    if constexpr (kMasked) {
      if constexpr (kBlockSparse) {
        if (block_partial)
          block_hidden = block_hidden_bits<kN>(m, bm, s, h, [&](int nb, int e, int64_t& i, int64_t& j) {
            i = row_of(mt, e < 2 ? 0 : 1);  // selects: no dynamic index into registers
            j = c0 + nb * kMmaCols + 2 * t + e % 2;
          });
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = row_of(mt, r);
        const bool in = i < m.seqlen_q;
        lo[r] = in ? tile_offset(m.key_begin(i) - c0, Bc) : 0;
        hi[r] = in ? tile_offset(m.key_end(i) - c0, Bc) : 0;
      }
    }
    tile_max[mt][0] = tile_max[mt][1] = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < kN; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nb * kMmaCols + 2 * t + e % 2;  // key c0 + col
        bool seen = true;
        if constexpr (kMasked) seen = lo[e / 2] <= col && col < hi[e / 2] && !((block_hidden >> (4 * nb + e)) & 1u);
        float x = acc_s[mt][nb][e];
        if constexpr (kExtras) {
          float th;
          const int64_t i = row_of(mt, e / 2), j = c0 + col;
          x = seen ? score(acc_s[mt][nb][e], i, j, bias(i, j), th) : x;
        }
        x = seen ? x : -INFINITY;
        acc_s[mt][nb][e] = x;
        tile_max[mt][e / 2] = fmaxf(tile_max[mt][e / 2], x);
      }
  }
}

// Dropout of one key tile (keys c0 + [0, 8·kN)): zeroes the dropped entries of P before P·V (the row
// sums keep the undropped P; the epilogue scales O by 1/(1 − p)). All 32 lanes call it.
template <int kM, int kN, class RowOf>
__device__ __forceinline__ void drop_tile(float (&acc_s)[kM][kN][4], const DropoutStream& drop, const RowOf& row_of, int64_t c0,
                                 int lane) {
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    const int64_t rows[2] = {row_of(mt, 0), row_of(mt, 1)};
    const uint32_t keep = keep_mask_rows<kN>(drop, rows, c0, lane);
#pragma unroll
    for (int nb = 0; nb < kN; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (!((keep >> (4 * nb + e)) & 1u)) acc_s[mt][nb][e] = 0.0f;
  }
}

// Starts the copies of key tile `tile` (Bc keys from c0 = tile·Bc) of K and V into the shared
// buffers sK, sV: contiguous rows one stride apart (decided once per tile, not per chunk), or each
// row's page from the block table (paged calls run the variants with the options' code); with the
// block-mask code only the rows of listed blocks. Rows past the sequence are zero-filled.
template <class Tr, int D, int DV, bool kExtras, bool kBlockSparse, class T>
__device__ __forceinline__ void load_kv_tile(const ForwardParams& p, const SeqInfo& si, int64_t s, int64_t h, int hk,
                                             int64_t r0, int64_t r1, int tile, T* sK, T* sV, int tid) {
  constexpr int Bc = Tr::kBc;
  const Mask& m = si.mask;
  const T* k = static_cast<const T*>(p.k.data);
  const T* v = static_cast<const T*>(p.v.data);
  const int64_t c0 = static_cast<int64_t>(tile) * Bc;
  const int valid = static_cast<int>(m.seqlen_k - c0 < Bc ? m.seqlen_k - c0 : Bc);
  const uint64_t rows = listed_rows<kBlockSparse, Bc>(p.block_mask, s, h, h + 1, r0, r1, c0);
  auto load = [&](const auto& k_row, const auto& v_row) {
    load_listed_rows<kBlockSparse, Bc, D, Tr::kThreads>(sK, k_row, k, valid, rows, tid);
    load_listed_rows<kBlockSparse, Bc, DV, Tr::kThreads>(sV, v_row, v, valid, rows, tid);
  };
  if (!kExtras || !p.block_table)
    load(StridedRows<T>{k + p.k.offset(si.batch, si.k_start + c0, hk), p.k.stride_seq},
         StridedRows<T>{v + p.v.offset(si.batch, si.k_start + c0, hk), p.v.stride_seq});
  else
    load([&](int r) { return k + key_offset(p, p.k, si, c0 + r, hk); },
         [&](int r) { return v + key_offset(p, p.v, si, c0 + r, hk); });
}

// Epilogue of a warp's rows: O = acc / sum (0 for rows that saw no key), times out_scale (1/(1 − p)
// with dropout, else 1); LSE = ln(sum) + max (−inf for those rows). Split-KV writes both in fp32 to
// the partials of split `split` instead. This warp holds O columns [ocol0, ocol0 + 8·kO).
template <int DV, class T, int kM, int kO, class RowOf>
__device__ __forceinline__ void store_forward_rows(const ForwardParams& p, const SeqInfo& si, int64_t h, int64_t split,
                                          float out_scale, const OnlineSoftmax<kM>& sm, const float (&acc_o)[kM][kO][4],
                                          const RowOf& row_of, int ocol0, int t) {
  const Mask& m = si.mask;
  const bool partials = p.num_splits > 1;
  T* out = static_cast<T*>(p.out.data);
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(sm.row_sum[mt][r]);
      // A row whose every visible score is NaN (a NaN query row) keeps max −inf (fmaxf drops NaN)
      // but a NaN sum: it is NaN, not empty (O and LSE NaN, never the empty row's 0 and −∞).
      const bool empty = sm.row_max[mt][r] == -INFINITY && sum == sum;  // (sum != sum: NaN)
      const float inv = empty ? 0.0f : out_scale / sum;
      const int64_t i = row_of(mt, r);
      if (i >= m.seqlen_q) continue;
      const float lse = empty ? -INFINITY : (sm.row_max[mt][r] + log2f(sum)) * kLn2;
      const int64_t li = lse_index(p, si, h, i);
      if (partials) {
        const int64_t pi = split * p.part_rows + li;
        float* orow = p.o_part + pi * DV + ocol0;
#pragma unroll
        for (int nd = 0; nd < kO; ++nd) {
          st(orow + nd * kMmaCols + 2 * t, acc_o[mt][nd][2 * r] * inv);
          st(orow + nd * kMmaCols + 2 * t + 1, acc_o[mt][nd][2 * r + 1] * inv);
        }
        if (t == 0 && ocol0 == 0) st(p.lse_part + pi, lse);
        continue;
      }
      T* orow = out + p.out.offset(si.batch, si.q_start + i, h);
#pragma unroll
      for (int nd = 0; nd < kO; ++nd) {
        const uint32_t packed = Elem<T>::pack(acc_o[mt][nd][2 * r] * inv, acc_o[mt][nd][2 * r + 1] * inv);
        st(reinterpret_cast<uint32_t*>(orow + ocol0 + nd * kMmaCols + 2 * t), packed);
      }
      if (p.lse && t == 0 && ocol0 == 0) st(p.lse + li, lse);
    }
}

// kExtras: the code of the per-element options (bias, dropout, softcap, ALiBi) is compiled in;
// kBlockSparse: the block-mask code (only with kExtras: forward_variant picks one of three). The
// plain variant (only for a positive normal scale, plain_forward_scale) keeps the unscaled scores
// until the exponent: their maximum times scale·log2(e) is the maximum of the scaled ones (rounding
// is monotone), and exp2(acc·scale2 − max) is one FFMA and ex2, so its full tiles cost per score a
// max, an FFMA, ex2 and an add.
template <int D, int DV, class T, bool kExtras, bool kBlockSparse>
__global__ void __launch_bounds__(ForwardTraits<D, DV, kExtras>::kThreads)
    forward_kernel(const ForwardParams p) {
  using Tr = ForwardTraits<D, DV, kExtras>;
  constexpr int Br = Tr::kBr, Bc = Tr::kBc, kM = Tr::kRowTiles;
  using QL = TileLayout<Br, D>;
  using KL = TileLayout<Bc, D>;
  using VL = TileLayout<Bc, DV>;
  constexpr int kNTiles = Bc / kMmaCols;           // 8-column blocks of S per warp
  constexpr int kOTiles = Tr::kOCols / kMmaCols;   // 8-column blocks of O per warp

  // 64-bit from the start: the epilogue's index products then need no sign extension kept through
  // the key loop (at d = 128/256 that one register spilled).
  const int64_t s = blockIdx.z, h = blockIdx.y;
  const int64_t split = blockIdx.x % p.num_splits;
  const SeqInfo si = sequence_info(p, s);
  const Mask& m = si.mask;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / p.num_splits) * Br;
  if (r0 >= m.seqlen_q) return;
  const int64_t r1 = r0 + Br < m.seqlen_q ? r0 + Br : m.seqlen_q;
  const int hk = static_cast<int>(kv_head(h, p.heads_q, p.heads_k));
  // Tiles of every row's visible keys: the full ones take the element loop without tests. As int
  // (sequence sizes are below 2^31): the steady loop keeps 32-bit tile state.
  const TileRange full64 = full_tiles<Br, Bc>(m, r0, r1);
  const int full_first = static_cast<int>(full64.first), full_last = static_cast<int>(full64.last);

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + QL::kElems;       // [2][Bc][stride]
  T* sV = sK + 2 * KL::kElems;   // [2][Bc][stride]

  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int slab = warp / Tr::kSplit, ocol0 = (warp % Tr::kSplit) * Tr::kOCols;  // rows and O columns
  const int slab_row = slab * kM * kMmaRows;  // the slab's first row in the block

  const T* q = static_cast<const T*>(p.q.data) + p.q.offset(si.batch, si.q_start + r0, h);
  // The split's slice of the window rule's tiles; with a block mask only those classify_tile does
  // not call empty are visited (next_visited), and only the key rows of listed blocks are loaded.
  const BlockMask& bm = p.block_mask;
  const TileRange tiles64 = split_tiles(key_tiles<Bc>(m, r0, r1), split, p.num_splits);
  const int tiles_first = static_cast<int>(tiles64.first), tiles_last = static_cast<int>(tiles64.last);
  auto load_kv = [&](int tile, int buf) {
    load_kv_tile<Tr, D, DV, kExtras, kBlockSparse>(p, si, s, h, hk, r0, r1, tile, sK + buf * KL::kElems,
                                                  sV + buf * VL::kElems, tid);
  };
  load_tile<Br, D, Tr::kThreads>(sQ, q, p.q.stride_seq, static_cast<int>(r1 - r0), tid);
  const int first = static_cast<int>(next_visited<kBlockSparse, Bc>(m, bm, s, h, r0, r1, tiles_first, tiles_last));
  if (first < tiles_last) load_kv(first, 0);
  cp_async_commit();

  const ScoreTransform score{p.scale, p.softcap, alibi_slope(p, s, h), m.diag()};
  // The factor between the element loop's values and the log2-domain scores: the plain variant's
  // values are the unscaled acc, the options' are the transformed scores themselves.
  const float scale2 = kExtras ? 1.0f : score.scale2;
  const BiasRows bias(p, s, h);
  const DropoutStream drop(p, s, h);
  // This thread's rows: m-tile mt holds rows g and g + 8 of its 16 (recomputed where used: kept
  // as 64-bit values across the key loop they held registers the 64-key tiles need).
  auto row_of = [&](int mt, int r) { return r0 + (slab_row + mt * kMmaRows + g + 8 * r); };
  // The online softmax starts from the sink when there is one: a key of score sinks[h] and value 0
  // that every row sees (split 0 only).
  const bool sink = p.sinks != nullptr && split == 0;
  OnlineSoftmax<kM> sm;
  sm.start(sink, sink ? ld(p.sinks + h) * kLog2e : -INFINITY, t);
  float acc_o[kM][kOTiles][4] = {};

  int parity = 0;  // the buffer of this visited tile (they alternate)
  // (Without kBlockSparse next is tile + 1; stepping by tile + 1 there keeps `next` dead after the
  // prefetch, as before block masks.)
  for (int tile = first, next; tile < tiles_last; tile = kBlockSparse ? next : tile + 1, parity ^= 1) {
    const int buf = parity;
    // prefetched while this one computes
    next = static_cast<int>(next_visited<kBlockSparse, Bc>(m, bm, s, h, r0, r1, tile + 1, tiles_last));
    if (next < tiles_last) {
      load_kv(next, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* tK = sK + buf * KL::kElems;
    const T* tV = sV + buf * VL::kElems;
    const int64_t c0 = static_cast<int64_t>(tile) * Bc;

    // S = Q·Kᵀ (this slab's kM m-tiles x Bc keys)
    float acc_s[kM][kNTiles][4] = {};
    mma_abt_tiles<kM, D, Bc>(acc_s, sQ + slab_row * QL::kStride, QL::kStride, tK, KL::kStride, lane);

    // S ← mask(bias + alibi(softcap(scale·S))): two copies of the element loop, chosen once per tile.
    const bool block_partial =  // the block mask leaves the tile partial (classified once per tile)
        kBlockSparse && block_kind<kBlockSparse>(bm, s, h, r0, r1, c0, c0 + Bc) != TileKind::full;
    const bool partial = tile < full_first || tile >= full_last || block_partial;
    float tile_max[kM][2];
    if (partial)
      score_tile<true, kExtras, kBlockSparse>(acc_s, tile_max, m, bm, s, h, c0, block_partial, score, bias, row_of, t);
    else
      score_tile<false, kExtras, kBlockSparse>(acc_s, tile_max, m, bm, s, h, c0, block_partial, score, bias, row_of, t);

    // Online softmax: rescale the running state to the new row maximum, P = exp2(S − max) (the
    // plain variant: exp2(acc·scale2 − max), one FFMA). A row whose maximum did not change has
    // alpha = exp2(0) = 1 exactly, so the rescale of O (kOTiles·2 multiplies per row) is skipped when
    // no row of the warp changed: bitwise the same result, and after the first tiles most tiles of a
    // long row change no maximum. (An empty row so far, max −inf, has O = 0 and sum 0, unchanged by
    // its alpha of 0.)
    float alpha[kM][2], base[kM][2];  // base: the subtrahend of this tile's exponents
    const bool changed = sm.template rescale<kExtras>(tile_max, scale2, alpha, base);
    if (__any_sync(0xffffffffu, changed)) scale_rows(acc_o, alpha);
    sm.exponentiate(acc_s, scale2, base);

    // Dropout: P·Z enters P·V (1/(1 − p) is applied to O in the epilogue).
    if constexpr (kExtras) {
      if (p.dropout_p > 0) drop_tile(acc_s, drop, row_of, c0, lane);
    }

    // O += P·V (P rounded to T, from registers; this warp's O columns)
    mma_pb_tiles<T, VL::kStride>(acc_o, acc_s, tV + ocol0, lane);
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }
  cp_async_wait<0>();  // no copy may outlive the block (only the Q copy when no tile was visited)

  store_forward_rows<DV, T>(p, si, h, split, kExtras && p.dropout_p > 0 ? p.dropout_scale : 1.0f, sm, acc_o, row_of,
                            ocol0, t);
}

// Returns the forward kernel variant of a call: with the block-mask code when it has a block mask
// (and then with the options' code too), else with the options' code only when it uses one
// (forward_extras) or a scale the plain variant cannot take (plain_forward_scale); its launch shape
// is forward_shape<D, DV>(forward_extras(p)).
template <int D, int DV, class T>
auto forward_variant(const ForwardParams& p) {
  if (uses_block_mask(p)) return forward_kernel<D, DV, T, true, true>;
  return forward_extras(p) ? forward_kernel<D, DV, T, true, false> : forward_kernel<D, DV, T, false, false>;
}

}  // namespace flashattn::gpu::detail
