// The sm_90a forward's launcher and its instances (d = dv = 64 and 128, f16 and bf16). Compiled for
// every architecture of the build; the kernel's body exists in the sm_90a code only, and the call
// sequence launches it only on such a device.
#include "forward_sm90_kernel.cuh"
#include "launch.cuh"

namespace flashattn::gpu::detail {

template <int D, class T>
void launch_forward_sm90(const Sm90ForwardParams& p, int64_t max_seqlen_q, cudaStream_t stream) {
  using Tr = Sm90ForwardTraits<D>;
  launch(forward_sm90_variant<D, T>(p.p), ceil_div(max_seqlen_q, Tr::kBr) * p.p.num_splits, p.p.heads_q,
         p.p.num_sequences, Tr::kThreads, Tr::kSmemBytes, stream, p);
}

template void launch_forward_sm90<64, __half>(const Sm90ForwardParams&, int64_t, cudaStream_t);
template void launch_forward_sm90<64, __nv_bfloat16>(const Sm90ForwardParams&, int64_t, cudaStream_t);
template void launch_forward_sm90<128, __half>(const Sm90ForwardParams&, int64_t, cudaStream_t);
template void launch_forward_sm90<128, __nv_bfloat16>(const Sm90ForwardParams&, int64_t, cudaStream_t);

}  // namespace flashattn::gpu::detail
