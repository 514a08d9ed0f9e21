// The consumer's GPU part (built when the package has flashattn::gpu): checks that the backend
// links and reports what it supports; where a CUDA device exists, runs a small f16 causal GQA
// forward and compares it with the oracle on the same inputs. Returns the number of failures.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <flashattn/flashattn.hpp>
#include <flashattn/gpu.hpp>
#include <flashattn/reference.hpp>

namespace {

constexpr int64_t kNq = 3, kNk = 5, kHq = 2, kHk = 1;
constexpr int64_t kHeadDims[] = {32, 64, 96, 128, 256};
// f16 outputs of O(1) values: a few units of f16 rounding (2^-11) above the oracle's own rounding.
constexpr double kTol = 8 * 0x1p-11;

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("gpu: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Fills n f16 values (bit patterns) with small deterministic numbers.
std::vector<uint16_t> f16_values(int64_t n, int seed) {
  std::vector<uint16_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    r[i] = flashattn::f16_bits_from_float(static_cast<float>((i * 5 + seed * 3) % 13) / 6.0f - 1.0f);
  return r;
}

}  // namespace

int check_gpu() {
  int bad = 0;
  const std::string f32_reason = flashattn::gpu::unsupported_reason(flashattn::DType::f32, 64);
  std::printf("gpu: linked; f32 %s\n", f32_reason.empty() ? "accepted" : ("rejected: " + f32_reason).c_str());
  int64_t d = 0;
  for (int64_t hd : kHeadDims)
    if (d == 0 && flashattn::gpu::unsupported_reason(flashattn::DType::f16, hd).empty()) d = hd;
  if (d == 0) {
    std::printf("gpu: no f16 head dim is compiled in\n");
    return 1;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gpu: no CUDA device here: the kernels were linked, not run\n");
    return 0;
  }

  const int64_t nq = kNq * kHq * d, nk = kNk * kHk * d;
  std::vector<uint16_t> q = f16_values(nq, 1), k = f16_values(nk, 2), v = f16_values(nk, 3);
  std::vector<uint16_t> want(nq), got(nq);
  std::vector<float> want_lse(kHq * kNq), got_lse(kHq * kNq);
  flashattn::ForwardArgs a;
  a.q = flashattn::bshd(q.data(), flashattn::DType::f16, 1, kNq, kHq, d);
  a.k = flashattn::bshd(k.data(), flashattn::DType::f16, 1, kNk, kHk, d);
  a.v = flashattn::bshd(v.data(), flashattn::DType::f16, 1, kNk, kHk, d);
  a.out = flashattn::bshd(want.data(), flashattn::DType::f16, 1, kNq, kHq, d);
  a.lse = want_lse.data();
  a.causal = true;
  flashattn::reference::forward(a);

  void *dq = nullptr, *dk = nullptr, *dv = nullptr, *dout = nullptr;
  float* dlse = nullptr;
  const size_t qb = nq * sizeof(uint16_t), kb = nk * sizeof(uint16_t), lb = got_lse.size() * sizeof(float);
  if (ok(cudaMalloc(&dq, qb), "cudaMalloc") && ok(cudaMalloc(&dk, kb), "cudaMalloc") &&
      ok(cudaMalloc(&dv, kb), "cudaMalloc") && ok(cudaMalloc(&dout, qb), "cudaMalloc") &&
      ok(cudaMalloc(reinterpret_cast<void**>(&dlse), lb), "cudaMalloc") &&
      ok(cudaMemcpy(dq, q.data(), qb, cudaMemcpyHostToDevice), "copy q") &&
      ok(cudaMemcpy(dk, k.data(), kb, cudaMemcpyHostToDevice), "copy k") &&
      ok(cudaMemcpy(dv, v.data(), kb, cudaMemcpyHostToDevice), "copy v")) {
    flashattn::ForwardArgs g = a;
    g.q.data = dq;
    g.k.data = dk;
    g.v.data = dv;
    g.out.data = dout;
    g.lse = dlse;
    flashattn::gpu::forward(g);
    if (ok(cudaDeviceSynchronize(), "forward") && ok(cudaMemcpy(got.data(), dout, qb, cudaMemcpyDeviceToHost), "copy out") &&
        ok(cudaMemcpy(got_lse.data(), dlse, lb, cudaMemcpyDeviceToHost), "copy lse")) {
      double worst = 0;
      for (int64_t i = 0; i < nq; ++i)
        worst = std::fmax(worst, std::fabs(flashattn::float_from_f16_bits(got[i]) - flashattn::float_from_f16_bits(want[i])));
      for (size_t i = 0; i < got_lse.size(); ++i) worst = std::fmax(worst, std::fabs(got_lse[i] - want_lse[i]));
      bad += !(worst <= kTol);
      std::printf("gpu forward (f16, d = %lld): max |gpu - oracle| %.3g (limit %.3g)\n", static_cast<long long>(d), worst, kTol);
    } else {
      ++bad;
    }
  } else {
    ++bad;
  }
  for (void* p : {dq, dk, dv, dout, static_cast<void*>(dlse)}) cudaFree(p);
  return bad;
}
