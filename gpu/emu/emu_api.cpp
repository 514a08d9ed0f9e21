// Entry points of the host emulator: validation, then the GPU backend's own call sequence
// (sequence.hpp) with a launcher that runs each kernel under emu::launch over the grid the CUDA
// launchers use, and keeps scratch in guarded host memory.
#include "emu/emu_api.hpp"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "append.cuh"
#include "backward_kernel.cuh"
#include "dbias_kernel.cuh"
#include "dq_kernel.cuh"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"
#include "forward_kernel.cuh"
#include "forward_sm90_kernel.cuh"
#include "host_params.hpp"
#include "quantized_kernel.cuh"
#include "rowwise.cuh"
#include "sequence.hpp"
#include "variants.inc"

namespace flashattn::gpu_emu {

int64_t sm90_forward_calls = 0;

namespace {

using namespace flashattn::gpu::detail;

constexpr int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// Scratch of a call (what the GPU backend allocates on the device): `bytes` rounded up to floats,
// filled with NaN as stand-in for the device allocator's uninitialised memory (a kernel that reads
// scratch nothing wrote, or a dQ accumulator the sequence forgot to zero, shows), and registered
// with the emulator's memcheck for its lifetime with kPad guard floats on each side, so a kernel
// access outside [bytes(), bytes() + n) is an error. Null when n is 0.
class Scratch {
 public:
  Scratch(size_t bytes, const char* name)
      : n_((bytes + sizeof(float) - 1) / sizeof(float)),
        storage_(n_ + 2 * kPad, std::numeric_limits<float>::quiet_NaN()) {
    if (n_) emu::register_guarded(storage_.data(), storage_.data() + storage_.size(), get(), bytes, name);
  }
  ~Scratch() {
    if (n_) emu::unregister_guarded(get());
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() { return n_ ? storage_.data() + kPad : nullptr; }
  void* bytes() { return get(); }

 private:
  static constexpr size_t kPad = 16;
  size_t n_;
  std::vector<float> storage_;
};

emu::Dim3 grid(int64_t x, int64_t y, int64_t z) {
  return emu::Dim3{static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z)};
}

// The emulator's launcher of the call sequence: every kernel of the table (the emulator compiles
// them all), each launch over the grid of the CUDA launcher of the same kernel (launch.cuh,
// rowwise.cu), scratch in guarded host memory.
class EmuLauncher {
 public:
  using Buffer = Scratch;
  explicit EmuLauncher(bool sm90 = false) : sm90_(sm90) {}

  Buffer buffer(size_t bytes, const char* name) const { return Buffer(bytes, name); }
  template <class E>
  const E* upload(Buffer& b, const std::vector<E>& values) const {
    if (!values.empty()) std::memcpy(b.bytes(), values.data(), sizeof(E) * values.size());
    return static_cast<const E*>(b.bytes());
  }
  void zero(float* p, size_t count) const { std::memset(p, 0, sizeof(float) * count); }
  void check_backward(const BackwardParams&) const {}  // no grid limits on the host

  // Calls f for the variant (d, dv, dtype) of the whole table (with kBackward, those that have a
  // backward); unsupported() has ruled out the rest.
  template <bool kBackward, class F>
  void dispatch(int64_t d, int64_t dv, DType dtype, F&& f) const {
#define FLASHATTN_X(D, DV, DT, TYPE, BWD)                                                  \
  if constexpr (BWD || !kBackward) {                                                       \
    if (d == D && dv == DV && dtype == DType::DT) {                                        \
      f(std::integral_constant<int, D>{}, std::integral_constant<int, DV>{}, Tag<TYPE>{}); \
      return;                                                                              \
    }                                                                                      \
  }
    FLASHATTN_GPU_ALL_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
  }
  template <class F>
  void by_dtype(DType dtype, F&& f) const {
    if (dtype == DType::f16)
      f(Tag<__half>{});
    else
      f(Tag<__nv_bfloat16>{});
  }

  template <class T>
  void append(const AppendParams& p, int64_t batch, int heads_k, int heads_q, int64_t q_rows) const {
    if (p.new_rows > 0) emu::launch(append_kv_kernel<T>, grid(p.new_rows, heads_k, batch), kThreadsPerBlock, 0, p);
    if (p.q_rot.data) emu::launch(rotate_q_kernel<T>, grid(q_rows, heads_q, batch), kThreadsPerBlock, 0, p);
  }
  void dropout_mask(const ForwardParams& p, int64_t max_q) const {
    emu::launch(dropout_mask_kernel, rows(p, max_q), kThreadsPerBlock, 0, p);
  }
  template <int D, int DV, class T>
  void forward(const ForwardParams& p, int64_t max_q) const {
    const ForwardShape shape = forward_shape<D, DV>(forward_extras(p));
    emu::launch(forward_variant<D, DV, T>(p), grid(ceil_div(max_q, shape.br) * p.num_splits, p.heads_q, p.num_sequences),
                kThreadsPerBlock, shape.smem, p);
  }
  bool sm90() const { return sm90_; }
  template <int D, class T>
  void forward_sm90(const Sm90ForwardParams& p, int64_t max_q) const {
    using Tr = Sm90ForwardTraits<D>;
    ++sm90_forward_calls;
    emu::launch(forward_sm90_variant<D, T>(p.p),
                grid(ceil_div(max_q, Tr::kBr) * p.p.num_splits, p.p.heads_q, p.p.num_sequences), Tr::kThreads,
                Tr::kSmemBytes, p);
  }
  template <class T>
  void combine(const ForwardParams& p, int64_t max_q) const {
    emu::launch(combine_kernel<T>, rows(p, max_q), kThreadsPerBlock, 0, p);
  }
  template <class T>
  void quantized_forward(const ForwardParams& p, DType kv, int64_t max_q) const {
    emu::launch(quantized_forward_variant<T>(kv), grid(ceil_div(max_q, kRowsPerBlock) * p.num_splits, p.heads_q, p.num_sequences),
                kThreadsPerBlock, 0, p);
  }
  template <class T>
  void dot(const BackwardParams& p, int64_t max_q) const {
    emu::launch(dot_kernel<T>, rows(p, max_q), kThreadsPerBlock, 0, p);
  }
  void dsinks(const BackwardParams& p) const {
    emu::launch(dsinks_kernel, grid(p.heads_q, 1, 1), kThreadsPerBlock, kThreadsPerBlock * 8, p);
  }
  template <class T>
  void dbias(const BackwardParams& p) const {
    emu::launch(dbias_kernel<T>, grid(dbias_blocks(p), p.dbias_heads, p.dbias_batch), kThreadsPerBlock, 0, p);
  }
  template <int D, int DV, class T>
  void backward(const BackwardParams& p, int64_t max_k_rows) const {
    const BackwardShape shape = backward_shape<D, DV>(backward_extras(p));
    emu::launch(backward_variant<D, DV, T>(p), grid(ceil_div(max_k_rows, shape.bc), p.heads_k, p.num_sequences),
                shape.threads, shape.smem, p, p.dq_accum != nullptr);
  }
  template <int D, int DV, class T>
  void dq(const BackwardParams& p, int64_t max_q) const {
    using Tr = DqTraits<D, DV>;
    emu::launch(dq_variant<D, DV, T>(p), grid(ceil_div(max_q, Tr::kBr), p.heads_q, p.num_sequences), Tr::kThreads,
                Tr::kSmemBytes, p);
  }
  template <class T>
  void dq_convert(const BackwardParams& p, int64_t max_q) const {
    emu::launch(dq_convert_kernel<T>, rows(p, max_q), kThreadsPerBlock, 0, p);
  }

 private:
  // The grid of the row-wise kernels: (blocks of kRowsPerBlock query rows, query head, sequence).
  template <class P>
  static emu::Dim3 rows(const P& p, int64_t max_q) {
    return grid(ceil_div(max_q, kRowsPerBlock), p.heads_q, p.num_sequences);
  }
  bool sm90_ = false;
};

}  // namespace

std::string unsupported(DType dtype, int64_t d, int64_t dv, bool backward, bool quantized_kv) {
  if (dtype != DType::f16 && dtype != DType::bf16) return "gpu: dtype f32 is not supported";
  if (quantized_kv) {
    if (backward) return "gpu: quantized K/V are forward only";
    return d <= kQuantMaxDim && dv <= kQuantMaxDim ? "" : "gpu: head dims above 256 with quantized K/V";
  }
#define FLASHATTN_X(D, DV, DT, TYPE, BWD) \
  if (d == D && dv == DV) return BWD || !backward ? "" : "gpu: this head-dim pair has a forward kernel only";
  FLASHATTN_GPU_ALL_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
  return "gpu: head dims d = " + std::to_string(d) + ", dv = " + std::to_string(dv) + " are not supported";
}

namespace {
void forward_with(const ForwardArgs& a, bool sm90) {
  validate(a);
  const int64_t dv = a.append.used() ? a.append.v_cache.dim : a.v.dim;
  if (a.append.used() && is_quantized(a.append.k_cache.dtype)) return;  // the GPU backend rejects these
  if (is_quantized(a.k.dtype) && a.block_mask.used()) return;
  if (!unsupported(a.q.dtype, a.q.dim, dv, false, is_quantized(a.k.dtype)).empty()) return;
  EmuLauncher launcher(sm90);
  forward_sequence(launcher, a, a);
}
}  // namespace

void forward(const ForwardArgs& a) { forward_with(a, false); }
void forward_on_sm90(const ForwardArgs& a) { forward_with(a, true); }

void backward(const BackwardArgs& a, bool deterministic) {
  validate(a);
  if (!unsupported(a.q.dtype, a.q.dim, a.v.dim, true).empty()) return;
  EmuLauncher launcher;
  backward_sequence(launcher, a, extents(a), deterministic);
}

}  // namespace flashattn::gpu_emu
