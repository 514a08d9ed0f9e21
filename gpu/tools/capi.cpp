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

const char* flashattn_gpu_last_error() { return last_error.c_str(); }

}  // extern "C"
