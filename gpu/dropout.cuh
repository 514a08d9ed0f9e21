// Dropout keep decisions for the fragments of the attention kernels (docs/semantics.md, "Dropout").
// One Philox call (flashattn::dropout_keep_bits) decides 8 consecutive keys of a row, but a thread
// holds only 2 of those 8 keys of a row (rows × keys fragments) or 1 key of 8 rows (the backward's
// transposed keys × queries fragments). So the lanes of a warp that need the same call share it:
// each lane computes an equal share of the warp's distinct calls and gets the others' results by
// __shfl_sync — no call is made twice within a warp.
#pragma once

#include <cstdint>

#include "flashattn/philox.hpp"
#include "params.cuh"
#include "tile.cuh"

namespace flashattn::gpu::detail {

// The dropout stream of one (sequence, query head) of a call.
struct DropoutStream {
  uint64_t seed = 0, stream = 0;
  uint32_t threshold = 0;

  __device__ DropoutStream(const CommonParams& p, int64_t s, int64_t h)
      : seed(p.dropout_seed), stream(dropout_stream(p.dropout_offset, s, p.heads_q, h)),
        threshold(p.dropout_threshold) {}
  // Returns the keep bits of keys 8·j8 … 8·j8 + 7 of row i (bit w: key 8·j8 + w).
  __device__ uint32_t bits(int64_t i, int64_t j8) const { return dropout_keep_bits(seed, stream, i, j8, threshold); }
};

// Keep decisions of a warp's 16 x 8·N rows × keys C fragments (acc[nb][e]: row row[e / 2], key
// key0 + 8·nb + 2t + e % 2, key0 a multiple of 8): bit 4·nb + e of the result. The quad of a row
// pair needs 2·N calls (row r, key block nb: call c = r·N + nb); lane t of the quad makes calls
// c ≡ t (mod 4). All 32 lanes must call it.
template <int N>
__device__ inline uint32_t keep_mask_rows(const DropoutStream& d, const int64_t (&row)[2], int64_t key0, int lane) {
  static_assert(N % 2 == 0 && 4 * N <= 32, "2·N calls shared by 4 lanes; 4·N result bits");
  const int t = lane % 4;
  uint32_t mine[N / 2];
#pragma unroll
  for (int u = 0; u < N / 2; ++u) {
    const int c = 4 * u + t;  // depends on the lane: select the row, do not index (local memory)
    mine[u] = d.bits(c < N ? row[0] : row[1], key0 / 8 + c % N);
  }
  uint32_t mask = 0;
#pragma unroll
  for (int c = 0; c < 2 * N; ++c) {
    const uint32_t bits = __shfl_sync(0xffffffffu, mine[c / 4], (lane & ~3) | (c % 4));
    const int r = c / N, nb = c % N;
    mask |= ((bits >> (2 * t)) & 3u) << (4 * nb + 2 * r);
  }
  return mask;
}

// Keep decisions of a warp's 16 x 8·N keys × queries C fragments (acc[nb][e]: key key0 + g + 8·(e / 2),
// query row0 + 8·nb + 2t + e % 2, key0 a multiple of 16): bit 4·nb + e of the result. The 8 lanes
// of a column t need 4·N calls (nb, query 2t + c, key block r: w = 4·nb + 2c + r); lane g of the
// column makes calls w ≡ g (mod 8). All 32 lanes must call it.
template <int N>
__device__ inline uint32_t keep_mask_keys(const DropoutStream& d, int64_t key0, int64_t row0, int lane) {
  static_assert(N % 2 == 0 && 4 * N <= 32, "4·N calls shared by 8 lanes; 4·N result bits");
  const int g = lane / 4, t = lane % 4;
  uint32_t mine[N / 2];
#pragma unroll
  for (int u = 0; u < N / 2; ++u) {
    const int w = 8 * u + g;
    mine[u] = d.bits(row0 + 8 * (w / 4) + 2 * t + (w / 2) % 2, key0 / 8 + w % 2);
  }
  uint32_t mask = 0;
#pragma unroll
  for (int w = 0; w < 4 * N; ++w) {
    const uint32_t bits = __shfl_sync(0xffffffffu, mine[w / 8], (w % 8) * 4 + t);
    const int nb = w / 4, c = (w / 2) % 2, r = w % 2;
    mask |= ((bits >> g) & 1u) << (4 * nb + 2 * r + c);
  }
  return mask;
}

}  // namespace flashattn::gpu::detail
