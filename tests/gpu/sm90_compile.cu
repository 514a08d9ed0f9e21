// Instantiates every sm_90a wrapper of gpu/sm90.cuh (every generated wgmma shape, both element
// types, every transpose combination) so that ptxas assembles each asm statement for sm_90a. Built
// as an object library whenever the GPU library is built for 90a; nothing runs it. The kernels'
// arguments are meaningless: only that the code assembles matters. The bodies are compiled in the
// sm_90a device pass only: nvcc -arch=sm_90a also embeds compute_90 PTX, where these instructions
// do not exist (the guard every multi-target caller of sm90.cuh needs).
#include "sm90.cuh"

namespace sm90 = flashattn::gpu::detail::sm90;

namespace {

// Writes the accumulators out so that the wgmma statements are not removed as dead.
template <int R>
__device__ void keep(const float (&d)[R], float* out) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < R; ++i) s += d[i];
  out[threadIdx.x] = s;
}

}  // namespace

// One kernel per (T, N), as a kernel holds one accumulator tile: every transpose combination of
// wgmma_ss and wgmma_rs into it, one committed group.
template <class T, int N>
__global__ void sm90_compile_wgmma(float* out, uint32_t seed) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ alignas(128) uint16_t tile[64 * 64];
  const uint64_t a_desc = sm90::k_major_desc(sm90::smem_addr(tile), sm90::Swizzle::b128);
  const uint64_t b_desc = sm90::mn_major_desc(sm90::smem_addr(tile), sm90::Swizzle::b64, 4096);
  const uint32_t a[4] = {seed, seed + 1, seed + 2, seed + 3};
  float d[N / 2] = {};
  sm90::wgmma_fence();
  sm90::wgmma_ss<T, N, false, false>(d, a_desc, b_desc, false);
  sm90::wgmma_ss<T, N, false, true>(d, a_desc, b_desc, true);
  sm90::wgmma_ss<T, N, true, false>(d, a_desc, b_desc, true);
  sm90::wgmma_ss<T, N, true, true>(d, a_desc, b_desc, true);
  sm90::wgmma_rs<T, N, false>(d, a, b_desc, true);
  sm90::wgmma_rs<T, N, true>(d, a, b_desc, true);
  sm90::wgmma_commit();
  sm90::wgmma_wait<1>();
  sm90::wgmma_wait<0>();
  sm90::wgmma_fence_operand(d);
  keep(d, out);
#endif
}

// Every shape gpu/tools/gen_wgmma.py generates, both element types.
#define FLASHATTN_SM90_COMPILE_WGMMA(N)                                            \
  template __global__ void sm90_compile_wgmma<__half, N>(float*, uint32_t); \
  template __global__ void sm90_compile_wgmma<__nv_bfloat16, N>(float*, uint32_t);
FLASHATTN_SM90_COMPILE_WGMMA(16)
FLASHATTN_SM90_COMPILE_WGMMA(32)
FLASHATTN_SM90_COMPILE_WGMMA(64)
FLASHATTN_SM90_COMPILE_WGMMA(96)
FLASHATTN_SM90_COMPILE_WGMMA(128)
FLASHATTN_SM90_COMPILE_WGMMA(192)
FLASHATTN_SM90_COMPILE_WGMMA(256)
#undef FLASHATTN_SM90_COMPILE_WGMMA
static_assert(sm90::wgmma_shape_count() == 7, "instantiate every shape of FLASHATTN_SM90_WGMMA_SHAPES above");

// Three boxes on one barrier with its transaction count, then a barrier every thread arrives on.
__global__ void sm90_compile_mbarrier_tma(const __grid_constant__ CUtensorMap map2,
                                          const __grid_constant__ CUtensorMap map3,
                                          const __grid_constant__ CUtensorMap map4, float* out, int32_t c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ alignas(128) uint16_t box[3][64 * 64];
  __shared__ alignas(8) uint64_t bar[2];
  if (threadIdx.x == 0) {
    sm90::mbarrier_init(&bar[0], 1);
    sm90::mbarrier_init(&bar[1], blockDim.x);
    sm90::mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::mbarrier_arrive_expect_tx(&bar[0], sizeof(box));
    sm90::tma_load_2d(box[0], &map2, &bar[0], c, c + 1);
    sm90::tma_load_3d(box[1], &map3, &bar[0], c, c + 1, c + 2);
    sm90::tma_load_4d(box[2], &map4, &bar[0], c, c + 1, c + 2, c + 3);
  }
  sm90::mbarrier_wait(&bar[0], 0);
  sm90::mbarrier_arrive(&bar[1]);
  sm90::mbarrier_wait(&bar[1], 0);
  out[threadIdx.x] = static_cast<float>(box[threadIdx.x % 3][threadIdx.x]);
#endif
}

// setmaxnreg needs the register count at entry fixed, as __launch_bounds__ with a minimum of 1 block
// does: warpgroup 0 gives registers up, warpgroup 1 takes them.
__global__ void __launch_bounds__(256, 1) sm90_compile_misc(float* out, uint32_t seed) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ alignas(16) uint16_t tile[2][32 * 8 * 4];
  const uint32_t r[4] = {seed, seed * 3, seed * 5, seed * 7};
  const int lane = threadIdx.x % 32;
  if (threadIdx.x / 128 == 0) {
    sm90::setmaxnreg_dec<24>();
  } else {
    sm90::setmaxnreg_inc<240>();
  }
  sm90::stmatrix_x4(&tile[0][lane * 8], r);
  sm90::stmatrix_x4_trans(&tile[1][lane * 8], r);
  sm90::fence_proxy_async();
  __syncthreads();
  out[threadIdx.x] = static_cast<float>(tile[threadIdx.x % 2][threadIdx.x]);
#endif
}
