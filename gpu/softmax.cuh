// The forward's online softmax over one warp's rows, in registers and in the log2 domain: for each
// of the thread's rows (m-tile mt, row g or g + 8: index r) the running maximum of its scores and
// this thread's share of Σ exp2(score − maximum) (a row's four shares sit in the lanes of a quad).
// Each key tile moves the maximum (rescale), then turns the tile's scores into P (exponentiate).
#pragma once

#include <cuda_runtime.h>

#include "tile.cuh"

namespace flashattn::gpu::detail {

template <int kM>
struct OnlineSoftmax {
  float row_max[kM][2];
  float row_sum[kM][2];

  // Starts every row from the sink when there is one: a key of score sink2 (log2 domain) and value 0
  // that every row sees starts the maximum and the sum (counted once per quad, by lane t = 0).
  __device__ __forceinline__ void start(bool sink, float sink2, int t) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_max[mt][r] = sink2;
        row_sum[mt][r] = sink && t == 0 ? 1.0f : 0.0f;
      }
  }

  // Moves each row's maximum to include the tile's (tile_max: this thread's maxima of the tile's
  // values; kLog2Values: they are log2-domain scores, else raw products the exponent scales by
  // scale2) and scales the sums by alpha = exp2(old − new maximum). base receives the subtrahend of
  // this tile's exponents (0 for a row that has seen only −inf: P stays 0, no NaN). Returns whether
  // any of this thread's rows changed its maximum (alpha = exp2(0) = 1 exactly for the others).
  template <bool kLog2Values>
  __device__ __forceinline__ bool rescale(const float (&tile_max)[kM][2], float scale2, float (&alpha)[kM][2],
                                 float (&base)[kM][2]) {
    bool changed = false;
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float tmax = quad_max(tile_max[mt][r]);
        const float new_max = fmaxf(row_max[mt][r], kLog2Values ? tmax : tmax * scale2);  // −inf stays −inf
        base[mt][r] = new_max == -INFINITY ? 0.0f : new_max;  // empty so far: keep P = 0, no NaN
        alpha[mt][r] = exp2_ftz(row_max[mt][r] - base[mt][r]);
        changed |= new_max != row_max[mt][r];
        row_max[mt][r] = new_max;
        row_sum[mt][r] *= alpha[mt][r];
      }
    return changed;
  }

  // P = exp2(S·scale2 − base) over the tile's score fragments (kN 8-key blocks), added to the sums.
  template <int kN>
  __device__ __forceinline__ void exponentiate(float (&acc_s)[kM][kN][4], float scale2, const float (&base)[kM][2]) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int nb = 0; nb < kN; ++nb) {
          acc_s[mt][nb][2 * r] = exp2_ftz(fmaf(acc_s[mt][nb][2 * r], scale2, -base[mt][r]));
          acc_s[mt][nb][2 * r + 1] = exp2_ftz(fmaf(acc_s[mt][nb][2 * r + 1], scale2, -base[mt][r]));
          row_sum[mt][r] += acc_s[mt][nb][2 * r] + acc_s[mt][nb][2 * r + 1];
        }
      }
  }
};

// acc_o ·= alpha, row by row (alpha per thread row, as OnlineSoftmax::rescale gives it).
template <int kM, int kN>
__device__ __forceinline__ void scale_rows(float (&acc_o)[kM][kN][4], const float (&alpha)[kM][2]) {
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int nd = 0; nd < kN; ++nd)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][nd][e] *= alpha[mt][e / 2];
}

}  // namespace flashattn::gpu::detail
