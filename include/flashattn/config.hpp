// Portability macros shared by host and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define FLASHATTN_HD __host__ __device__
#else
#define FLASHATTN_HD
#endif

#include <cstddef>

namespace flashattn {

// Observes the reads of read_element on the host (null: none). The GPU kernels' host emulator sets
// it while an emulated block runs, to check each read against the call's buffers; nothing else
// should.
using ReadObserver = void (*)(const void* p, std::size_t bytes);
inline ReadObserver read_observer = nullptr;

// Returns *p: one element of an array that the shared helpers of these headers take by pointer
// (sequence lengths, block lists, block-mask bits), read on the host or the device. Host reads are
// shown to read_observer first, when one is set.
template <class T>
FLASHATTN_HD constexpr T read_element(const T* p) {
#ifndef __CUDA_ARCH__
  if (read_observer) read_observer(p, sizeof(T));
#endif
  return *p;
}

}  // namespace flashattn
