// Entry points of the host emulator: the same orchestration as api.cu (validate; append kernels
// and the plain call; dropout keep mask, forward kernel and split-KV combine; D pre-pass, dsinks,
// dbias, dK/dV kernel with atomic dQ or the deterministic dQ kernel), with every launch replaced by emu::launch over the same
// grids and host vectors as scratch.
#include "emu/emu_api.hpp"

#include <string>
#include <vector>

#include "append.cuh"
#include "backward_kernel.cuh"
#include "dbias_kernel.cuh"
#include "dq_kernel.cuh"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"
#include "forward_kernel.cuh"
#include "host_params.hpp"
#include "rowwise.cuh"
#include "variants.inc"

namespace flashattn::gpu_emu {
namespace {

using namespace flashattn::gpu::detail;

constexpr int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// fp32 scratch of a call (what the GPU backend allocates on the device), zeroed and registered with
// the emulator's memcheck for its lifetime with kPad guard floats on each side: a kernel access
// outside [data(), data() + n) is an error. data() is null when n is 0.
class Scratch {
 public:
  Scratch(size_t n, const char* name) : n_(n), storage_(n + 2 * kPad, 0.0f) {
    if (n_) emu::register_guarded(storage_.data(), storage_.data() + storage_.size(), data(), n_ * sizeof(float), name);
  }
  ~Scratch() {
    if (n_) emu::unregister_guarded(data());
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() { return n_ ? storage_.data() + kPad : nullptr; }

 private:
  static constexpr size_t kPad = 16;
  size_t n_;
  std::vector<float> storage_;
};

emu::Dim3 grid(int64_t x, int64_t y, int64_t z) {
  return emu::Dim3{static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z)};
}

template <int D, int DV, class T>
void run_forward(ForwardParams p, const ForwardArgs& call, const Extents& e) {
  const ForwardShape shape = forward_shape<D, DV>(forward_extras(p));
  const int splits = split_count(call, e, shape.br, shape.bc);
  Scratch partials(partial_count(call, splits), "split-KV partials");
  set_partials(p, call, splits, partials.data());
  if (p.dropout_mask)
    emu::launch(dropout_mask_kernel, grid(ceil_div(e.max_q, kRowsPerBlock), p.heads_q, e.nseq), kThreadsPerBlock, 0, p);
  emu::launch(forward_variant<D, DV, T>(p),
              grid(ceil_div(e.max_q, shape.br) * splits, p.heads_q, e.nseq), kThreadsPerBlock, shape.smem, p);
  if (splits > 1)
    emu::launch(combine_kernel<T>, grid(ceil_div(e.max_q, kRowsPerBlock), p.heads_q, e.nseq), kThreadsPerBlock, 0, p);
}

template <int D, int DV, class T>
void run_backward(const BackwardParams& p, const Extents& e, bool deterministic) {
  const BackwardShape shape = backward_shape<D, DV>(backward_extras(p));
  emu::launch(dot_kernel<T>, grid(ceil_div(e.max_q, kRowsPerBlock), p.heads_q, e.nseq), kThreadsPerBlock, 0, p);
  if (p.dsinks) emu::launch(dsinks_kernel, grid(p.heads_q, 1, 1), kThreadsPerBlock, kThreadsPerBlock * 8, p);
  if (p.dbias.data) emu::launch(dbias_kernel<T>, grid(dbias_blocks(p), p.dbias_heads, p.dbias_batch), kThreadsPerBlock, 0, p);
  emu::launch(backward_variant<D, DV, T>(p), grid(ceil_div(e.max_k_rows, shape.bc), p.heads_k, e.nseq), shape.threads,
              shape.smem, p, !deterministic);
  if (deterministic)
    emu::launch(dq_variant<D, DV, T>(p),
                grid(ceil_div(e.max_q, DqTraits<D, DV>::kBr), p.heads_q, e.nseq), kThreadsPerBlock,
                DqTraits<D, DV>::kSmemBytes, p);
  else
    emu::launch(dq_convert_kernel<T>, grid(ceil_div(e.max_q, kRowsPerBlock), p.heads_q, e.nseq), kThreadsPerBlock,
                0, p);
}

template <class T>
void run_append(const AppendParams& p, const ForwardArgs& a) {
  if (p.new_rows > 0)
    emu::launch(append_kv_kernel<T>, grid(p.new_rows, a.append.k_new.heads, a.q.batch), kThreadsPerBlock, 0, p);
  if (p.q_rot.data) emu::launch(rotate_q_kernel<T>, grid(a.q.seq, a.q.heads, a.q.batch), kThreadsPerBlock, 0, p);
}

// Calls f(integral_constant<D>, integral_constant<DV>, T{}) for the variant (d, dv, dtype) of the
// table (every supported variant; with kBackward those that have a backward).
template <bool kBackward, class F>
void dispatch(int64_t d, int64_t dv, DType dtype, F&& f) {
#define FLASHATTN_X(D, DV, DT, TYPE, BWD)                                                  \
  if constexpr (BWD || !kBackward) {                                                       \
    if (d == D && dv == DV && dtype == DType::DT) {                                        \
      f(std::integral_constant<int, D>{}, std::integral_constant<int, DV>{}, TYPE{});      \
      return;                                                                              \
    }                                                                                      \
  }
  FLASHATTN_GPU_ALL_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
}

}  // namespace

std::string unsupported(DType dtype, int64_t d, int64_t dv, bool backward) {
  if (dtype != DType::f16 && dtype != DType::bf16) return "gpu: dtype f32 is not supported";
#define FLASHATTN_X(D, DV, DT, TYPE, BWD) \
  if (d == D && dv == DV) return BWD || !backward ? "" : "gpu: this head-dim pair has a forward kernel only";
  FLASHATTN_GPU_ALL_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
  return "gpu: head dims d = " + std::to_string(d) + ", dv = " + std::to_string(dv) + " are not supported";
}

void forward(const ForwardArgs& a) {
  validate(a);
  const bool append = a.append.used();
  const int64_t dv = append ? a.append.v_cache.dim : a.v.dim;
  if (!unsupported(a.q.dtype, a.q.dim, dv, false).empty()) return;
  ForwardArgs call = a;
  std::vector<int32_t> lengths;
  std::vector<unsigned char> q_rot;
  if (append) {
    lengths = lengths_after_append(a);
    q_rot.resize(rotated_q_bytes(a));
    AppendParams p;
    fill(p, a, q_rot.data());
    if (a.q.dtype == DType::f16)
      run_append<__half>(p, a);
    else
      run_append<__nv_bfloat16>(p, a);
    call = appended_call(a, lengths.data(), q_rot.data());
  }
  const Extents e = extents(call);
  if (e.max_q == 0) return;
  ForwardParams p;
  fill(p, call, e.nseq, a.dropout_mask ? dropout_mask_row_bytes(a) : 0);
  dispatch<false>(a.q.dim, dv, a.q.dtype, [&](auto d, auto v, auto t) {
    run_forward<decltype(d)::value, decltype(v)::value, decltype(t)>(p, call, e);
  });
}

void backward(const BackwardArgs& a, bool deterministic) {
  validate(a);
  const Extents e = extents(a);
  if (!unsupported(a.q.dtype, a.q.dim, a.v.dim, true).empty()) return;
  BackwardParams p;
  fill(p, a, e.nseq);
  Scratch dot(dot_count(a), "D (dot scratch)"), lse2(dot_count(a), "LSE·log2(e) (lse2 scratch)"),
      dq_accum(deterministic ? 0 : dq_accum_count(a), "dq_accum");
  p.dot = dot.data();
  p.lse2 = lse2.data();
  p.dq_accum = dq_accum.data();
  dispatch<true>(a.q.dim, a.v.dim, a.q.dtype, [&](auto d, auto v, auto t) {
    run_backward<decltype(d)::value, decltype(v)::value, decltype(t)>(p, e, deterministic);
  });
}

}  // namespace flashattn::gpu_emu
