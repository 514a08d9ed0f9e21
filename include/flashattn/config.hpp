// Portability macros shared by host and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define FLASHATTN_HD __host__ __device__
#else
#define FLASHATTN_HD
#endif
