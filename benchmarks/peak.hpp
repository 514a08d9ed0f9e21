// Machine ceilings measured by the benchmark itself.
#pragma once

namespace bench {

// Returns the fp32 FMA throughput in GFLOP/s of `threads` threads running independent vector FMA
// chains (the dispatched Highway target) for about `seconds`; the best of a few trials (the host is
// shared, so a single trial can read low).
double measure_fma_peak_gflops(int threads, double seconds);

}  // namespace bench
