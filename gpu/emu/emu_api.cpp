// Entry points of the host emulator: the same orchestration as api.cu (validate, parameter
// blocks, D pre-pass, dK/dV kernel with atomic dQ or the deterministic dQ kernel), with every
// launch replaced by emu::launch over the same grids.
#include "emu/emu_api.hpp"

#include <vector>

#include "backward_kernel.cuh"
#include "dq_kernel.cuh"
#include "flashattn/validate.hpp"
#include "forward_kernel.cuh"
#include "host_params.hpp"
#include "rowwise.cuh"

namespace flashattn::gpu_emu {
namespace {

using namespace flashattn::gpu::detail;

constexpr int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

emu::Dim3 grid(int64_t x, int64_t y, int64_t z) {
  return emu::Dim3{static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z)};
}

template <int D, class T>
void run_forward(const ForwardParams& p, const Extents& e) {
  emu::launch(forward_kernel<D, T>, grid(ceil_div(e.max_q, ForwardTraits<D>::kBr), p.heads_q, e.nseq),
              kThreadsPerBlock, ForwardTraits<D>::kSmemBytes, p);
}

template <int D, class T>
void run_backward(const BackwardParams& p, const Extents& e, bool deterministic) {
  emu::launch(dot_kernel<T>, grid(ceil_div(e.max_q, kRowsPerBlock), p.heads_q, e.nseq), kThreadsPerBlock, 0, p);
  emu::launch(backward_kernel<D, T>, grid(ceil_div(e.max_k_rows, BackwardTraits<D>::kBc), p.heads_k, e.nseq),
              kThreadsPerBlock, BackwardTraits<D>::kSmemBytes, p, !deterministic);
  if (deterministic)
    emu::launch(dq_kernel<D, T>, grid(ceil_div(e.max_q, DqTraits<D>::kBr), p.heads_q, e.nseq), kThreadsPerBlock,
                DqTraits<D>::kSmemBytes, p);
  else
    emu::launch(dq_convert_kernel<T>, grid(ceil_div(e.max_q, kRowsPerBlock), p.heads_q, e.nseq), kThreadsPerBlock,
                0, p);
}

template <class F>
void dispatch(int64_t d, DType t, F&& f) {
  auto by_type = [&](auto dim) {
    if (t == DType::f16)
      f(dim, __half{});
    else
      f(dim, __nv_bfloat16{});
  };
  switch (d) {
    case 32: return by_type(std::integral_constant<int, 32>{});
    case 64: return by_type(std::integral_constant<int, 64>{});
    case 96: return by_type(std::integral_constant<int, 96>{});
    case 128: return by_type(std::integral_constant<int, 128>{});
    case 256: return by_type(std::integral_constant<int, 256>{});
  }
}

}  // namespace

const char* unsupported(DType dtype, int64_t d) {
  if (dtype != DType::f16 && dtype != DType::bf16) return "gpu: dtype f32 is not supported";
  if (d != 32 && d != 64 && d != 96 && d != 128 && d != 256) return "gpu: head dim is not supported";
  return "";
}

void forward(const ForwardArgs& a) {
  validate(a);
  const Extents e = extents(a);
  if (e.max_q == 0 || *unsupported(a.q.dtype, a.q.dim)) return;
  ForwardParams p;
  fill(p, a, e.nseq);
  dispatch(a.q.dim, a.q.dtype, [&](auto d, auto t) { run_forward<decltype(d)::value, decltype(t)>(p, e); });
}

void backward(const BackwardArgs& a, bool deterministic) {
  validate(a);
  const Extents e = extents(a);
  if ((e.max_q == 0 && e.max_k_rows == 0) || *unsupported(a.q.dtype, a.q.dim)) return;
  BackwardParams p;
  fill(p, a, e.nseq);
  std::vector<float> dot(dot_count(a)), dq_accum(deterministic ? 0 : dq_accum_count(a), 0.0f);
  p.dot = dot.data();
  p.dq_accum = deterministic ? nullptr : dq_accum.data();
  dispatch(a.q.dim, a.q.dtype,
           [&](auto d, auto t) { run_backward<decltype(d)::value, decltype(t)>(p, e, deterministic); });
}

}  // namespace flashattn::gpu_emu
