// GPU blocks through host staging (flashattn/ring_gpu.hpp). Compiled where nvcc is found; runs only
// on a machine with a GPU.
#include <cuda_runtime.h>

#include <string>

#include "flashattn/error.hpp"
#include "flashattn/gpu.hpp"
#include "flashattn/ring_gpu.hpp"

namespace flashattn::ring {
namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("ring: ") + what + " failed: " + cudaGetErrorString(e));
}

// Returns the bytes from a view's first element to one past its last (strides are non-negative).
size_t span_bytes(const ConstTensor& t) {
  if (t.batch == 0 || t.seq == 0 || t.heads == 0 || t.dim == 0) return 0;
  const int64_t last = (t.batch - 1) * t.stride_batch + (t.seq - 1) * t.stride_seq + (t.heads - 1) * t.stride_head + t.dim;
  return static_cast<size_t>(last) * dtype_size(t.dtype);
}

}  // namespace

GpuStaging::GpuStaging(cudaStream_t stream, bool deterministic) : stream_(stream), deterministic_(deterministic) {}

GpuStaging::~GpuStaging() {
  for (Buffer& b : slots_) cudaFree(b.device);
}

std::string GpuStaging::unsupported(const AttentionArgs& a) const {
  return gpu::unsupported_reason(a.q.dtype, a.q.dim, a.v.dim, /*backward=*/true);
}

void* GpuStaging::stage(size_t i, const void* host, size_t bytes) {
  if (slots_.size() <= i) slots_.resize(i + 1);
  Buffer& b = slots_[i];
  if (b.bytes < bytes) {
    cuda_ok(cudaFree(b.device), "cudaFree");
    b = Buffer{};
    cuda_ok(cudaMalloc(&b.device, bytes), "cudaMalloc");
    b.bytes = bytes;
  }
  if (bytes) cuda_ok(cudaMemcpyAsync(b.device, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  return b.device;
}

template <class View>
View GpuStaging::staged(size_t i, View t) {
  t.data = stage(i, t.data, span_bytes(t));
  return t;
}

void GpuStaging::fetch(size_t i, void* host, size_t bytes) {
  if (bytes) cuda_ok(cudaMemcpyAsync(host, slots_[i].device, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
}

void GpuStaging::finish() { cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

void GpuStaging::stage_inputs(AttentionArgs& d, const AttentionArgs& a) {
  d.q = staged(0, a.q);
  d.k = staged(1, a.k);
  d.v = staged(2, a.v);
  const size_t slopes = sizeof(float) * (a.alibi_batch_stride ? a.q.batch * a.alibi_batch_stride : a.q.heads);
  if (a.alibi_slopes) d.alibi_slopes = static_cast<const float*>(stage(3, a.alibi_slopes, slopes));
}

// Inputs and outputs are staged whole (an output's span is copied in first, so bytes between its
// rows come back unchanged). The ring passes no seqlens/varlen arrays, sinks or ALiBi per block
// beyond the slopes, which are staged too.
void GpuStaging::forward(const ForwardArgs& a) {
  ForwardArgs d = a;
  stage_inputs(d, a);
  d.out = staged(4, a.out);
  const size_t lse_bytes = sizeof(float) * a.q.batch * a.q.heads * a.q.seq;
  if (a.lse) d.lse = static_cast<float*>(stage(5, a.lse, lse_bytes));
  gpu::forward(d, stream_);
  fetch(4, a.out.data, span_bytes(a.out));
  if (a.lse) fetch(5, a.lse, lse_bytes);
  finish();
}

void GpuStaging::backward(const BackwardArgs& a) {
  BackwardArgs d = a;
  stage_inputs(d, a);
  d.out = staged(4, a.out);
  d.dout = staged(5, a.dout);
  d.lse = static_cast<const float*>(stage(6, a.lse, sizeof(float) * a.q.batch * a.q.heads * a.q.seq));
  d.dq = staged(7, a.dq);
  d.dk = staged(8, a.dk);
  d.dv = staged(9, a.dv);
  gpu::backward(d, stream_, deterministic_);
  fetch(7, a.dq.data, span_bytes(a.dq));
  fetch(8, a.dk.data, span_bytes(a.dk));
  fetch(9, a.dv.data, span_bytes(a.dv));
  finish();
}

}  // namespace flashattn::ring
