// Portability macros shared by host and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define FLASHATTN_HD __host__ __device__
#else
#define FLASHATTN_HD
#endif

#include <cstddef>

namespace flashattn {

// Reads one element of an array that a shared helper of these headers takes by pointer (sequence
// lengths, block lists, block-mask bits), on the host or the device. Those helpers take their
// reader as a template argument, this one by default; the GPU kernels pass theirs, which reads
// through their own load (so that the kernels' host emulator checks each read like theirs).
struct ElementRead {
  template <class T>
  FLASHATTN_HD constexpr T operator()(const T* p) const {
    return *p;
  }
};

}  // namespace flashattn
