// Measures heap memory a call allocates: the benchmark executable interposes malloc and friends
// (forwarding to glibc's __libc_* functions) and keeps the live byte count and its peak.
//
// Counts every thread's allocations through malloc, calloc, realloc, posix_memalign, aligned_alloc,
// memalign and operator new (which calls malloc). Does not see mmap done directly by a library
// (OpenBLAS's own buffers), nor CUDA device memory.
#pragma once

#include <cstddef>

namespace bench {

// Starts a measurement window: resets the peak to the current live bytes.
void alloc_meter_start();

// Returns the peak live heap bytes since alloc_meter_start(), minus the live bytes at the start
// (0 if the call freed more than it allocated).
size_t alloc_meter_peak_delta();

}  // namespace bench
