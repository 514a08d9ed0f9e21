// Memory read bandwidth measured by the benchmark itself: the ceiling of a memory-bound call such
// as decoding, which must read K and V once.
#pragma once

#include <cstddef>

namespace bench {

// Returns the read bandwidth in GB/s (1e9 bytes/s) of `threads` threads each streaming its share of
// a buffer of `bytes` (far larger than the last-level cache) with vector loads, for about `seconds`;
// the best of a few trials (the host is shared, so a single trial can read low). The buffer is
// allocated and first-touched by the same threads before timing (one NUMA placement as the
// benchmarked calls').
double measure_read_bandwidth_gbps(int threads, size_t bytes, double seconds);

}  // namespace bench
