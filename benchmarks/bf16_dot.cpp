// flashattn-bf16-dot: what the AVX3_BF16 target (cpu/bf16_dot.h) is measured against. Prints the
// register-resident peaks of vdpbf16ps and of fp32 FMA on `threads` threads (GFLOP/s, a multiply and
// an add counted as 2 flops, so one vdpbf16ps lane is 4), then times flashattn::cpu forward and
// backward (min of reps) for B = 1, Hq = Hk = heads, causal 0/1: bf16 on AVX3_BF16 and on AVX3 (the
// widening path), f32 on the best target. Problems are bhsd, standard normal, scale 1/√d.
//   flashattn-bf16-dot [threads=2] [heads=16] [reps=5] [N,d ...]   e.g. 1024,64 4096,128
// The peaks are flashattn-bench's (peak.hpp: best of 3 trials of register-resident chains).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/cpu.hpp"
#include "peak.hpp"

namespace {

using Clock = std::chrono::steady_clock;

flashattn::Tensor Bhsd(void* p, flashattn::DType t, int64_t heads, int64_t n, int64_t d) {
  flashattn::Tensor x;
  x.data = p;
  x.dtype = t;
  x.batch = 1;
  x.seq = n;
  x.heads = heads;
  x.dim = d;
  x.stride_batch = heads * n * d;
  x.stride_head = n * d;
  x.stride_seq = d;
  return x;
}

// Minimum seconds of `reps` calls of f.
template <class F>
double MinTime(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::puts("this CPU has no AVX512_BF16: nothing to measure");
    return 0;
  }
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int64_t heads = argc > 2 ? std::atoll(argv[2]) : 16;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int i = 4; i < argc; ++i) {
    long long n = 0, d = 0;
    if (std::sscanf(argv[i], "%lld,%lld", &n, &d) == 2) shapes.push_back({n, d});
  }
  if (shapes.empty()) shapes = {{1024, 64}, {1024, 128}, {4096, 64}, {4096, 128}};
  const double dot_peak = bench::measure_bf16_peak_gflops(threads, 1.5);
  const double fma_peak = bench::measure_fma_peak_gflops(threads, 1.5);
  std::printf("peaks, %d threads: vdpbf16ps %.1f GFLOP/s, fp32 FMA %.1f GFLOP/s (ratio %.2f)\n", threads, dot_peak,
              fma_peak, dot_peak / fma_peak);
  int64_t avx3 = 0, bf16 = 0;
  for (const auto& t : flashattn::cpu::targets()) {
    if (t.name == "AVX3") avx3 = t.bit;
    if (t.name == "AVX3_BF16") bf16 = t.bit;
  }
  std::printf("%6s %4s %6s | %-22s | %9s %9s %9s | %6s %6s %6s | %s\n", "N", "d", "causal", "pass", "f32 ms",
              "bf16-AVX3", "bf16-BF16", "%peak", "vs f32", "vs old", "bwd/fwd (BF16)");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (const auto& [n, d] : shapes) {
    const size_t count = static_cast<size_t>(heads * n * d);
    std::vector<float> f[5];
    std::vector<uint16_t> b[5];
    for (int t = 0; t < 5; ++t) {
      f[t].resize(count);
      b[t].resize(count);
      for (size_t i = 0; i < count; ++i) {
        b[t][i] = flashattn::bf16_bits_from_float(normal(rng));
        f[t][i] = flashattn::float_from_bf16_bits(b[t][i]);
      }
    }
    std::vector<float> lse(static_cast<size_t>(heads * n)), gf[3];
    std::vector<uint16_t> gb[3];
    for (int t = 0; t < 3; ++t) {
      gf[t].resize(count);
      gb[t].resize(count);
    }
    for (int causal = 0; causal <= 1; ++causal) {
      double fwd_ms[3], bwd_ms[3];
      for (int impl = 0; impl < 3; ++impl) {  // f32 best, bf16 AVX3, bf16 AVX3_BF16
        const flashattn::DType dt = impl == 0 ? flashattn::DType::f32 : flashattn::DType::bf16;
        auto ptr = [&](int t) -> void* { return impl == 0 ? static_cast<void*>(f[t].data()) : b[t].data(); };
        auto gptr = [&](int t) -> void* { return impl == 0 ? static_cast<void*>(gf[t].data()) : gb[t].data(); };
        flashattn::cpu::Config c;
        c.threads = threads;
        c.target = impl == 1 ? avx3 : impl == 2 ? bf16 : 0;
        flashattn::ForwardArgs fa;
        fa.q = Bhsd(ptr(0), dt, heads, n, d);
        fa.k = Bhsd(ptr(1), dt, heads, n, d);
        fa.v = Bhsd(ptr(2), dt, heads, n, d);
        fa.out = Bhsd(ptr(3), dt, heads, n, d);
        fa.lse = lse.data();
        fa.causal = causal != 0;
        flashattn::cpu::forward(fa, c);  // warm-up (scratch, pages)
        fwd_ms[impl] = 1e3 * MinTime(reps, [&] { flashattn::cpu::forward(fa, c); });
        flashattn::BackwardArgs ba = flashattn::backward_args(fa);
        ba.dout = Bhsd(ptr(4), dt, heads, n, d);
        ba.dq = Bhsd(gptr(0), dt, heads, n, d);
        ba.dk = Bhsd(gptr(1), dt, heads, n, d);
        ba.dv = Bhsd(gptr(2), dt, heads, n, d);
        flashattn::cpu::backward(ba, c);
        bwd_ms[impl] = 1e3 * MinTime(reps, [&] { flashattn::cpu::backward(ba, c); });
      }
      // Useful flops: 2 products of n·n·d per head forward, 5 backward (the recomputed S included);
      // half under the causal mask.
      const double useful = 2.0 * n * n * d * heads * (causal ? 0.5 : 1.0);
      for (int pass = 0; pass < 2; ++pass) {
        const double* ms = pass ? bwd_ms : fwd_ms;
        const double flops = useful * (pass ? 5 : 2);
        std::printf("%6lld %4lld %6d | %-22s | %9.2f %9.2f %9.2f | %5.1f%% %5.2fx %5.2fx | %.2f\n",
                    static_cast<long long>(n), static_cast<long long>(d), causal, pass ? "backward" : "forward", ms[0],
                    ms[1], ms[2], 100.0 * flops / (ms[2] * 1e-3) * 1e-9 / dot_peak, ms[0] / ms[2], ms[1] / ms[2],
                    bwd_ms[2] / fwd_ms[2]);
      }
    }
  }
  return 0;
}
