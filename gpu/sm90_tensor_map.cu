// encode_tensor_map for the device build (sm90_tensor_map.hpp): the driver's cuTensorMapEncodeTiled,
// looked up through the runtime so that the library does not link libcuda.
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <stdexcept>
#include <string>

#include "sm90_tensor_map.hpp"

namespace flashattn::gpu::detail::sm90 {
namespace {

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

// Returns the driver's cuTensorMapEncodeTiled (the 12.0 ABI); throws std::runtime_error if the
// driver has none. Looked up once per process.
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error(std::string("tensor map: the driver has no cuTensorMapEncodeTiled (") +
                               cudaGetErrorString(e) + ")");
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

CUtensorMapSwizzle driver_swizzle(Swizzle s) {
  switch (s) {
    case Swizzle::b32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case Swizzle::b64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case Swizzle::b128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    case Swizzle::none:
      break;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

}  // namespace

void encode_tensor_map(CUtensorMap* map, const TensorMapSpec& s) {
  if (const std::string problem = tensor_map_problem(s); !problem.empty())
    throw std::invalid_argument("tensor map: " + problem);
  cuuint64_t dims[5] = {}, strides[4] = {};
  cuuint32_t box[5] = {}, element_strides[5] = {};
  for (int i = 0; i < s.rank; ++i) {
    dims[i] = s.dims[i];
    box[i] = s.box[i];
    element_strides[i] = 1;
    if (i > 0) strides[i - 1] = s.strides[i];  // the driver takes dimensions 1..rank-1 only
  }
  // UINT16: the copy moves bits, and zero bits are 0 in f16 and bf16 alike (the out-of-bounds fill).
  const CUresult r = encode_tiled()(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, static_cast<cuuint32_t>(s.rank),
                                    const_cast<void*>(s.global), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, driver_swizzle(s.swizzle),
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("tensor map: cuTensorMapEncodeTiled failed with CUresult " + std::to_string(r));
}

}  // namespace flashattn::gpu::detail::sm90
