// A C ABI over flashattn::gpu for contiguous bshd tensors, loaded with ctypes by
// benchmarks/sdpa_compare.py (PyTorch owns the device memory; pointers are its data_ptr()).
// Every function returns 0 on success, or 1 with the error text available from
// flashattn_gpu_last_error().
#include <exception>
#include <string>

#include "flashattn/gpu.hpp"

namespace {

thread_local std::string last_error;

flashattn::DType dtype_from_code(int code) { return code == 0 ? flashattn::DType::f16 : flashattn::DType::bf16; }

// Fills the forward fields of a call on contiguous bshd tensors.
void fill(flashattn::ForwardArgs& a, void* q, void* k, void* v, void* out, float* lse, int batch, int seqlen_q,
          int seqlen_k, int heads_q, int heads_k, int dim, int dtype_code, int causal) {
  const flashattn::DType t = dtype_from_code(dtype_code);
  a.q = flashattn::bshd(q, t, batch, seqlen_q, heads_q, dim);
  a.k = flashattn::bshd(k, t, batch, seqlen_k, heads_k, dim);
  a.v = flashattn::bshd(v, t, batch, seqlen_k, heads_k, dim);
  a.out = flashattn::bshd(out, t, batch, seqlen_q, heads_q, dim);
  a.lse = lse;
  a.causal = causal != 0;
}

template <class F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return 1;
  }
}

}  // namespace

extern "C" {

// dtype_code: 0 = f16, 1 = bf16. lse: fp32 [batch, heads_q, seqlen_q]. stream: a cudaStream_t.
int flashattn_gpu_forward(void* q, void* k, void* v, void* out, float* lse, int batch, int seqlen_q, int seqlen_k,
                          int heads_q, int heads_k, int dim, int dtype_code, int causal, void* stream) {
  return guarded([&] {
    flashattn::ForwardArgs a;
    fill(a, q, k, v, out, lse, batch, seqlen_q, seqlen_k, heads_q, heads_k, dim, dtype_code, causal);
    flashattn::gpu::forward(a, static_cast<cudaStream_t>(stream));
  });
}

int flashattn_gpu_backward(void* q, void* k, void* v, void* out, float* lse, void* dout, void* dq, void* dk, void* dv,
                           int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_k, int dim, int dtype_code,
                           int causal, int deterministic, void* stream) {
  return guarded([&] {
    flashattn::ForwardArgs f;
    fill(f, q, k, v, out, lse, batch, seqlen_q, seqlen_k, heads_q, heads_k, dim, dtype_code, causal);
    flashattn::BackwardArgs a = flashattn::backward_args(f);
    const flashattn::DType t = dtype_from_code(dtype_code);
    a.dout = flashattn::bshd(dout, t, batch, seqlen_q, heads_q, dim);
    a.dq = flashattn::bshd(dq, t, batch, seqlen_q, heads_q, dim);
    a.dk = flashattn::bshd(dk, t, batch, seqlen_k, heads_k, dim);
    a.dv = flashattn::bshd(dv, t, batch, seqlen_k, heads_k, dim);
    flashattn::gpu::backward(a, static_cast<cudaStream_t>(stream), deterministic != 0);
  });
}

// A decode step over a KV cache (benchmarks/gpu_decode.py): q, out [batch, seqlen_q, heads_q, dim];
// seqlens_k (device, int32 [batch]) the keys of each sequence. block_table null: k, v are
// contiguous caches [batch, capacity, heads_k, dim]; else page pools [pages, capacity (the page
// size), heads_k, dim] and block_table (device, int32 [batch, table_pages]) maps each sequence's
// pages. num_splits as ForwardArgs (0: chosen from the shape). int8_kv: k, v hold int8 codes with
// per-token scales k_scale, v_scale (device fp32 [batch or pages, capacity, heads_k]).
int flashattn_gpu_decode(void* q, void* k, void* v, void* out, int batch, int seqlen_q, int pages_or_batch,
                         int capacity, int heads_q, int heads_k, int dim, int dtype_code, const int* seqlens_k,
                         const int* block_table, int table_pages, int num_splits, void* stream, int int8_kv,
                         const float* k_scale, const float* v_scale) {
  return guarded([&] {
    const flashattn::DType t = dtype_from_code(dtype_code);
    const flashattn::DType kv = int8_kv ? flashattn::DType::i8 : t;
    flashattn::ForwardArgs a;
    a.q = flashattn::bshd(q, t, batch, seqlen_q, heads_q, dim);
    a.k = flashattn::bshd(k, kv, pages_or_batch, capacity, heads_k, dim);
    a.v = flashattn::bshd(v, kv, pages_or_batch, capacity, heads_k, dim);
    if (int8_kv) a.kv_scales = {k_scale, v_scale, flashattn::ScaleGranularity::token};
    a.out = flashattn::bshd(out, t, batch, seqlen_q, heads_q, dim);
    a.causal = true;  // bottom-right aligned: the new rows see the cache and each other causally
    a.seqlens_k = seqlens_k;
    a.block_table = block_table;
    a.block_table_pages = block_table ? table_pages : 0;
    a.num_splits = num_splits;
    flashattn::gpu::forward(a, static_cast<cudaStream_t>(stream));
  });
}

const char* flashattn_gpu_last_error() { return last_error.c_str(); }

}  // extern "C"
