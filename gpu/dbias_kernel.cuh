// The dbias kernel (BackwardArgs::dbias, docs/semantics.md "Additive bias"): one thread per dbias
// element (b', i', h', j), blocks of kThreadsPerBlock consecutive keys of one dbias row. A thread
// sums dS_ij = P_ij·(dP_ij·Z_ij/(1 − p) − D_i) over every (sequence, query head, row) that reads its
// element — the sequences, heads or rows where bias has size 1, else just b', h', i' — in that fixed
// order in fp32, and rounds once: deterministic, no atomics, no scratch. P and dP are recomputed
// on CUDA cores (fp32 dot products of the q/k and dO/v rows, the same score transform and bias
// as the attention kernels); elements no visible (row, key) reads get 0. Visibility is
// flashattn::visible_element (window rule and block mask): hidden pairs read no q, k, v or bias.
#pragma once

#include <cuda_runtime.h>

#include "dropout.cuh"
#include "params.cuh"
#include "tile.cuh"
#include "traits.cuh"

namespace flashattn::gpu::detail {

// Returns Σ_x a[x]·b[x] over n elements of two T rows, in fp32 in index order.
template <class T>
__device__ inline float row_dot(const T* a, const T* b, int n) {
  float acc = 0;
  for (int x = 0; x < n; ++x) acc += Elem<T>::to_float(ld(a + x)) * Elem<T>::to_float(ld(b + x));
  return acc;
}

// Grid (key blocks × dbias rows, dbias heads, dbias batch); p.dot must hold D.
template <class T>
__global__ void __launch_bounds__(kThreadsPerBlock) dbias_kernel(const BackwardParams p) {
  const int64_t key_blocks = (p.dbias_dim + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int64_t ib = blockIdx.x / key_blocks, hb = blockIdx.y, sb = blockIdx.z;
  const int64_t j = (blockIdx.x % key_blocks) * kThreadsPerBlock + threadIdx.x;
  if (j >= p.dbias_dim) return;
  // The (sequence, head, row) ranges reading element (sb, ib, hb, j): all of a size-1 dimension.
  const int64_t s_first = p.dbias_batch == 1 ? 0 : sb, s_last = p.dbias_batch == 1 ? p.num_sequences : sb + 1;
  const int64_t h_first = p.dbias_heads == 1 ? 0 : hb, h_last = p.dbias_heads == 1 ? p.heads_q : hb + 1;
  const bool dropout = p.dropout_p > 0;
  const T* q = static_cast<const T*>(p.q.data);
  const T* k = static_cast<const T*>(p.k.data);
  const T* v = static_cast<const T*>(p.v.data);
  const T* dout = static_cast<const T*>(p.dout.data);
  float acc = 0;
  for (int64_t s = s_first; s < s_last; ++s) {
    const SeqInfo si = sequence_info(p, s);
    const Mask& m = si.mask;
    if (j >= m.seqlen_k) continue;
    const int64_t i_first = p.dbias_seq == 1 ? 0 : ib;
    const int64_t i_last = p.dbias_seq == 1 ? m.seqlen_q : (ib < m.seqlen_q ? ib + 1 : ib);
    for (int64_t h = h_first; h < h_last; ++h) {
      const int hk = static_cast<int>(kv_head(h, p.heads_q, p.heads_k));
      const ScoreTransform score{p.scale, p.softcap, alibi_slope(p, s, h), m.diag()};
      const BiasRows bias(p, s, h);
      const DropoutStream drop(p, s, h);
      const T* krow = k + p.k.offset(si.batch, si.k_start + j, hk);
      const T* vrow = v + p.v.offset(si.batch, si.k_start + j, hk);
      for (int64_t i = i_first; i < i_last; ++i) {
        if (!visible_element(m, p.block_mask, s, h, i, j, DeviceRead{})) continue;  // window rule and block mask
        const int64_t li = lse_index(p, si, h, i);
        const float lse = ld(p.lse + li);
        if (lse == -INFINITY) continue;  // the row sees no key
        float th;
        const float x = score(row_dot(q + p.q.offset(si.batch, si.q_start + i, h), krow, p.dim), i, j, bias(i, j), th);
        const float pr = exp2f(x - lse * kLog2e);
        float dp = row_dot(dout + p.dout.offset(si.batch, si.q_start + i, h), vrow, p.dim_v);
        if (dropout) dp = (drop.bits(i, j / 8) >> (j % 8)) & 1u ? dp * p.dropout_scale : 0.0f;
        acc += pr * (dp - ld(p.dot + li));
      }
    }
  }
  store_narrowed(p.dbias.data, p.dbias_dtype, p.dbias.offset(sb, ib, hb) + j, acc);
}

}  // namespace flashattn::gpu::detail
