// GPU parts of the benchmark (built only with flashattn::gpu): the runner of flashattn::gpu and the
// GPU's measured ceilings.
#pragma once

#include <memory>
#include <string>

#include "impls.hpp"

namespace bench {

// Returns the name of GPU 0 ("" when no GPU is usable).
std::string gpu_name();

// Returns a runner for flashattn::gpu: uploads the inputs once per case, times the kernels with the
// device synchronised after each call, downloads results for the check.
std::unique_ptr<Runner> make_gpu_runner();

struct GpuCeilings {
  double copy_gbps = 0;     // device-to-device copy of a large buffer: bytes read + written per second
  double gemm_tflops = 0;   // cuBLAS bf16 GEMM (fp32 accumulation), large square matrices
};

// Measures the GPU's ceilings (best of a few repetitions).
GpuCeilings measure_gpu_ceilings();

}  // namespace bench
