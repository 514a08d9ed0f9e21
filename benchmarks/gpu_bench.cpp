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
size_t span_bytes(const flashattn::Tensor& t) {
  return static_cast<size_t>(t.batch * t.stride_batch) * flashattn::dtype_size(t.dtype);
}

class GpuRunner : public Runner {
 public:
  std::string name() const override { return "gpu"; }
  std::string refuse(const Case& c, const RunSettings&) const override {
    return flashattn::gpu::unsupported_reason(c.problem.dtype, c.problem.head_dim);
  }
  void prepare(const flashattn::BackwardArgs& a) override {
    dev_ = a;
    upload(a.q, dev_.q, "q");
    upload(a.k, dev_.k, "k");
    upload(a.v, dev_.v, "v");
    upload(a.out, dev_.out, "out");
    const size_t lse_bytes = static_cast<size_t>(a.q.batch * a.q.heads * a.q.seq) * sizeof(float);
    bufs_["lse"] = DeviceBuffer(lse_bytes);
    dev_.lse = static_cast<float*>(bufs_["lse"].ptr);
    if (a.dout.data) {
      upload(a.dout, dev_.dout, "dout");
      upload(a.dq, dev_.dq, "dq");
      upload(a.dk, dev_.dk, "dk");
      upload(a.dv, dev_.dv, "dv");
    }
  }
  void fetch(const flashattn::BackwardArgs& a, Pass p) override {
    auto down = [](const flashattn::Tensor& host, const flashattn::Tensor& dev) {
      cuda_check(cudaMemcpy(host.data, dev.data, span_bytes(host), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    };
    // out and lse in both passes: the backward's check needs the forward results it was given.
    down(a.out, dev_.out);
    cuda_check(cudaMemcpy(a.lse, dev_.lse, static_cast<size_t>(a.q.batch * a.q.heads * a.q.seq) * sizeof(float),
                          cudaMemcpyDeviceToHost),
               "cudaMemcpy D2H");
    if (p == Pass::bwd) {
      down(a.dq, dev_.dq);
      down(a.dk, dev_.dk);
      down(a.dv, dev_.dv);
    }
  }
  void forward(const flashattn::ForwardArgs&, const Case&, bool) override {
    flashattn::gpu::forward(dev_);
    cuda_check(cudaDeviceSynchronize(), "gpu forward");
  }
  void backward(const flashattn::BackwardArgs&, const Case&) override {
    flashattn::gpu::backward(dev_);
    cuda_check(cudaDeviceSynchronize(), "gpu backward");
  }
  size_t declared_bytes(const flashattn::BackwardArgs&, const Case& c) const override {
    return c.problem.pass == Pass::bwd ? flashattn::gpu::backward_workspace_bytes(dev_) : 0;
  }

 private:
  void upload(const flashattn::Tensor& host, flashattn::Tensor& dev, const char* role) {
    DeviceBuffer& b = bufs_[role];
    b = DeviceBuffer(span_bytes(host));
    cuda_check(cudaMemcpy(b.ptr, host.data, span_bytes(host), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    dev.data = b.ptr;
  }
  flashattn::BackwardArgs dev_;
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
