// Machine ceilings measured by the benchmark itself.
#pragma once

namespace bench {

// Returns the fp32 FMA throughput in GFLOP/s of `threads` threads running independent vector FMA
// chains (the dispatched Highway target) for about `seconds`; the best of a few trials (the host is
// shared, so a single trial can read low).
double measure_fma_peak_gflops(int threads, double seconds);

// Returns the bf16 dot-product throughput in GFLOP/s (AVX512_BF16 vdpbf16ps, 2 FLOPs per bf16
// product), measured like measure_fma_peak_gflops; 0 when the CPU lacks AVX512_BF16.
double measure_bf16_peak_gflops(int threads, double seconds);

}  // namespace bench
