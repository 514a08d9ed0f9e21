// flashattn::gpu entry points: validation on a host copy of the arguments, GPU-specific checks,
// parameter blocks, scratch memory and the runtime → compile-time dispatch over the variant table.
#include "flashattn/gpu.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "check.hpp"
#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"
#include "host_params.hpp"
#include "launch.hpp"
#include "variants.inc"

namespace flashattn::gpu {
namespace detail {
namespace {

constexpr int64_t kMaxGridYZ = 65535;   // CUDA's limit on gridDim.y and gridDim.z
constexpr int64_t kVectorAlign = 16;    // bytes: cp.async moves 16-byte row chunks
constexpr int64_t kMaxSeqIndex = int64_t{1} << 31;

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  os << "gpu: ";
  (os << ... << parts);
  throw Error(os.str());
}

// Returns whether head dim d is one of the table's head dims / was compiled in.
bool head_dim_compiled(int64_t d) {
#define FLASHATTN_X(D, DT, TYPE) if (d == D) return true;
  FLASHATTN_GPU_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
  return false;
}
bool head_dim_supported(int64_t d) { return d == 32 || d == 64 || d == 96 || d == 128 || d == 256; }

template <class T>
struct Tag {
  using type = T;
};

// Calls f(integral_constant<D>, Tag<T>) for the compiled variant matching (d, dtype). The caller has
// checked unsupported_reason() first.
template <class F>
void dispatch(int64_t d, DType dtype, F&& f) {
#define FLASHATTN_X(D, DT, TYPE)                           \
  if (d == D && dtype == DType::DT) {                      \
    f(std::integral_constant<int, D>{}, Tag<TYPE>{});      \
    return;                                                \
  }
  FLASHATTN_GPU_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
  fail("no compiled variant for head dim ", d, " and dtype ", dtype_name(dtype));
}

// Fails unless p is null or memory the device can read (device, managed or pinned host memory).
void check_device_pointer(const void* p, const char* name) {
  if (p == nullptr) return;
  cudaPointerAttributes attr{};
  check_cuda(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
  if (attr.type == cudaMemoryTypeUnregistered)
    fail(name, " (", p, ") is ordinary host memory; flashattn::gpu takes device (or managed) pointers");
}

// Returns a host copy of n elements of the device (or host) array src; empty when src is null.
template <class T>
std::vector<T> host_copy(const T* src, int64_t n, cudaStream_t stream) {
  std::vector<T> h;
  if (src == nullptr || n <= 0) return h;
  h.resize(static_cast<size_t>(n));
  check_cuda(cudaMemcpyAsync(h.data(), src, sizeof(T) * static_cast<size_t>(n), cudaMemcpyDefault, stream),
             "cudaMemcpyAsync (argument arrays to host)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return h;
}

// Host copies of the small device arrays of a call, and the args pointing at them.
struct HostArrays {
  std::vector<int32_t> cu_q, cu_k, seqlens_k;
  std::vector<float> alibi;
};

// Copies the device arrays of `a` to `h` and points `host` at them.
void copy_arrays(const AttentionArgs& a, AttentionArgs& host, HostArrays& h, cudaStream_t stream) {
  if (a.cu_seqlens_q && (a.varlen_batch < 0 || a.varlen_batch >= kMaxSeqIndex))
    throw Error("varlen_batch (" + std::to_string(a.varlen_batch) + ") must be in [0, 2^31)");
  const int64_t nseq = a.cu_seqlens_q ? a.varlen_batch : std::max<int64_t>(a.q.batch, 0);
  check_device_pointer(a.cu_seqlens_q, "cu_seqlens_q");
  check_device_pointer(a.cu_seqlens_k, "cu_seqlens_k");
  check_device_pointer(a.seqlens_k, "seqlens_k");
  check_device_pointer(a.alibi_slopes, "alibi_slopes");
  h.cu_q = host_copy(a.cu_seqlens_q, nseq + 1, stream);
  h.cu_k = host_copy(a.cu_seqlens_k, nseq + 1, stream);
  h.seqlens_k = host_copy(a.seqlens_k, nseq, stream);
  if (a.alibi_slopes) {
    if (a.alibi_batch_stride < 0 || (a.alibi_batch_stride != 0 && a.alibi_batch_stride < a.q.heads))
      throw Error("alibi_batch_stride (" + std::to_string(a.alibi_batch_stride) + ") must be 0 or >= q.heads (" +
                  std::to_string(a.q.heads) + ")");
    const int64_t n = a.alibi_batch_stride ? (nseq > 0 ? (nseq - 1) * a.alibi_batch_stride + a.q.heads : 0) : a.q.heads;
    h.alibi = host_copy(a.alibi_slopes, n, stream);
  }
  host.cu_seqlens_q = a.cu_seqlens_q ? h.cu_q.data() : nullptr;
  host.cu_seqlens_k = a.cu_seqlens_k ? h.cu_k.data() : nullptr;
  host.seqlens_k = a.seqlens_k ? h.seqlens_k.data() : nullptr;
  host.alibi_slopes = a.alibi_slopes ? h.alibi.data() : nullptr;
}

// GPU-specific layout requirement of one tensor: 16-byte aligned rows (needs no device).
void check_gpu_layout(const ConstTensor& t, const char* name) {
  if (t.data == nullptr) return;
  if (reinterpret_cast<uintptr_t>(t.data) % kVectorAlign != 0)
    fail(name, ".data (", t.data, ") must be 16-byte aligned (rows are copied in 16-byte chunks)");
  const int64_t per = kVectorAlign / static_cast<int64_t>(dtype_size(t.dtype));
  const std::pair<int64_t, const char*> strides[] = {
      {t.stride_batch, "stride_batch"}, {t.stride_seq, "stride_seq"}, {t.stride_head, "stride_head"}};
  for (const auto& s : strides)
    if (s.first % per != 0)
      fail(name, ".", s.second, " (", s.first, ") must be a multiple of ", per,
           " elements (16-byte aligned rows); repack the tensor or use flashattn::cpu");
}

struct NamedTensor {
  ConstTensor tensor;
  const char* name;
};

// Checks dtype, head dim, grid limits and the layout of every tensor (all without a device), then
// that every pointer is device-readable memory (asks the driver).
void check_gpu(const AttentionArgs& a, const float* lse, int64_t nseq, std::initializer_list<NamedTensor> tensors) {
  const std::string why = unsupported_reason(a.q.dtype, a.q.dim);
  if (!why.empty()) throw Error(why);
  if (a.q.heads > kMaxGridYZ) fail("q.heads (", a.q.heads, ") exceeds the CUDA grid limit ", kMaxGridYZ);
  if (nseq > kMaxGridYZ) fail("the number of sequences (", nseq, ") exceeds the CUDA grid limit ", kMaxGridYZ);
  for (const NamedTensor& t : tensors) check_gpu_layout(t.tensor, t.name);
  for (const NamedTensor& t : tensors) check_device_pointer(t.tensor.data, t.name);
  check_device_pointer(lse, "lse");
}

// Rejects the inference options of issue 12 that the GPU kernels do not implement yet, before any
// device array is read (docs/semantics.md: a backend rejects what it does not support).
void reject_inference_options(const AttentionArgs& a) {
  if (a.sinks) throw Error("gpu: sinks (attention sinks) are not supported yet; use flashattn::cpu");
  if (a.block_table) throw Error("gpu: block_table (paged K/V) is not supported yet; use flashattn::cpu");
  if (a.v.dim != a.q.dim)
    throw Error("gpu: v.dim (" + std::to_string(a.v.dim) + ") != q.dim (" + std::to_string(a.q.dim) +
                ") is not supported yet; use flashattn::cpu");
}

// Scratch memory allocated and freed in stream order.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes) check_cuda(cudaMallocAsync(&ptr_, bytes, stream), "cudaMallocAsync (scratch)");
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace
}  // namespace detail

std::string unsupported_reason(DType dtype, int64_t head_dim) {
  if (dtype == DType::f32)
    return "gpu: dtype f32 is not supported (the GPU backend computes f16 and bf16 inputs with fp32 "
           "accumulation; use flashattn::cpu or flashattn::reference for f32)";
  if (dtype != DType::f16 && dtype != DType::bf16) return "gpu: dtype " + std::to_string(int(dtype)) + " is not a DType";
  if (!detail::head_dim_supported(head_dim))
    return "gpu: head dim " + std::to_string(head_dim) + " is not supported (supported: " +
           FLASHATTN_GPU_SUPPORTED_HEAD_DIMS + ")";
  if (!detail::head_dim_compiled(head_dim))
    return "gpu: head dim " + std::to_string(head_dim) +
           " was not compiled into this build (FLASHATTN_GPU_HEAD_DIMS = " FLASHATTN_GPU_COMPILED_HEAD_DIMS ")";
  return "";
}

void forward(const ForwardArgs& a, cudaStream_t stream) {
  using namespace detail;
  reject_inference_options(a);
  if (a.append.used()) throw Error("gpu: append (KV-cache append with rotary) is not supported yet; use flashattn::cpu");
  if (a.num_splits != 0 && a.num_splits != 1)
    throw Error("gpu: num_splits (" + std::to_string(a.num_splits) + ") is not supported yet (0 or 1 only)");
  ForwardArgs host = a;
  HostArrays arrays;
  copy_arrays(a, host, arrays, stream);
  validate(host);
  const Extents e = extents(host);
  check_gpu(a, a.lse, e.nseq, {{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.out, "out"}});
  if (e.max_q == 0) return;
  ForwardParams p;
  fill(p, a, e.nseq);
  dispatch(a.q.dim, a.q.dtype, [&](auto d, auto tag) {
    launch_forward<decltype(d)::value, typename decltype(tag)::type>(p, e.max_q, stream);
  });
}

size_t backward_workspace_bytes(const BackwardArgs& a, bool deterministic) {
  using namespace detail;
  return sizeof(float) * (dot_count(a) + (deterministic ? 0 : dq_accum_count(a)));
}

void backward(const BackwardArgs& a, cudaStream_t stream, bool deterministic) {
  using namespace detail;
  reject_inference_options(a);
  if (a.dsinks) throw Error("gpu: dsinks is not supported yet; use flashattn::cpu");
  BackwardArgs host = a;
  HostArrays arrays;
  copy_arrays(a, host, arrays, stream);
  validate(host);
  const Extents e = extents(host);
  check_gpu(a, a.lse, e.nseq,
            {{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.out, "out"}, {a.dout, "dout"}, {a.dq, "dq"}, {a.dk, "dk"},
             {a.dv, "dv"}});
  if (e.max_k_rows == 0 && e.max_q == 0) return;

  BackwardParams p;
  fill(p, a, e.nseq);
  DeviceBuffer dot(sizeof(float) * dot_count(a), stream);
  DeviceBuffer dq_accum(deterministic ? 0 : sizeof(float) * dq_accum_count(a), stream);
  p.dot = dot.get();
  p.dq_accum = dq_accum.get();
  if (p.dq_accum)
    check_cuda(cudaMemsetAsync(p.dq_accum, 0, sizeof(float) * dq_accum_count(a), stream), "cudaMemsetAsync (dq_accum)");

  dispatch(a.q.dim, a.q.dtype, [&](auto d, auto tag) {
    constexpr int D = decltype(d)::value;
    using T = typename decltype(tag)::type;
    launch_dot<T>(p, e.max_q, stream);                 // D = rowsum(dO∘O)
    launch_backward<D, T>(p, e.max_k_rows, stream);    // dK, dV (and dQ_accum by atomics)
    if (deterministic)
      launch_dq<D, T>(p, e.max_q, stream);             // dQ per query block, no atomics
    else
      launch_dq_convert<T>(p, e.max_q, stream);        // dQ = round(dQ_accum)
  });
}

}  // namespace flashattn::gpu
