// The GPU ceilings the performance model (scripts/gpu-model) assumes, measured: the throughput and
// latency of mma.sync.m16n8k16 (bf16 in, fp32 accumulate: the HMMA.16816 the kernels issue) and of
// ldmatrix.x4, and device-to-device copy bandwidth. Standalone (CUDA runtime only):
//
//   nvcc -O3 -arch=sm_90a -o gpu-ceilings benchmarks/gpu_ceilings.cu && ./gpu-ceilings
//
// Throughput: every warp of a full grid issues rounds of kChains independent mma.sync (separate
// accumulators, so only the tensor pipe limits them); TFLOP/s = 4096 FLOP per mma. Latency: one warp
// issues a chain of mma.sync each accumulating into the previous one's result, timed with clock64().
// Operands are fixed register values (what they hold does not change the timing of mma.sync; the
// results are summed into an output so the compiler keeps every instruction).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

constexpr int kChains = 8;  // independent accumulators per warp (the forward's QK step has 8)

__global__ void mma_throughput(int rounds, float* out) {
  uint32_t a[4] = {0x3f803f80u + threadIdx.x, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};  // bf16 ~1.0
  const uint32_t b0 = 0x3c003c00u, b1 = 0x3c003c00u;
  float c[kChains][4] = {};
  for (int r = 0; r < rounds; ++r) {
#pragma unroll
    for (int k = 0; k < kChains; ++k) mma_bf16(c[k], a, b0, b1);
  }
  float s = 0;
#pragma unroll
  for (int k = 0; k < kChains; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

__global__ void mma_latency(int chain, float* out, long long* cycles) {
  uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
  float c[4] = {};
  const long long t0 = clock64();
  for (int i = 0; i < chain; ++i) mma_bf16(c, a, 0x3c003c00u, 0x3c003c00u);
  const long long t1 = clock64();
  out[threadIdx.x] = c[0] + c[1] + c[2] + c[3];
  if (threadIdx.x == 0) *cycles = t1 - t0;
}

// ldmatrix.x4 from shared memory, conflict-free (a matrix's 8 rows are 128 contiguous bytes). Each
// round's address depends on the previous round's data (one of 8 tiles of 512 B per warp), so the
// compiler cannot merge the loads of different rounds (with a fixed address nvcc kept 2 loads per 16
// rounds, and the "bandwidth" came out at 964 B per SM clock); 32 warps per SM cover the latency.
__global__ void ldmatrix_throughput(int rounds, float* out) {
  __shared__ __align__(16) uint16_t tile[8][8][256];  // 8 warps x 8 tiles x (4 matrices x 8 rows x 8)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 8 * 8 * 256; i += blockDim.x) (&tile[0][0][0])[i] = static_cast<uint16_t>(i * 7);
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(&tile[warp][0][lane * 8]));
  uint32_t acc = 0;
  for (int r = 0; r < rounds; ++r) {
    uint32_t x0, x1, x2, x3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                 : "r"(base + ((acc & 7u) << 9))
                 : "memory");
    acc += x0 ^ x1 ^ x2 ^ x3;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<float>(acc);
}

template <class Launch>
float time_ms(Launch launch) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  launch();  // warm-up
  check(cudaDeviceSynchronize(), "warm-up");
  check(cudaEventRecord(a), "record");
  launch();
  check(cudaEventRecord(b), "record");
  check(cudaEventSynchronize(b), "sync");
  check(cudaGetLastError(), "launch");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "elapsed");
  return ms;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  int clock_khz = 0;
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "clock rate");
  const int sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs, max SM clock %.2f GHz\n", prop.name, sms, clock_khz / 1e6);
  float* out = nullptr;
  long long* cycles = nullptr;
  check(cudaMalloc(&out, sizeof(float) * 1024 * 1024), "malloc");
  check(cudaMalloc(&cycles, sizeof(long long)), "malloc");

  const int rounds = 4096;
  for (int warps : {4, 8, 16}) {
    const int blocks = sms * 2;
    const float ms = time_ms([&] { mma_throughput<<<blocks, 32 * warps>>>(rounds, out); });
    const double flop = 4096.0 * kChains * rounds * warps * blocks;
    std::printf("mma.sync m16n8k16 bf16: %2d warps x 2 blocks per SM, %d chains: %.1f TFLOP/s (%.2f SM clocks per "
                "HMMA at the max clock)\n",
                warps, kChains, flop / (ms * 1e-3) / 1e12,
                (ms * 1e-3) * clock_khz * 1e3 / (flop / 4096.0 / sms));
  }
  for (int chain : {64, 1024}) {
    mma_latency<<<1, 32>>>(chain, out, cycles);
    check(cudaDeviceSynchronize(), "latency");
    long long c = 0;
    check(cudaMemcpy(&c, cycles, sizeof c, cudaMemcpyDeviceToHost), "copy");
    std::printf("mma.sync dependent chain of %d: %.1f cycles per HMMA\n", chain, static_cast<double>(c) / chain);
  }
  {
    const int blocks = sms * 4, threads = 256, lrounds = 16384;
    const float ms = time_ms([&] { ldmatrix_throughput<<<blocks, threads>>>(lrounds, out); });
    const double bytes = 512.0 * lrounds * (threads / 32) * blocks;
    std::printf("ldmatrix.x4: %.1f TB/s from shared memory (%.1f B per SM clock at the max clock)\n",
                bytes / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / (clock_khz * 1e3) / sms);
  }
  {
    const size_t n = size_t{4} << 30;
    void *src = nullptr, *dst = nullptr;
    check(cudaMalloc(&src, n), "malloc");
    check(cudaMalloc(&dst, n), "malloc");
    check(cudaMemset(src, 1, n), "memset");
    const float ms = time_ms([&] { check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice), "copy"); });
    std::printf("device-to-device copy of 4 GiB: %.2f TB/s (bytes read + written)\n", 2.0 * n / (ms * 1e-3) / 1e12);
    cudaFree(src);
    cudaFree(dst);
  }
  cudaFree(out);
  cudaFree(cycles);
  return 0;
}
