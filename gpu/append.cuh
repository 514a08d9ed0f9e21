// The KV-cache append of a forward call (docs/semantics.md, "Appending to a KV cache"), before the
// attention kernels: new keys rotated and written with the new values at each sequence's cache
// length (through the block table when paged), and the queries rotated into scratch. Rotation
// follows the documented rounding bit for bit: each result exact in fp64 (the products of two fp32
// values are exact, so contraction cannot change it), rounded to fp32, then to T (RNE).
#pragma once

#include <cuda_runtime.h>

#include "mma.cuh"
#include "params.cuh"
#include "tile.cuh"
#include "traits.cuh"

namespace flashattn::gpu::detail {

struct AppendParams {
  View k_cache, v_cache;   // contiguous caches [B, capacity, Hk, ·] or page pools
  ConstView k_new, v_new;  // [B, new_rows, Hk, d / dv]
  ConstView q;             // [B, Nq, Hq, d]
  View q_rot;              // scratch [B, Nq, Hq, d] (rotated queries) or null
  const int32_t* seqlens_k = nullptr;  // cache lengths before the call, [B]
  int64_t new_rows = 0;
  const int32_t* block_table = nullptr;  // null: contiguous caches
  int64_t block_table_stride = 0, page_size = 0;
  const float* rotary_cos = nullptr;  // [positions, rotary_dim / 2] or null
  const float* rotary_sin = nullptr;
  int rotary_dim = 0;
  bool interleaved = false;
  int dim = 0, dim_v = 0;
};

// Returns element x of the row at src (dim elements, T) rotated at table row (cs, sn): elements of
// the first rotary_dim rotate in pairs (x[2r], x[2r+1]) if interleaved, else (x[r], x[r + half]).
template <class T>
__device__ inline T rotated_element(const AppendParams& p, const T* src, int x, const float* cs, const float* sn) {
  if (cs == nullptr || x >= p.rotary_dim) return ld(src + x);
  const int half = p.rotary_dim / 2;
  const int r = p.interleaved ? x / 2 : x % half;
  const bool first = p.interleaved ? x % 2 == 0 : x < half;
  const int i0 = p.interleaved ? 2 * r : r, i1 = p.interleaved ? 2 * r + 1 : r + half;
  const double x0 = Elem<T>::to_float(ld(src + i0)), x1 = Elem<T>::to_float(ld(src + i1));
  const double c = ld(cs + r), s = ld(sn + r);
  const double v = first ? x0 * c - x1 * s : x0 * s + x1 * c;
  return Elem<T>::from_float(static_cast<float>(v));
}

// One block per (new row t, key/value head, sequence b): cache row seqlens_k[b] + t receives
// k_new[b, t] rotated at that position and v_new[b, t] as given.
template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) append_kv_kernel(const AppendParams p) {
  const int64_t t = blockIdx.x;
  const int hk = blockIdx.y, b = blockIdx.z;
  const int64_t pos = int64_t{ld(p.seqlens_k + b)} + t;
  int64_t batch = b, row = pos;
  if (p.block_table) {
    batch = ld(p.block_table + b * p.block_table_stride + pos / p.page_size);
    row = pos % p.page_size;
  }
  const float* cs = p.rotary_cos ? p.rotary_cos + pos * (p.rotary_dim / 2) : nullptr;
  const float* sn = p.rotary_sin ? p.rotary_sin + pos * (p.rotary_dim / 2) : nullptr;
  const T* kn = static_cast<const T*>(p.k_new.data) + p.k_new.offset(b, t, hk);
  const T* vn = static_cast<const T*>(p.v_new.data) + p.v_new.offset(b, t, hk);
  T* kc = static_cast<T*>(p.k_cache.data) + p.k_cache.offset(batch, row, hk);
  T* vc = static_cast<T*>(p.v_cache.data) + p.v_cache.offset(batch, row, hk);
  for (int x = threadIdx.x; x < p.dim; x += kThreadsPerBlock) st(kc + x, rotated_element(p, kn, x, cs, sn));
  for (int x = threadIdx.x; x < p.dim_v; x += kThreadsPerBlock) st(vc + x, ld(vn + x));
}

// One block per (query row i, query head, sequence b): q_rot[b, i] = q[b, i] rotated at position
// seqlens_k[b] + i.
template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) rotate_q_kernel(const AppendParams p) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t pos = int64_t{ld(p.seqlens_k + b)} + i;
  const float* cs = p.rotary_cos + pos * (p.rotary_dim / 2);
  const float* sn = p.rotary_sin + pos * (p.rotary_dim / 2);
  const T* src = static_cast<const T*>(p.q.data) + p.q.offset(b, i, h);
  T* dst = static_cast<T*>(p.q_rot.data) + p.q_rot.offset(b, i, h);
  for (int x = threadIdx.x; x < p.dim; x += kThreadsPerBlock) st(dst + x, rotated_element(p, src, x, cs, sn));
}

}  // namespace flashattn::gpu::detail
