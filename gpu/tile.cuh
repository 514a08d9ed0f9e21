// Shared-memory tiles and the per-element score transform shared by the forward and backward kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "flashattn/mask.hpp"
#include "mma.cuh"

namespace flashattn::gpu::detail {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * kLog2e)
constexpr float kLn2 = 0.6931471805599453f;    // ln(2)
constexpr int kWarpSize = 32;
constexpr int kMmaRows = 16;      // rows of one m16n8k16 tile (M), also its K depth
constexpr int kMmaCols = 8;       // columns of one m16n8k16 tile (N)
constexpr int kChunkElems = 8;    // 16-bit elements per 16-byte cp.async chunk

// A rows x D tile of 16-bit elements in shared memory, each row padded by one 16-byte chunk: with
// rows 2·D + 16 bytes apart, the 8 row addresses of one ldmatrix matrix fall in 8 distinct
// 16-byte bank groups for every supported D (32, 64, 96, 128, 256), so ldmatrix is conflict-free.
template <int Rows, int D>
struct TileLayout {
  static_assert(D % 16 == 0, "head dim must be a multiple of the mma K depth");
  static constexpr int kStride = D + kChunkElems;  // elements between rows
  static constexpr int kElems = Rows * kStride;
  static constexpr int kBytes = kElems * 2;
  static_assert(kBytes % 16 == 0, "tiles must keep 16-byte alignment");
};

// Row r of a tile at base + r·stride elements: the rows of a contiguous tensor (RowPointer of
// load_rows).
template <class T>
struct StridedRows {
  const T* base;
  int64_t stride;
  __device__ const T* operator()(int r) const { return base + r * stride; }
};

// Every row of a tile (the RowFilter of load_rows for tiles without a block mask).
struct AllRows {
  __device__ bool operator()(int) const { return true; }
};

// Copies rows [0, valid_rows) of a Rows x D tile, row r starting at row(r), into dst
// (TileLayout<Rows, D>), zero-filling rows at or past valid_rows and rows r with !wanted(r) (row()
// is not called for them; their copies name `fallback`, a readable address, and read nothing). The
// kThreads threads of the block each copy every kThreads-th 16-byte chunk in a fully unrolled loop
// (no per-chunk loop bookkeeping; where a row's chunks divide the block, a thread keeps one column
// and steps a fixed number of rows; kUnroll below that count unrolls less, for kernels short of
// registers); the caller commits the group.
template <int Rows, int D, int kThreads, int kUnroll = (Rows * D / kChunkElems + kThreads - 1) / kThreads, class T,
          class RowPointer, class RowFilter = AllRows>
__device__ inline void load_rows(T* dst, const RowPointer& row, const T* fallback, int valid_rows, int tid,
                                 const RowFilter& wanted = {}) {
  constexpr int kChunksPerRow = D / kChunkElems;
  constexpr int kChunks = Rows * kChunksPerRow;
  constexpr int kIters = (kChunks + kThreads - 1) / kThreads;
  constexpr int kStride = TileLayout<Rows, D>::kStride;
  auto copy = [&](int r, int x) {
    const bool valid = r < valid_rows && wanted(r);
    cp_async_16(dst + r * kStride + x, valid ? row(r) + x : fallback, valid);
  };
  if constexpr (kThreads % kChunksPerRow == 0) {
    constexpr int kRowStep = kThreads / kChunksPerRow;
    const int r0 = tid / kChunksPerRow, x = (tid % kChunksPerRow) * kChunkElems;
    if constexpr (std::is_same_v<RowPointer, StridedRows<T>> && std::is_same_v<RowFilter, AllRows>) {
      // Rows one stride apart, all wanted: the thread's first source address once (computed for
      // any r0, dereferenced only for valid rows), then a fixed step per copy instead of a 64-bit
      // product per row (the d = 128 forward's contiguous K/V prefetch: 52 instructions fewer).
      const int64_t step = kRowStep * row.stride;
      const T* src = row.base + r0 * row.stride + x;
      // A whole tile (every tile but a sequence's last) copies without a per-copy test; for loaders
      // of 4+ copies per thread that saves two selects and a compare per copy (and took the d = 128
      // plain forward on sm_90a from 32 B of stack to none); below that it gained nothing.
      if (kIters >= 4 && valid_rows >= Rows) {
#pragma unroll kUnroll
        for (int i = 0; i < kIters; ++i, src += step) {
          const int r = r0 + i * kRowStep;
          if (Rows % kRowStep == 0 || r < Rows) cp_async_16(dst + r * kStride + x, src, true);
        }
        return;
      }
#pragma unroll kUnroll
      for (int i = 0; i < kIters; ++i, src += step) {
        const int r = r0 + i * kRowStep;
        if (Rows % kRowStep == 0 || r < Rows) {
          const bool valid = r < valid_rows;
          cp_async_16(dst + r * kStride + x, valid ? src : fallback, valid);
        }
      }
    } else {
#pragma unroll kUnroll
      for (int i = 0; i < kIters; ++i)
        if (Rows % kRowStep == 0 || r0 + i * kRowStep < Rows) copy(r0 + i * kRowStep, x);
    }
  } else {
#pragma unroll kUnroll
    for (int i = 0; i < kIters; ++i) {
      const int c = tid + i * kThreads;
      if (kChunks % kThreads == 0 || c < kChunks) copy(c / kChunksPerRow, (c % kChunksPerRow) * kChunkElems);
    }
  }
}

// load_rows for rows src_stride elements apart from src.
template <int Rows, int D, int kThreads, class T>
__device__ inline void load_tile(T* dst, const T* src, int64_t src_stride, int valid_rows, int tid) {
  load_rows<Rows, D, kThreads>(dst, StridedRows<T>{src, src_stride}, src, valid_rows, tid);
}

// The score of one element in the log2 domain: S = scale·acc, then the optional soft-capping,
// ALiBi and additive bias of docs/semantics.md, times log2(e) — computed in the log2 domain from
// the start (scale2 = scale·log2(e), softcap2, slope2 likewise), so that without options it is
// acc·scale2 + bias·log2(e) (the plain variants of the forward and dK/dV kernels, which have no
// options, fuse acc·scale2 into their exponent's FFMA instead). `tanh_out` receives tanh(S/softcap) (for the backward's derivative; 0 when
// soft-capping is off). Masking is applied by the caller, who reads the bias only for visible
// elements.
struct ScoreTransform {
  float scale = 1, softcap = 0, slope = 0;
  int64_t diag = 0;  // Mask::diag(): seqlen_k - seqlen_q + diagonal_offset of the sequence
  float scale2 = scale * kLog2e, softcap2 = softcap * kLog2e, slope2 = slope * kLog2e;

  __device__ float operator()(float acc, int64_t i, int64_t j, float bias, float& tanh_out) const {
    float x = acc * scale2;
    tanh_out = 0;
    if (softcap > 0) {
      tanh_out = tanhf(x / softcap2);
      x = softcap2 * tanh_out;
    }
    if (slope != 0) {
      const int64_t dist = i + diag - j;
      x -= slope2 * static_cast<float>(dist < 0 ? -dist : dist);
    }
    return fmaf(bias, kLog2e, x);
  }
};

// acc[m] += A_m·Bᵀ for one warp and M stacked 16-row tiles A_m of a shared-memory tile starting at
// `a` (rows 16m…16m+15, row stride a_stride elements), B is N rows x K starting at `b` (row stride
// b_stride); acc[m] holds A_m·Bᵀ (16 x N) as N/8 m16n8 C fragments. Both operands come by ldmatrix
// (non-transposed); each B fragment is read once and feeds all M tiles (M = 2 halves the B bytes
// per HMMA).
template <int M, int K, int N, class T>
__device__ inline void mma_abt_tiles(float (&acc)[M][N / kMmaCols][4], const T* a, int a_stride, const T* b,
                                     int b_stride, int lane) {
  static_assert(K % kMmaRows == 0 && N % (2 * kMmaCols) == 0, "whole m16n8k16 steps and ldmatrix pairs");
#pragma unroll
  for (int kk = 0; kk < K; kk += kMmaRows) {
    uint32_t af[M][4];
#pragma unroll
    for (int mt = 0; mt < M; ++mt)
      ldmatrix_x4(af[mt], a + (mt * kMmaRows + lane % 16) * a_stride + kk + 8 * (lane / 16));
#pragma unroll
    for (int nb = 0; nb < N / kMmaCols; nb += 2) {
      uint32_t bf[4];
      ldmatrix_x4(bf, b + (nb * kMmaCols + lane % 8 + 8 * (lane / 16)) * b_stride + kk + 8 * ((lane / 8) % 2));
#pragma unroll
      for (int mt = 0; mt < M; ++mt) {
        mma<T>(acc[mt][nb], af[mt], bf[0], bf[1]);
        mma<T>(acc[mt][nb + 1], af[mt], bf[2], bf[3]);
      }
    }
  }
}

// acc[m] += P_m·B for one warp and M stacked 16-row tiles: P_m (16 x kN·8) from registers, the C
// fragments of an earlier product rounded to T as A fragments (P in the forward's P·V, dS in the dq
// kernel's dS·K); B its rows from b (row stride kStride; the warp's first output column), read
// transposed by ldmatrix, each fragment once for the M tiles. acc[m] holds kO 8-column C fragments.
template <class T, int kStride, int M, int kN, int kO>
__device__ __forceinline__ void mma_pb_tiles(float (&acc)[M][kO][4], const float (&p)[M][kN][4], const T* b, int lane) {
#pragma unroll
  for (int ks = 0; ks < kN / 2; ++ks) {
    uint32_t a[M][4];
#pragma unroll
    for (int mt = 0; mt < M; ++mt) pack_a<T>(a[mt], p[mt][2 * ks], p[mt][2 * ks + 1]);
#pragma unroll
    for (int nd = 0; nd < kO; nd += 2) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, b + (ks * kMmaRows + lane % 8 + 8 * ((lane / 8) % 2)) * kStride + nd * kMmaCols +
                                8 * (lane / 16));
#pragma unroll
      for (int mt = 0; mt < M; ++mt) {
        mma<T>(acc[mt][nd], a[mt], bf[0], bf[1]);
        mma<T>(acc[mt][nd + 1], a[mt], bf[2], bf[3]);
      }
    }
  }
}

// mma_abt_tiles for one 16-row tile: acc += A·Bᵀ, A 16 rows x K, acc as N/8 C fragments.
template <int K, int N, class T>
__device__ inline void mma_abt(float (&acc)[N / kMmaCols][4], const T* a, int a_stride, const T* b, int b_stride,
                               int lane) {
  mma_abt_tiles<1, K, N>(reinterpret_cast<float(&)[1][N / kMmaCols][4]>(acc), a, a_stride, b, b_stride, lane);
}

// Returns x (an index relative to a tile's first row or key) clamped to [0, n]: the part of an
// interval of rows or keys inside a tile of n, as int.
__device__ inline int tile_offset(int64_t x, int n) { return static_cast<int>(x < 0 ? 0 : x > n ? n : x); }

// Returns the maximum of x over the 4 lanes of a quad (the lanes holding one accumulator row).
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
// Returns the sum of x over the 4 lanes of a quad.
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Key tiles [first, last).
struct TileRange {
  int64_t first = 0, last = 0;
};

// Returns split `split` of `num_splits` near-equal consecutive slices of tiles.
__device__ inline TileRange split_tiles(const TileRange& tiles, int64_t split, int num_splits) {
  const int64_t n = tiles.last - tiles.first;
  return {tiles.first + n * split / num_splits, tiles.first + n * (split + 1) / num_splits};
}

// Returns the key tiles [first, last) of width Bc that rows [r0, r1) of mask m must visit.
template <int Bc>
__device__ inline TileRange key_tiles(const Mask& m, int64_t r0, int64_t r1) {
  const int64_t kb = m.rows_key_begin(r0), ke = m.rows_key_end(r1);
  if (kb >= ke) return {0, 0};
  return {kb / Bc, (ke + Bc - 1) / Bc};
}

}  // namespace flashattn::gpu::detail
