// flashattn::gpu runner and GPU ceilings (CUDA runtime and cuBLAS from host code). See gpu_bench.hpp.
#include "gpu_bench.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include "flashattn/gpu.hpp"

namespace bench {

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

// A device allocation freed on destruction.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) { cuda_check(cudaMalloc(&ptr, n == 0 ? 1 : n), "cudaMalloc"); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
};

// Bytes spanned by a dense tensor view (the benchmark's tensors are contiguous bshd).
size_t span_bytes(const flashattn::ConstTensor& t) {
  return static_cast<size_t>(t.batch * t.stride_batch) * flashattn::dtype_size(t.dtype);
}

class GpuRunner : public Runner {
 public:
  std::string name() const override { return "gpu"; }
  std::string refuse(const Case& c, const RunSettings&) const override {
    return flashattn::gpu::unsupported_reason(c.problem.dtype, c.problem.head_dim);
  }
  void prepare(const Calls& host) override {
    const flashattn::ForwardArgs& f = host.forward;
    const flashattn::BackwardArgs& a = host.backward;
    flashattn::ForwardArgs& df = dev_.forward;
    df = f;
    df.q = upload(f.q, "q");
    df.k = upload(f.k, "k");
    df.v = upload(f.v, "v");
    df.out = upload(f.out, "out");
    const size_t lse_bytes = static_cast<size_t>(f.q.batch * f.q.heads * f.q.seq) * sizeof(float);
    bufs_["lse"] = DeviceBuffer(lse_bytes);
    df.lse = static_cast<float*>(bufs_["lse"].ptr);
    dev_.backward = flashattn::backward_args(df);
    if (a.dout.data) {
      dev_.backward.dout = upload(a.dout, "dout");
      dev_.backward.dq = upload(a.dq, "dq");
      dev_.backward.dk = upload(a.dk, "dk");
      dev_.backward.dv = upload(a.dv, "dv");
    }
  }
  void fetch(const Calls& host, Pass p) override {
    auto down = [](const flashattn::Tensor& host_view, const flashattn::Tensor& dev) {
      cuda_check(cudaMemcpy(host_view.data, dev.data, span_bytes(host_view), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    };
    // out and lse in both passes: the backward's check needs the forward results it was given.
    const flashattn::ForwardArgs& f = host.forward;
    down(f.out, dev_.forward.out);
    cuda_check(cudaMemcpy(f.lse, dev_.forward.lse,
                          static_cast<size_t>(f.q.batch * f.q.heads * f.q.seq) * sizeof(float), cudaMemcpyDeviceToHost),
               "cudaMemcpy D2H");
    if (p == Pass::bwd) {
      down(host.backward.dq, dev_.backward.dq);
      down(host.backward.dk, dev_.backward.dk);
      down(host.backward.dv, dev_.backward.dv);
    }
  }
  void forward(const flashattn::ForwardArgs&, const Case&, bool) override {
    flashattn::gpu::forward(dev_.forward);
    cuda_check(cudaDeviceSynchronize(), "gpu forward");
  }
  void backward(const flashattn::BackwardArgs&, const Case&) override {
    flashattn::gpu::backward(dev_.backward);
    cuda_check(cudaDeviceSynchronize(), "gpu backward");
  }
  size_t declared_bytes(const Calls&, const Case& c) const override {
    return c.problem.pass == Pass::bwd ? flashattn::gpu::backward_workspace_bytes(dev_.backward) : 0;
  }

 private:
  // Returns a device copy of the host view (same strides) in the buffer named `role`.
  flashattn::Tensor upload(const flashattn::ConstTensor& host, const char* role) {
    DeviceBuffer& b = bufs_[role];
    b = DeviceBuffer(span_bytes(host));
    cuda_check(cudaMemcpy(b.ptr, host.data, span_bytes(host), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    return flashattn::Tensor{b.ptr,       host.dtype,        host.batch,      host.seq,       host.heads,
                             host.dim,    host.stride_batch, host.stride_seq, host.stride_head};
  }
  Calls dev_;
  std::map<std::string, DeviceBuffer> bufs_;
};

constexpr size_t kCopyBytes = size_t{1} << 30;  // large enough to leave every cache
constexpr int kGemmN = 8192;                      // square GEMM, tensor-core bound
constexpr int kCeilingReps = 5;

template <class F>
double best_seconds(F f) {
  f();  // warm-up
  double best = 1e30;
  for (int i = 0; i < kCeilingReps; ++i) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    f();
    cudaEventRecord(e1);
    cuda_check(cudaEventSynchronize(e1), "ceiling timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    best = std::min(best, ms * 1e-3);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  return best;
}

}  // namespace

std::string gpu_name() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "";
  return prop.name;
}

std::unique_ptr<Runner> make_gpu_runner() { return std::make_unique<GpuRunner>(); }

GpuCeilings measure_gpu_ceilings() {
  GpuCeilings c;
  {
    DeviceBuffer src(kCopyBytes), dst(kCopyBytes);
    const double s = best_seconds([&] { cudaMemcpyAsync(dst.ptr, src.ptr, kCopyBytes, cudaMemcpyDeviceToDevice); });
    c.copy_gbps = 2.0 * static_cast<double>(kCopyBytes) / s * 1e-9;
  }
  {
    const size_t elems = static_cast<size_t>(kGemmN) * kGemmN;
    DeviceBuffer a(elems * 2), b(elems * 2), d(elems * 2);
    cudaMemset(a.ptr, 0x3c, elems * 2);  // bf16 0x3c3c ≈ 0.0115: non-zero operands
    cudaMemset(b.ptr, 0x3c, elems * 2);
    cublasHandle_t h;
    cublas_check(cublasCreate(&h), "cublasCreate");
    const float alpha = 1, beta = 0;
    const double s = best_seconds([&] {
      cublas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, kGemmN, kGemmN, kGemmN, &alpha, a.ptr, CUDA_R_16BF, kGemmN,
                                b.ptr, CUDA_R_16BF, kGemmN, &beta, d.ptr, CUDA_R_16BF, kGemmN, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    });
    cublasDestroy(h);
    c.gemm_tflops = 2.0 * kGemmN * double(kGemmN) * kGemmN / s * 1e-12;
  }
  return c;
}

}  // namespace bench
