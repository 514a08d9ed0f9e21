// The sm_90a forward kernel (sm90.cuh's primitives): one CTA of three warpgroups per (query block of
// 128 rows × split, query head, sequence). Warpgroup 2 is the producer: one thread loads the Q tile and then
// each K/V tile by TMA into a two-stage ring, each stage on its `full` mbarrier once the consumers
// released it on `empty`. Warpgroups 0 and 1 are the consumers, 64 query rows each: S = Q·Kᵀ by
// wgmma from shared memory (both operands K-major), the mask, score options and online softmax of
// the mma.sync kernel (forward_kernel.cuh: the accumulator layout of a warp's 16 rows is the same,
// so its score_tile / OnlineSoftmax / store_forward_rows run unchanged), then O += P·V by wgmma with P
// from registers and V MN-major. The calls it takes: sm90_forward_specs (host_params.hpp).
#pragma once

#include <cuda.h>

#include "forward_kernel.cuh"
#include "params.cuh"
#include "sm90.cuh"
#include "softmax.cuh"

namespace flashattn::gpu::detail {

template <int D, class T, bool kExtras>
__global__ void __launch_bounds__(384, 1) forward_sm90_kernel(const __grid_constant__ Sm90ForwardParams P) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(FLASHATTN_GPU_EMULATE)
  namespace x = sm90;
  using Tr = Sm90ForwardTraits<D>;
  constexpr int Br = Tr::kBr, Bc = Tr::kBc, kNTiles = Bc / kMmaCols, kOTiles = D / kMmaCols;
  const ForwardParams& p = P.p;
  const int64_t s = blockIdx.z, h = blockIdx.y;
  const int64_t split = blockIdx.x % p.num_splits;
  const SeqInfo si = sequence_info(p, s);
  const Mask& m = si.mask;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / p.num_splits) * Br;
  if (r0 >= m.seqlen_q) return;
  const int64_t r1 = r0 + Br < m.seqlen_q ? r0 + Br : m.seqlen_q;
  const int hk = static_cast<int>(kv_head(h, p.heads_q, p.heads_k));
  // The split's slice of the key tiles (split-KV: the partials go to the combine kernel).
  const TileRange tiles = split_tiles(key_tiles<Bc>(m, r0, r1), split, p.num_splits);
  const TileRange full = full_tiles<Br, Bc>(m, r0, r1);
  const int first = static_cast<int>(tiles.first), last = static_cast<int>(tiles.last);

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024 - x::smem_addr(smem_raw) % 1024) % 1024);
  unsigned char* sQ = base;
  auto sK = [&](int st) { return base + Tr::kQBytes + st * 2 * Tr::kKvBytes; };
  auto sV = [&](int st) { return sK(st) + Tr::kKvBytes; };
  auto* q_full = reinterpret_cast<uint64_t*>(base + Tr::kBarOffset);
  uint64_t* full_bar = q_full + 1;
  uint64_t* empty_bar = full_bar + Tr::kStages;

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    x::mbarrier_init(q_full, 1);
    for (int st = 0; st < Tr::kStages; ++st) {
      x::mbarrier_init(&full_bar[st], 1);
      x::mbarrier_init(&empty_bar[st], 256);
    }
    x::mbarrier_init_fence();
  }
  __syncthreads();

  if (wg == 2) {  // the producer
    x::setmaxnreg_dec<24>();
    if (tid != 256) return;
    // The whole tensor's maps (row coordinates from the sequence's start), or the sequence's own.
    const bool own = P.seq_maps != nullptr;
    const CUtensorMap* q_map = own ? P.seq_maps + 3 * s : &P.q_map;
    const CUtensorMap* k_map = own ? P.seq_maps + 3 * s + 1 : &P.k_map;
    const CUtensorMap* v_map = own ? P.seq_maps + 3 * s + 2 : &P.v_map;
    const int32_t batch = own ? 0 : static_cast<int32_t>(si.batch), qh = static_cast<int32_t>(h);
    const int64_t q_first = own ? 0 : si.q_start, k_first = own ? 0 : si.k_start;
    x::mbarrier_arrive_expect_tx(q_full, Tr::kQBytes);
    for (int b = 0; b < Tr::kBoxes; ++b)
      x::tma_load_4d(sQ + b * Tr::kBoxBytesQ, q_map, q_full, b * Tr::kBoxCols, static_cast<int32_t>(q_first + r0), qh,
                     batch);
    for (int tile = first, i = 0; tile < last; ++tile, ++i) {
      const int st = i % Tr::kStages, round = i / Tr::kStages;
      x::mbarrier_wait(&empty_bar[st], (round & 1) ^ 1);
      x::mbarrier_arrive_expect_tx(&full_bar[st], 2 * Tr::kKvBytes);
      const int32_t row = static_cast<int32_t>(k_first + static_cast<int64_t>(tile) * Bc);
      for (int b = 0; b < Tr::kBoxes; ++b) {
        x::tma_load_4d(sK(st) + b * Tr::kBoxBytesKv, k_map, &full_bar[st], b * Tr::kBoxCols, row, hk, batch);
        x::tma_load_4d(sV(st) + b * Tr::kBoxBytesKv, v_map, &full_bar[st], b * Tr::kBoxCols, row, hk, batch);
      }
    }
    return;
  }

  x::setmaxnreg_inc<240>();
  const int lane = tid % kWarpSize, warp = tid % 128 / kWarpSize, g = lane / 4, t = lane % 4;
  const int row0 = wg * 64 + warp * kMmaRows;  // this warp's first row in the block
  auto row_of = [&](int, int r) { return r0 + row0 + g + 8 * r; };
  const ScoreTransform score{p.scale, p.softcap, alibi_slope(p, s, h), m.diag()};
  const float scale2 = kExtras ? 1.0f : score.scale2;
  const BiasRows bias(p, s, h);
  const bool sink = p.sinks != nullptr && split == 0;
  OnlineSoftmax<1> sm;
  sm.start(sink, sink ? ld(p.sinks + h) * kLog2e : -INFINITY, t);
  float acc_o[1][kOTiles][4] = {};
  float(&o)[D / 2] = reinterpret_cast<float(&)[D / 2]>(acc_o);
  // This warpgroup's 64 rows of each Q box: 8-row groups 1024 bytes apart from row wg * 64.
  const uint32_t q_at = x::smem_addr(sQ) + static_cast<uint32_t>(wg) * 64 * 128;
  x::mbarrier_wait(q_full, 0);

  // S = Q·Kᵀ of the key tile in ring slot i into acc, once it landed: D/16 wgmma of K = 16, two
  // per 32 bytes of a box row; committed as one group. The fence comes after the barrier wait (a
  // fence before it makes ptxas add another: registers are written in between, C7519) and also
  // orders the P fragments and O for a P·V issued right after.
  auto issue_s = [&](float (&acc)[Bc / 2], int i) {
    const int st = i % Tr::kStages;
    x::mbarrier_wait(&full_bar[st], (i / Tr::kStages) & 1);
    const uint32_t k_at = x::smem_addr(sK(st));
    x::wgmma_fence();
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      const uint32_t at = 32u * (j % 4);
      x::wgmma_ss<T, Bc, false, false>(acc, x::k_major_desc(q_at + (j / 4) * Tr::kBoxBytesQ + at, x::Swizzle::b128),
                                      x::k_major_desc(k_at + (j / 4) * Tr::kBoxBytesKv + at, x::Swizzle::b128), j > 0);
    }
    x::wgmma_commit();
  };
  // The mma.sync kernel's element loop and online softmax on this warp's 16 rows of a retired S:
  // P = exp2(S − max) in place, the row state moved to the new maximum; returns whether a row of
  // the warp moved (O must then be scaled by alpha, once the P·V reading it has retired).
  float alpha[1][2];
  auto softmax = [&](float (&acc)[1][kNTiles][4], int tile) {
    const int64_t c0 = static_cast<int64_t>(tile) * Bc;
    float tile_max[1][2], base2[1][2];
    if (tile < full.first || tile >= full.last)
      score_tile<true, kExtras, false>(acc, tile_max, m, p.block_mask, s, h, c0, false, score, bias, row_of, t);
    else
      score_tile<false, kExtras, false>(acc, tile_max, m, p.block_mask, s, h, c0, false, score, bias, row_of, t);
    const bool changed = sm.template rescale<kExtras>(tile_max, scale2, alpha, base2);
    sm.exponentiate(acc, scale2, base2);
    return __any_sync(0xffffffffu, changed);
  };
  // P rounded to the A fragments of the P·V steps: all of them before the first wgmma reads any
  // (registers written between in-flight wgmmas make ptxas serialise them).
  uint32_t pa[Bc / 16][4];
  float acc_s[1][kNTiles][4];
  float(&sc)[Bc / 2] = reinterpret_cast<float(&)[Bc / 2]>(acc_s);
  auto pack = [&] {
#pragma unroll
    for (int j = 0; j < Bc / 16; ++j) pack_a<T>(pa[j], acc_s[0][2 * j], acc_s[0][2 * j + 1]);
  };

  // The first tile's S and P (O is still 0: nothing to scale).
  if (first < last) {
    issue_s(sc, 0);
    x::wgmma_wait<0>();  // S complete before the element loop reads it
    x::wgmma_fence_operand(sc);
    softmax(acc_s, first);
    pack();
  }
  // O += P·V of the tile in ring slot i (V rows 16 keys x D columns, MN-major: runs of 64 columns a
  // box apart), committed as one group. The caller fenced (issue_s does).
  auto issue_pv = [&](int i) {
    const uint32_t v_at = x::smem_addr(sV(i % Tr::kStages));
#pragma unroll
    for (int j = 0; j < Bc / 16; ++j)
      x::wgmma_rs<T, D, true>(o, pa[j], x::mn_major_desc(v_at + 16u * 128u * j, x::Swizzle::b128, Tr::kBoxBytesKv),
                              true);
    x::wgmma_commit();
  };
  // Each iteration but the last issues S of the next tile, then O += P·V of this one, and computes
  // the next tile's softmax while the P·V runs: only the scaling of O waits for it.
  int i = 0;
  for (int tile = first; tile + 1 < last; ++tile, ++i) {
    issue_s(sc, i + 1);
    issue_pv(i);
    x::wgmma_wait<1>();  // the next S retired; this P·V may still run
    x::wgmma_fence_operand(sc);
    const bool changed = softmax(acc_s, tile + 1);
    x::wgmma_wait<0>();
    x::wgmma_fence_operand(o);
    x::mbarrier_arrive(&empty_bar[i % Tr::kStages]);
    if (changed) scale_rows(acc_o, alpha);
    pack();
  }
  if (first < last) {  // the last tile's P·V
    x::wgmma_fence();
    issue_pv(i);
    x::wgmma_wait<0>();
    x::wgmma_fence_operand(o);
    x::mbarrier_arrive(&empty_bar[i % Tr::kStages]);
  }

  store_forward_rows<D, T>(p, si, h, split, 1.0f, sm, acc_o, row_of, 0, t);
#endif
}

// Returns the sm_90a forward variant of a supported call (sm90_forward_specs).
template <int D, class T>
auto forward_sm90_variant(const ForwardParams& p) {
  return forward_extras(p) ? forward_sm90_kernel<D, T, true> : forward_sm90_kernel<D, T, false>;
}

}  // namespace flashattn::gpu::detail
