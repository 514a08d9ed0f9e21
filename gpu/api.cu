// flashattn::gpu entry points: validation on a host copy of the arguments and the GPU-specific
// checks, then the call sequence (sequence.hpp) with the CUDA launcher: scratch from the
// stream-ordered allocator and the runtime → compile-time dispatch over the compiled variants.
#include "flashattn/gpu.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "check.hpp"
#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"
#include "host_params.hpp"
#include "launch.hpp"
#include "sequence.hpp"
#include "variants.inc"

namespace flashattn::gpu {
namespace detail {
namespace {

constexpr int64_t kMaxGridYZ = 65535;   // CUDA's limit on gridDim.y and gridDim.z
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;  // and on gridDim.x
constexpr int64_t kVectorAlign = 16;    // bytes: cp.async moves 16-byte row chunks
constexpr int64_t kMaxSeqIndex = int64_t{1} << 31;

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  os << "gpu: ";
  (os << ... << parts);
  throw Error(os.str());
}

// Returns whether the (d, dv) pair has a variant in the table (has_backward: with a backward) /
// was compiled into this build.
bool pair_supported(int64_t d, int64_t dv, bool backward) {
#define FLASHATTN_X(D, DV, DT, TYPE, BWD) \
  if (d == D && dv == DV && (BWD || !backward)) return true;
  FLASHATTN_GPU_ALL_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
  return false;
}
bool pair_compiled(int64_t d, int64_t dv) {
#define FLASHATTN_X(D, DV, DT, TYPE, BWD) \
  if (d == D && dv == DV) return true;
  FLASHATTN_GPU_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
  return false;
}

// Calls f(integral_constant<D>, integral_constant<DV>, Tag<T>) for the compiled variant matching
// (d, dv, dtype); with `backward`, only variants that have one (f is not instantiated for the
// others). The caller has checked unsupported_reason() first.
template <bool kBackward, class F>
void dispatch(int64_t d, int64_t dv, DType dtype, F&& f) {
#define FLASHATTN_X(D, DV, DT, TYPE, BWD)                                                            \
  if constexpr (BWD || !kBackward) {                                                                 \
    if (d == D && dv == DV && dtype == DType::DT) {                                                  \
      f(std::integral_constant<int, D>{}, std::integral_constant<int, DV>{}, Tag<TYPE>{});           \
      return;                                                                                        \
    }                                                                                                \
  }
  FLASHATTN_GPU_VARIANTS(FLASHATTN_X)
#undef FLASHATTN_X
  fail("no compiled variant for head dims ", d, "/", dv, " and dtype ", dtype_name(dtype));
}

// Calls f(Tag<T>) for dtype (f16 or bf16).
template <class F>
void by_dtype(DType dtype, F&& f) {
  if (dtype == DType::f16)
    f(Tag<__half>{});
  else
    f(Tag<__nv_bfloat16>{});
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
  std::vector<int32_t> cu_q, cu_k, seqlens_k, block_table;
  std::vector<int32_t> full_count, full_index, partial_count, partial_index;  // block-mask lists
  std::vector<float> alibi, sinks;
};

// Copies the block-mask lists of `a` (counts and indices, device) to `h` and points host.block_mask
// at them, so validate() checks every entry before a kernel runs. The lists are copied only while
// their geometry is sane (else validate() fails on the fields and reads no entry). The element
// bits stay on the device: validate() checks their sizes, strides and extent and overlaps from
// the fields and the pointer alone and never reads a bit, so the device pointer is its stand-in
// (no O(N²/8) copy).
void copy_block_mask(const AttentionArgs& a, AttentionArgs& host, HostArrays& h, int64_t nseq, cudaStream_t stream) {
  const BlockMask& m = a.block_mask;
  if (!m.used()) return;
  check_device_pointer(m.full_count, "block_mask.full_count");
  check_device_pointer(m.full_index, "block_mask.full_index");
  check_device_pointer(m.partial_count, "block_mask.partial_count");
  check_device_pointer(m.partial_index, "block_mask.partial_index");
  check_device_pointer(m.bits.data, "block_mask.bits.data");
  const bool sane = (m.batch == 1 || m.batch == nseq) && (m.heads == 1 || m.heads == a.q.heads) && m.q_blocks >= 0 &&
                    m.q_blocks < kMaxSeqIndex && m.max_blocks >= 0 && m.max_blocks < kMaxSeqIndex;
  if (!sane) return;
  int64_t lists = 0, entries = 0;
  if (__builtin_mul_overflow(m.batch, m.heads, &lists) || __builtin_mul_overflow(lists, m.q_blocks, &lists) ||
      __builtin_mul_overflow(lists, m.max_blocks, &entries) || entries > (int64_t{1} << 61))
    return;  // validate() reports the overflow
  static const int32_t kNoEntry = 0;  // a non-null stand-in for an array of 0 entries (none is read)
  auto copy = [&](const int32_t* src, int64_t n, std::vector<int32_t>& dst, const int32_t*& field) {
    dst = host_copy(src, n, stream);
    if (src) field = dst.empty() ? &kNoEntry : dst.data();
  };
  copy(m.full_count, lists, h.full_count, host.block_mask.full_count);
  copy(m.full_index, entries, h.full_index, host.block_mask.full_index);
  copy(m.partial_count, lists, h.partial_count, host.block_mask.partial_count);
  copy(m.partial_index, entries, h.partial_index, host.block_mask.partial_index);
}

// Copies the device arrays of `a` to `h` and points `host` at them.
void copy_arrays(const AttentionArgs& a, AttentionArgs& host, HostArrays& h, cudaStream_t stream) {
  if (a.cu_seqlens_q && (a.varlen_batch < 0 || a.varlen_batch >= kMaxSeqIndex))
    throw Error("varlen_batch (" + std::to_string(a.varlen_batch) + ") must be in [0, 2^31)");
  const int64_t nseq = a.cu_seqlens_q ? a.varlen_batch : std::max<int64_t>(a.q.batch, 0);
  check_device_pointer(a.cu_seqlens_q, "cu_seqlens_q");
  check_device_pointer(a.cu_seqlens_k, "cu_seqlens_k");
  check_device_pointer(a.seqlens_k, "seqlens_k");
  check_device_pointer(a.alibi_slopes, "alibi_slopes");
  check_device_pointer(a.sinks, "sinks");
  check_device_pointer(a.block_table, "block_table");
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
  h.sinks = host_copy(a.sinks, a.q.heads, stream);
  if (a.block_table && a.block_table_pages >= 0 && a.block_table_pages < kMaxSeqIndex && a.block_table_stride >= 0 &&
      a.block_table_stride < kMaxSeqIndex) {  // else validate() fails on the fields before reading entries
    const int64_t stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
    h.block_table = host_copy(a.block_table, nseq > 0 ? (nseq - 1) * stride + a.block_table_pages : 0, stream);
    if (!h.block_table.empty()) host.block_table = h.block_table.data();  // else validate reads no entry
  }
  host.sinks = a.sinks ? h.sinks.data() : nullptr;
  host.cu_seqlens_q = a.cu_seqlens_q ? h.cu_q.data() : nullptr;
  host.cu_seqlens_k = a.cu_seqlens_k ? h.cu_k.data() : nullptr;
  host.seqlens_k = a.seqlens_k ? h.seqlens_k.data() : nullptr;
  host.alibi_slopes = a.alibi_slopes ? h.alibi.data() : nullptr;
  copy_block_mask(a, host, h, nseq, stream);
}

// GPU-specific layout requirement of one tensor: 16-byte aligned rows (needs no device).
void check_gpu_layout(const ConstTensor& t, const char* name) {
  if (t.data == nullptr || is_quantized(t.dtype)) return;  // the quantized kernel reads bytes: any layout
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
void check_gpu(const AttentionArgs& a, int64_t dv, bool backward, const float* lse, int64_t nseq,
               std::initializer_list<NamedTensor> tensors) {
  bool quantized = false;  // k and v, or an append's caches
  for (const NamedTensor& t : tensors) quantized = quantized || is_quantized(t.tensor.dtype);
  const std::string why = unsupported_reason(a.q.dtype, a.q.dim, dv, backward, quantized);
  if (!why.empty()) throw Error(why);
  if (a.q.heads > kMaxGridYZ) fail("q.heads (", a.q.heads, ") exceeds the CUDA grid limit ", kMaxGridYZ);
  if (nseq > kMaxGridYZ) fail("the number of sequences (", nseq, ") exceeds the CUDA grid limit ", kMaxGridYZ);
  for (const NamedTensor& t : tensors) check_gpu_layout(t.tensor, t.name);
  for (const NamedTensor& t : tensors) check_device_pointer(t.tensor.data, t.name);
  check_device_pointer(lse, "lse");
  check_device_pointer(a.bias.data, "bias");  // read per element: no alignment beyond its dtype's
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
  void* bytes() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// The CUDA launcher of the call sequence (sequence.hpp): kernels on `stream`, scratch from the
// stream-ordered allocator, each launch through the per-variant launchers (launch.hpp).
class CudaLauncher {
 public:
  using Buffer = DeviceBuffer;
  explicit CudaLauncher(cudaStream_t stream) : stream_(stream) {}

  Buffer buffer(size_t bytes, const char* /*name*/) const { return Buffer(bytes, stream_); }
  template <class E>
  const E* upload(Buffer& b, const std::vector<E>& values) const {
    check_cuda(cudaMemcpyAsync(b.bytes(), values.data(), sizeof(E) * values.size(), cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync (host values for the kernels)");
    return static_cast<const E*>(b.bytes());
  }
  void zero(float* p, size_t count) const {
    check_cuda(cudaMemsetAsync(p, 0, sizeof(float) * count, stream_), "cudaMemsetAsync (dq_accum)");
  }
  void check_backward(const BackwardParams& p) const {
    if (dbias_blocks(p) > kMaxGridX) fail("dbias needs ", dbias_blocks(p), " blocks, above the CUDA grid limit ", kMaxGridX);
  }
  template <bool kBackward, class F>
  void dispatch(int64_t d, int64_t dv, DType dtype, F&& f) const {
    detail::dispatch<kBackward>(d, dv, dtype, f);
  }
  template <class F>
  void by_dtype(DType dtype, F&& f) const {
    detail::by_dtype(dtype, f);
  }

  template <class T>
  void append(const AppendParams& p, int64_t batch, int heads_k, int heads_q, int64_t q_rows) const {
    launch_append<T>(p, batch, heads_k, heads_q, q_rows, stream_);
  }
  void dropout_mask(const ForwardParams& p, int64_t max_q) const { launch_dropout_mask(p, max_q, stream_); }
  template <int D, int DV, class T>
  void forward(const ForwardParams& p, int64_t max_q) const {
    launch_forward<D, DV, T>(p, max_q, stream_);
  }
  // The sm_90a kernels run on an sm_90 device when FLASHATTN_GPU_SM90=1 (opt-in until a GPU run has
  // verified them; docs/gpu.md, "sm_90a forward").
  bool sm90() const {
    const char* opt = std::getenv("FLASHATTN_GPU_SM90");
    if (!opt || std::string(opt) != "1") return false;
    int device = 0, major = 0, minor = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
    return major == 9 && minor == 0;
  }
  template <int D, class T>
  void forward_sm90(const Sm90ForwardParams& p, int64_t max_q) const {
    launch_forward_sm90<D, T>(p, max_q, stream_);
  }
  template <class T>
  void combine(const ForwardParams& p, int64_t max_q) const {
    launch_combine<T>(p, max_q, stream_);
  }
  template <class T>
  void quantized_forward(const ForwardParams& p, DType kv, int64_t max_q) const {
    launch_quantized_forward<T>(p, kv, max_q, stream_);
  }
  template <class T>
  void dot(const BackwardParams& p, int64_t max_q) const {
    launch_dot<T>(p, max_q, stream_);
  }
  void dsinks(const BackwardParams& p) const { launch_dsinks(p, stream_); }
  template <class T>
  void dbias(const BackwardParams& p) const {
    launch_dbias<T>(p, stream_);
  }
  template <int D, int DV, class T>
  void backward(const BackwardParams& p, int64_t max_k_rows) const {
    launch_backward<D, DV, T>(p, max_k_rows, stream_);
  }
  template <int D, int DV, class T>
  void dq(const BackwardParams& p, int64_t max_q) const {
    launch_dq<D, DV, T>(p, max_q, stream_);
  }
  template <class T>
  void dq_convert(const BackwardParams& p, int64_t max_q) const {
    launch_dq_convert<T>(p, max_q, stream_);
  }

 private:
  cudaStream_t stream_;
};

}  // namespace
}  // namespace detail

std::string unsupported_reason(DType dtype, int64_t head_dim, int64_t head_dim_v, bool backward, bool quantized_kv) {
  if (dtype == DType::f32)
    return "gpu: dtype f32 is not supported (the GPU backend computes f16 and bf16 inputs with fp32 "
           "accumulation; use flashattn::cpu or flashattn::reference for f32)";
  if (dtype != DType::f16 && dtype != DType::bf16) return "gpu: dtype " + std::to_string(int(dtype)) + " is not a DType";
  const int64_t dv = head_dim_v == 0 ? head_dim : head_dim_v;
  const std::string dims = dv == head_dim ? "head dim " + std::to_string(head_dim)
                                          : "head dims d = " + std::to_string(head_dim) + ", dv = " + std::to_string(dv);
  if (quantized_kv) {  // the quantized forward kernel: any head dims up to kQuantMaxDim
    if (backward) return "gpu: quantized K/V are forward only";
    if (head_dim > detail::kQuantMaxDim || dv > detail::kQuantMaxDim)
      return "gpu: " + dims + " is not supported with quantized K/V (at most " + std::to_string(detail::kQuantMaxDim) + ")";
    return "";
  }
  if (!detail::pair_supported(head_dim, dv, false))
    return "gpu: " + dims + " is not supported (supported: " + FLASHATTN_GPU_SUPPORTED_HEAD_DIMS + ")";
  if (backward && !detail::pair_supported(head_dim, dv, true))
    return "gpu: " + dims + " has a forward kernel only (no backward; use flashattn::cpu)";
  if (!detail::pair_compiled(head_dim, dv))
    return "gpu: " + dims + " was not compiled into this build (FLASHATTN_GPU_HEAD_DIMS = " +
           FLASHATTN_GPU_COMPILED_HEAD_DIMS + ")";
  return "";
}

void forward(const ForwardArgs& a, cudaStream_t stream) {
  using namespace detail;
  ForwardArgs host = a;
  HostArrays arrays;
  copy_arrays(a, host, arrays, stream);
  validate(host);
  const KvAppend& ap = a.append;
  const bool append = ap.used();
  const int64_t nseq = num_sequences(host);
  check_gpu(a, append ? ap.v_cache.dim : a.v.dim, false, a.lse, nseq,
            {{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.out, "out"}, {ap.k_cache, "append.k_cache"},
             {ap.v_cache, "append.v_cache"}, {ap.k_new, "append.k_new"}, {ap.v_new, "append.v_new"}});
  check_device_pointer(a.dropout_mask, "dropout_mask");
  check_device_pointer(ap.rotary_cos, "append.rotary_cos");
  check_device_pointer(ap.rotary_sin, "append.rotary_sin");
  if (append && is_quantized(ap.k_cache.dtype))
    fail("gpu: an append into quantized caches (append.k_cache.dtype ", dtype_name(ap.k_cache.dtype),
         ") is not supported by the GPU backend yet (flashattn::cpu and flashattn::reference take it; or append, "
         "then call without append)");
  if (is_quantized(a.k.dtype) && a.block_mask.used())
    fail("gpu: a block-sparse mask with quantized K/V is not supported by the GPU backend yet (flashattn::cpu and "
         "flashattn::reference take it)");
  check_device_pointer(a.kv_scales.k, "kv_scales.k");
  check_device_pointer(a.kv_scales.v, "kv_scales.v");

  CudaLauncher launcher(stream);
  forward_sequence(launcher, a, host);
}

size_t backward_workspace_bytes(const BackwardArgs& a, bool deterministic) {
  using namespace detail;
  return sizeof(float) * (2 * dot_count(a) + (deterministic ? 0 : dq_accum_count(a)));
}

void backward(const BackwardArgs& a, cudaStream_t stream, bool deterministic) {
  using namespace detail;
  BackwardArgs host = a;
  HostArrays arrays;
  copy_arrays(a, host, arrays, stream);
  validate(host);
  const Extents e = extents(host);
  check_gpu(a, a.v.dim, true, a.lse, e.nseq,
            {{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.out, "out"}, {a.dout, "dout"}, {a.dq, "dq"}, {a.dk, "dk"},
             {a.dv, "dv"}});
  check_device_pointer(a.dsinks, "dsinks");
  check_device_pointer(a.dbias.data, "dbias");
  CudaLauncher launcher(stream);
  backward_sequence(launcher, a, e, deterministic);
}

}  // namespace flashattn::gpu
