// Property runner for flashattn::gpu. Registers the GPU (deterministic backward) with the property
// registry, adds the atomic-dQ backward cross-check, error-path tests and a large-size determinism
// test. Without a CUDA device it prints "no CUDA device, GPU properties skipped" and exits with
// kSkipExitCode, which tests/gpu.cmake declares as ctest's SKIP_RETURN_CODE (never a silent pass).
//
// The registry hands HOST arguments. Each wrapper validates them, copies every tensor to a device
// buffer laid out like the host view (same axis order and gaps, strides rounded up to 16-byte
// multiples, guard bytes before and after). Every byte outside the views is poisoned (0xFF: NaN in
// f16, bf16 and f32); the views hold the host's elements, for outputs the NaN the harness writes
// before each call, so the device outputs start poisoned and rows a backend must leave untouched
// keep their bits. After the GPU call the wrapper checks on the device copy that inputs are
// bit-identical and nothing outside the output views changed, then copies the output views back.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/convert.hpp"
#ifdef FLASHATTN_GPU_TEST_CPU
#include "flashattn/cpu.hpp"
#endif
#include "flashattn/error.hpp"
#include "flashattn/gpu.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"
#include "props/buffers.hpp"
#include "props/case.hpp"
#include "props/check.hpp"
#include "props/crosscheck.hpp"
#include "props/inference.hpp"
#include "props/registry.hpp"
#include "tolerance/judge.hpp"

namespace {

using flashattn::BackwardArgs;
using flashattn::DType;
using flashattn::ForwardArgs;
using flashattn::Tensor;

constexpr int kSkipExitCode = 77;         // ctest SKIP_RETURN_CODE of the GPU runner
constexpr unsigned char kPoison = 0xFF;   // all-ones: NaN in every supported dtype
constexpr size_t kGuardBytes = 256;       // poisoned bytes before and after every device buffer
constexpr int64_t kAlignElems16 = 8;      // 16-bit elements per 16 bytes

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

using props::gpu_layout;
using props::span_elems;

// One device buffer with guards, the bytes expected in it and which bytes belong to the view.
class DeviceBuffer {
 public:
  DeviceBuffer(const std::string& name, size_t payload) : name_(name) {
    image_.assign(payload + 2 * kGuardBytes, kPoison);
    in_view_.assign(image_.size(), 0);
    cuda_ok(cudaMalloc(&base_, image_.size()), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  unsigned char* device() const { return static_cast<unsigned char*>(base_) + kGuardBytes; }
  // Sets payload bytes [offset, offset + n) to src and marks them as view bytes.
  void place(size_t offset, const void* src, size_t n) {
    std::memcpy(&image_[kGuardBytes + offset], src, n);
    std::fill_n(&in_view_[kGuardBytes + offset], n, 1);
  }
  void upload() { cuda_ok(cudaMemcpy(base_, image_.data(), image_.size(), cudaMemcpyHostToDevice), "upload"); }
  // Downloads the buffer; throws if a byte outside the view changed, or (for inputs) any byte.
  void download(bool output) {
    std::vector<unsigned char> got(image_.size());
    cuda_ok(cudaMemcpy(got.data(), base_, got.size(), cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != image_[i] && (!output || !in_view_[i]))
        throw std::runtime_error("gpu wrote " + std::string(output ? "outside the view of " : "into input ") + name_ +
                                 " at byte " + std::to_string(static_cast<int64_t>(i) - static_cast<int64_t>(kGuardBytes)) +
                                 " of its device buffer");
    image_ = std::move(got);
  }
  // Returns payload bytes [offset, offset + n) as downloaded.
  const unsigned char* payload(size_t offset) const { return &image_[kGuardBytes + offset]; }

 private:
  std::string name_;
  void* base_ = nullptr;
  std::vector<unsigned char> image_, in_view_;
};

// A host tensor view mirrored on the device.
struct DeviceTensor {
  flashattn::ConstTensor host;  // the caller's buffer (written back by finish(true) for outputs)
  Tensor dev;
  std::unique_ptr<DeviceBuffer> buffer;

  // Copies the view elements of h into a new device buffer.
  DeviceTensor(const std::string& name, const flashattn::ConstTensor& h) : host(h), dev(gpu_layout(h)) {
    const size_t es = flashattn::dtype_size(h.dtype);
    buffer = std::make_unique<DeviceBuffer>(name, static_cast<size_t>(span_elems(dev)) * es);
    for_rows([&](const unsigned char* hrow, size_t drow) { buffer->place(drow, hrow, h.dim * es); });
    buffer->upload();
    dev.data = span_elems(dev) > 0 ? buffer->device() : nullptr;
  }
  // Downloads and checks the buffer; for outputs copies the view back into the host view.
  void finish(bool output) {
    buffer->download(output);
    if (!output) return;
    const size_t es = flashattn::dtype_size(host.dtype);
    for_rows([&](const unsigned char* hrow, size_t drow) {
      std::memcpy(const_cast<unsigned char*>(hrow), buffer->payload(drow), host.dim * es);
    });
  }

 private:
  // Calls f(host row pointer, device byte offset of the row) for every (batch, seq, head) row.
  template <class F>
  void for_rows(F&& f) {
    const size_t es = flashattn::dtype_size(host.dtype);
    const auto* hbase = static_cast<const unsigned char*>(host.data);
    for (int64_t b = 0; b < host.batch; ++b)
      for (int64_t s = 0; s < host.seq; ++s)
        for (int64_t hd = 0; hd < host.heads; ++hd)
          f(hbase + host.offset(b, s, hd) * es, static_cast<size_t>(dev.offset(b, s, hd)) * es);
  }
};

// A small contiguous host array mirrored on the device (lse, cu_seqlens, seqlens_k, slopes).
template <class T>
struct DeviceArray {
  const T* host = nullptr;
  size_t count = 0;
  std::unique_ptr<DeviceBuffer> buffer;

  DeviceArray(const std::string& name, const T* h, size_t n) : host(h), count(n) {
    if (!h) return;
    buffer = std::make_unique<DeviceBuffer>(name, n * sizeof(T));
    buffer->place(0, h, n * sizeof(T));
    buffer->upload();
  }
  T* dev() const { return buffer ? reinterpret_cast<T*>(buffer->device()) : nullptr; }
  void finish(bool output) {
    if (!buffer) return;
    buffer->download(output);
    if (output) std::memcpy(const_cast<T*>(host), buffer->payload(0), count * sizeof(T));
  }
};

// The small arrays of a call, on the device (and the block mask's lists and element bits);
// key_columns: flashattn::key_columns of the call (its bits rows span that many keys).
struct DeviceArrays {
  DeviceArray<int32_t> cu_q, cu_k, seqlens_k, block_table;
  DeviceArray<float> alibi, sinks;
  DeviceArray<int32_t> full_count, full_index, partial_count, partial_index;
  DeviceArray<uint8_t> bits;
  DeviceArrays(const flashattn::AttentionArgs& a, int64_t key_columns)
      : cu_q("cu_seqlens_q", a.cu_seqlens_q, a.cu_seqlens_q ? a.varlen_batch + 1 : 0),
        cu_k("cu_seqlens_k", a.cu_seqlens_k, a.cu_seqlens_k ? a.varlen_batch + 1 : 0),
        seqlens_k("seqlens_k", a.seqlens_k, a.seqlens_k ? flashattn::num_sequences(a) : 0),
        block_table("block_table", a.block_table, block_table_count(a)),
        alibi("alibi_slopes", a.alibi_slopes, alibi_count(a)),
        sinks("sinks", a.sinks, a.sinks ? static_cast<size_t>(a.q.heads) : 0),
        full_count("block_mask.full_count", list_source(a.block_mask.full_count, lists(a)), lists(a)),
        full_index("block_mask.full_index", list_source(a.block_mask.full_index, entries(a)), entries(a)),
        partial_count("block_mask.partial_count", list_source(a.block_mask.partial_count, lists(a)), lists(a)),
        partial_index("block_mask.partial_index", list_source(a.block_mask.partial_index, entries(a)), entries(a)),
        bits("block_mask.bits", a.block_mask.bits.data, bits_bytes(a.block_mask.bits, key_columns)) {}
  void point(flashattn::AttentionArgs& d) const {
    d.block_mask.full_count = full_count.dev();
    d.block_mask.full_index = full_index.dev();
    d.block_mask.partial_count = partial_count.dev();
    d.block_mask.partial_index = partial_index.dev();
    d.block_mask.bits.data = bits.dev();
    d.cu_seqlens_q = cu_q.dev();
    d.cu_seqlens_k = cu_k.dev();
    d.seqlens_k = seqlens_k.dev();
    d.block_table = block_table.dev();
    d.alibi_slopes = alibi.dev();
    d.sinks = sinks.dev();
  }
  void finish() {
    cu_q.finish(false);
    cu_k.finish(false);
    seqlens_k.finish(false);
    block_table.finish(false);
    alibi.finish(false);
    sinks.finish(false);
    for (DeviceArray<int32_t>* l : {&full_count, &full_index, &partial_count, &partial_index}) l->finish(false);
    bits.finish(false);
  }
  // Block-mask list sizes of a validated call: lists and index entries (lists x max_blocks).
  static size_t lists(const flashattn::AttentionArgs& a) {
    const flashattn::BlockMask& m = a.block_mask;
    return static_cast<size_t>(m.batch * m.heads * m.q_blocks);
  }
  static size_t entries(const flashattn::AttentionArgs& a) {
    return lists(a) * static_cast<size_t>(a.block_mask.max_blocks);
  }
  // Returns the host array of n list elements, or one zero element to stand for an array of none
  // (a set pointer must stay set on the device); null stays null.
  static const int32_t* list_source(const int32_t* host, size_t n) {
    static const int32_t kNone[1] = {0};
    return host && n == 0 ? kNone : host;
  }
  // Returns the bytes the element bits span (flashattn::BitMask: rows of ⌈keys / 8⌉ bytes).
  static size_t bits_bytes(const flashattn::BitMask& b, int64_t keys) {
    if (!b.data) return 0;
    int64_t n = (keys + 7) / 8;
    if (b.batch > 1) n += (b.batch - 1) * b.stride_batch;
    if (b.seq > 1) n += (b.seq - 1) * b.stride_seq;
    if (b.heads > 1) n += (b.heads - 1) * b.stride_head;
    return static_cast<size_t>(n);
  }
  static size_t block_table_count(const flashattn::AttentionArgs& a) {
    if (!a.block_table || a.q.batch == 0) return 0;
    const int64_t stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
    return static_cast<size_t>((a.q.batch - 1) * stride + a.block_table_pages);
  }
  static size_t alibi_count(const flashattn::AttentionArgs& a) {
    if (!a.alibi_slopes) return 0;
    const int64_t n = flashattn::num_sequences(a);
    if (a.alibi_batch_stride == 0) return static_cast<size_t>(a.q.heads);
    return n > 0 ? static_cast<size_t>((n - 1) * a.alibi_batch_stride + a.q.heads) : 0;
  }
};

size_t lse_entries(const flashattn::AttentionArgs& a) { return static_cast<size_t>(flashattn::lse_count(a)); }

void gpu_forward(const ForwardArgs& a) {
  flashattn::validate(a);  // host arrays: the device copy below assumes a valid call
  const flashattn::KvAppend& ap = a.append;
  DeviceTensor q("q", a.q), k("k", a.k), v("v", a.v), out("out", a.out), kc("append.k_cache", ap.k_cache),
      vc("append.v_cache", ap.v_cache), kn("append.k_new", ap.k_new), vn("append.v_new", ap.v_new);
  const size_t rotary = static_cast<size_t>(ap.rotary_positions * (ap.rotary_dim / 2));
  DeviceArray<float> lse("lse", a.lse, lse_entries(a)), cos("append.rotary_cos", ap.rotary_cos, rotary),
      sin("append.rotary_sin", ap.rotary_sin, rotary);
  DeviceTensor bias("bias", a.bias);
  DeviceArray<uint8_t> mask("dropout_mask", a.dropout_mask,
                            a.dropout_mask ? lse_entries(a) * static_cast<size_t>(flashattn::dropout_mask_row_bytes(a)) : 0);
  DeviceArrays arrays(a, flashattn::key_columns(a));
  ForwardArgs d = a;
  d.q = q.dev, d.k = k.dev, d.v = v.dev, d.out = out.dev, d.lse = lse.dev(), d.dropout_mask = mask.dev();
  if (flashattn::has_bias(a)) d.bias = bias.dev;
  d.append.k_cache = kc.dev, d.append.v_cache = vc.dev, d.append.k_new = kn.dev, d.append.v_new = vn.dev;
  d.append.rotary_cos = cos.dev(), d.append.rotary_sin = sin.dev();
  arrays.point(d);
  flashattn::gpu::forward(d);
  cuda_ok(cudaDeviceSynchronize(), "forward");
  q.finish(false), k.finish(false), v.finish(false), kn.finish(false), vn.finish(false), arrays.finish();
  cos.finish(false), sin.finish(false), bias.finish(false);
  out.finish(true), lse.finish(true), kc.finish(true), vc.finish(true), mask.finish(true);
}

void gpu_backward(const BackwardArgs& a, bool deterministic) {
  flashattn::validate(a);
  DeviceTensor q("q", a.q), k("k", a.k), v("v", a.v), out("out", a.out), dout("dout", a.dout), dq("dq", a.dq),
      dk("dk", a.dk), dv("dv", a.dv), bias("bias", a.bias), dbias("dbias", a.dbias);
  DeviceArray<float> lse("lse", a.lse, lse_entries(a)),
      dsinks("dsinks", a.dsinks, a.dsinks ? static_cast<size_t>(a.q.heads) : 0);
  DeviceArrays arrays(a, flashattn::key_columns(a));
  BackwardArgs d = a;
  d.q = q.dev, d.k = k.dev, d.v = v.dev, d.out = out.dev, d.dout = dout.dev, d.lse = lse.dev();
  d.dq = dq.dev, d.dk = dk.dev, d.dv = dv.dev, d.dsinks = dsinks.dev();
  if (flashattn::has_bias(a)) d.bias = bias.dev;
  if (flashattn::view_set(a.dbias)) d.dbias = dbias.dev;
  arrays.point(d);
  flashattn::gpu::backward(d, nullptr, deterministic);
  cuda_ok(cudaDeviceSynchronize(), "backward");
  q.finish(false), k.finish(false), v.finish(false), out.finish(false), dout.finish(false), lse.finish(false);
  bias.finish(false), arrays.finish();
  dq.finish(true), dk.finish(true), dv.finish(true), dsinks.finish(true), dbias.finish(true);
}

std::string gpu_unsupported(const props::Case& c) { return flashattn::gpu::unsupported_reason(c.dtype, c.dim); }

props::Implementation gpu_implementation(bool deterministic) {
  return {deterministic ? "gpu" : "gpu-atomic-dq", gpu_forward,
          [deterministic](const BackwardArgs& a) { gpu_backward(a, deterministic); }, gpu_unsupported};
}

// ---- Device-side helpers for the direct tests below ---------------------------------------------

// A device buffer of n 16-bit elements filled with pseudo-random values of dtype t in [-1, 1).
// n 16-bit values of dtype t drawn uniformly from [-1, 1) by a xorshift stream of `seed`.
std::vector<uint16_t> random16(size_t n, DType t, uint64_t seed) {
  std::vector<uint16_t> h(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& e : h) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const float f = static_cast<float>(x >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f;
    e = t == DType::bf16 ? flashattn::bf16_bits_from_float(f) : flashattn::f16_bits_from_float(f);
  }
  return h;
}

struct Device16 {
  uint16_t* ptr = nullptr;
  size_t n = 0;
  Device16(size_t count, DType t, uint64_t seed) : Device16(random16(count, t, seed)) {}
  // count elements whose every byte is `byte` (0xFF: NaN, so an element never written shows).
  Device16(size_t count, unsigned char byte) : n(count) {
    cuda_ok(cudaMalloc(&ptr, n * 2), "cudaMalloc");
    cuda_ok(cudaMemset(ptr, byte, n * 2), "cudaMemset");
  }
  explicit Device16(const std::vector<uint16_t>& h) : n(h.size()) {
    cuda_ok(cudaMalloc(&ptr, n * 2), "cudaMalloc");
    cuda_ok(cudaMemcpy(ptr, h.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~Device16() { cudaFree(ptr); }
  Device16(const Device16&) = delete;
  Device16& operator=(const Device16&) = delete;
  std::vector<uint16_t> read() const {
    std::vector<uint16_t> h(n);
    cuda_ok(cudaMemcpy(h.data(), ptr, n * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }
};

}  // namespace

TEST_CASE("gpu atomic-dQ backward agrees with the fp64 oracle") {
  const props::Implementation impl = gpu_implementation(false);
  props::check(impl.name + "/backward", [&impl] {
    const props::Case c = *props::gen_case();
    const std::string why = impl.unsupported(c);
    if (!why.empty()) RC_DISCARD(why);
    const std::string e = props::crosscheck_backward(impl, c);
    if (!e.empty()) RC_FAIL(e);
  });
}

TEST_CASE("gpu inference forward: paged, append + rotary, sinks, dv, num_splits agree with the oracle") {
  props::check("gpu/inference-forward", [] {
    const props::InferenceSpec s = *props::gen_inference(-1, props::InferenceDims::gpu);
    props::InferenceProblem p(s);
    const std::string failure = props::check_inference_forward(p, gpu_forward);
    if (!failure.empty()) RC_FAIL(failure + " | " + s.describe());
  });
}

TEST_CASE("gpu inference backward: sinks (dsinks) and dv != d agree with the oracle") {
  props::check("gpu/inference-backward", [] {
    props::InferenceSpec s = *props::gen_inference(0, props::InferenceDims::gpu);
    RC_PRE(flashattn::gpu::unsupported_reason(s.dtype, s.dim, s.dim_v, true).empty());
    s.page_size = 0;  // the backward takes contiguous k, v
    s.share_prefix = false;
    props::InferenceProblem p(s);
    const props::InferenceBackward b(p);
    for (const bool deterministic : {true, false}) {
      gpu_backward(b.args(), deterministic);
      const std::string failure = b.judge();
      if (!failure.empty())
        RC_FAIL(std::string(deterministic ? "deterministic: " : "atomic dQ: ") + failure + " | " + s.describe());
    }
  });
}

TEST_CASE("gpu rejects unsupported calls with a clear error before writing") {
  const int64_t B = 1, N = 64, H = 2, d = 64;
  Device16 q(B * N * H * d, DType::bf16, 1), k(B * N * H * d, DType::bf16, 2), v(B * N * H * d, DType::bf16, 3),
      out(B * N * H * d, DType::bf16, 4);
  const std::vector<uint16_t> before = out.read();
  ForwardArgs a;
  a.q = flashattn::bshd(q.ptr, DType::bf16, B, N, H, d);
  a.k = flashattn::bshd(k.ptr, DType::bf16, B, N, H, d);
  a.v = flashattn::bshd(v.ptr, DType::bf16, B, N, H, d);
  a.out = flashattn::bshd(out.ptr, DType::bf16, B, N, H, d);
  auto message = [](const ForwardArgs& x) -> std::string {
    try {
      flashattn::gpu::forward(x);
    } catch (const flashattn::Error& e) {
      return e.what();
    }
    return "";
  };
  ForwardArgs f32 = a;  // half the rows, so the 4-byte views stay inside the 2-byte buffers
  f32.q = flashattn::bshd(q.ptr, DType::f32, B, N / 2, H, d);
  f32.k = flashattn::bshd(k.ptr, DType::f32, B, N / 2, H, d);
  f32.v = flashattn::bshd(v.ptr, DType::f32, B, N / 2, H, d);
  f32.out = flashattn::bshd(out.ptr, DType::f32, B, N / 2, H, d);
  CHECK(message(f32).find("dtype f32 is not supported") != std::string::npos);
  ForwardArgs dim40 = a;  // a valid view of the same buffers with 40-element rows
  dim40.q.dim = dim40.k.dim = dim40.v.dim = dim40.out.dim = 40;
  CHECK(message(dim40).find("head dim 40 is not supported") != std::string::npos);
  ForwardArgs misaligned = a;  // rows 2 bytes apart from 16-byte alignment
  misaligned.q.seq = misaligned.k.seq = misaligned.v.seq = misaligned.out.seq = N / 2;
  misaligned.q.stride_seq = misaligned.k.stride_seq = misaligned.v.stride_seq = misaligned.out.stride_seq = H * d + 1;
  CHECK(message(misaligned).find("stride_seq (129) must be a multiple of 8") != std::string::npos);
  std::vector<uint16_t> host_q(B * N * H * d);
  ForwardArgs host = a;
  host.q.data = host_q.data();
  CHECK(message(host).find("host memory") != std::string::npos);
  // Every small array the kernels read is checked to be device memory, each by name, before any
  // is read; value head dims the kernels lack are named with the pairs that exist.
  const float host_floats[2] = {0.5f, 0.25f};
  const int32_t host_table[1] = {0};
  auto host_memory = [](const std::string& m, const char* name) {
    return m.find(std::string(name) + " (") != std::string::npos && m.find("ordinary host memory") != std::string::npos;
  };
  ForwardArgs sinks = a;
  sinks.sinks = host_floats;
  CHECK(host_memory(message(sinks), "sinks"));
  ForwardArgs slopes = a;
  slopes.alibi_slopes = host_floats;
  CHECK(host_memory(message(slopes), "alibi_slopes"));
  ForwardArgs paged = a;
  paged.block_table = host_table;
  paged.block_table_pages = 1;
  CHECK(host_memory(message(paged), "block_table"));
  ForwardArgs dv32 = a;  // a valid view with 32-element value rows
  dv32.v.dim = dv32.out.dim = 32;
  CHECK(message(dv32).find("head dims d = 64, dv = 32 is not supported") != std::string::npos);
  CHECK(out.read() == before);
}

TEST_CASE("gpu deterministic backward is bitwise repeatable at a large size") {
  // GQA, causal, seqlen_q != seqlen_k, d = 128, bf16: many key blocks add into each dQ row.
  const int64_t B = 2, Nq = 1000, Nk = 1500, Hk = 2, Hq = 8, d = 128;
  const DType t = DType::bf16;
  Device16 q(B * Nq * Hq * d, t, 11), k(B * Nk * Hk * d, t, 12), v(B * Nk * Hk * d, t, 13), out(B * Nq * Hq * d, t, 14),
      dout(B * Nq * Hq * d, t, 15), dq(B * Nq * Hq * d, t, 16), dk(B * Nk * Hk * d, t, 17), dv(B * Nk * Hk * d, t, 18);
  float* lse = nullptr;
  cuda_ok(cudaMalloc(&lse, sizeof(float) * B * Hq * Nq), "cudaMalloc");
  ForwardArgs f;
  f.q = flashattn::bshd(q.ptr, t, B, Nq, Hq, d);
  f.k = flashattn::bshd(k.ptr, t, B, Nk, Hk, d);
  f.v = flashattn::bshd(v.ptr, t, B, Nk, Hk, d);
  f.out = flashattn::bshd(out.ptr, t, B, Nq, Hq, d);
  f.lse = lse;
  f.causal = true;
  BackwardArgs a = flashattn::backward_args(f);
  a.dout = flashattn::bshd(dout.ptr, t, B, Nq, Hq, d);
  a.dq = flashattn::bshd(dq.ptr, t, B, Nq, Hq, d);
  a.dk = flashattn::bshd(dk.ptr, t, B, Nk, Hk, d);
  a.dv = flashattn::bshd(dv.ptr, t, B, Nk, Hk, d);
  flashattn::gpu::forward(f);
  std::vector<uint16_t> ref_dq, ref_dk, ref_dv;
  constexpr int kRepeats = 5;
  for (int r = 0; r < kRepeats; ++r) {
    cuda_ok(cudaMemset(dq.ptr, 0xFF, dq.n * 2), "poison"), cuda_ok(cudaMemset(dk.ptr, 0xFF, dk.n * 2), "poison");
    cuda_ok(cudaMemset(dv.ptr, 0xFF, dv.n * 2), "poison");
    flashattn::gpu::backward(a, nullptr, true);
    cuda_ok(cudaDeviceSynchronize(), "backward");
    if (r == 0) {
      ref_dq = dq.read(), ref_dk = dk.read(), ref_dv = dv.read();
      continue;
    }
    CHECK(dq.read() == ref_dq);
    CHECK(dk.read() == ref_dk);
    CHECK(dv.read() == ref_dv);
  }
  // The atomic mode computes the same function: dK, dV bitwise, dQ within a few bf16 roundings.
  flashattn::gpu::backward(a, nullptr, false);
  cuda_ok(cudaDeviceSynchronize(), "backward");
  CHECK(dk.read() == ref_dk);
  CHECK(dv.read() == ref_dv);
  const std::vector<uint16_t> atomic_dq = dq.read();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < atomic_dq.size(); ++i) {
    const double x = flashattn::float_from_bf16_bits(atomic_dq[i]), y = flashattn::float_from_bf16_bits(ref_dq[i]);
    worst = std::max(worst, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  CHECK(worst <= 4 * flashattn::unit_roundoff(t) * scale);
  cudaFree(lse);
}

#ifdef FLASHATTN_GPU_TEST_CPU
namespace {

// One large problem run on the CPU backend (host) and the GPU (device) with the same inputs.
struct LargeCase {
  const char* name;
  DType dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_k, dim;
  bool causal;
  int64_t window_left, window_right;
  float softcap;
  bool alibi;
};

// Returns max|x - y| / max|y| over two 16-bit buffers of dtype t (inf if a value is not finite).
// Largest |x - y| over two LSE arrays: equal entries (matching infinities of empty rows included)
// count 0; a NaN on either side (an entry never written holds the NaN poison) or an infinity on
// one side only makes it +inf.
double lse_max_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;
    const double e = std::abs(static_cast<double>(x[i]) - y[i]);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  return err;
}

double relative_max_error(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, DType t) {
  auto f = [t](uint16_t b) {
    return static_cast<double>(t == DType::bf16 ? flashattn::float_from_bf16_bits(b) : flashattn::float_from_f16_bits(b));
  };
  double err = 0, mag = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = f(x[i]), b = f(y[i]);
    if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
    err = std::max(err, std::abs(a - b));
    mag = std::max(mag, std::abs(b));
  }
  return mag > 0 ? err / mag : err;
}

}  // namespace

// Sizes the fp64 oracle is too slow for: a gross-error check of the GPU against the CPU backend
// (both already cross-checked against the oracle with the tolerance rule at small sizes). Errors of
// indexing, tiling or grid bounds at large sizes are O(1) relative; the bound is 16 units of
// rounding of the dtype relative to the largest magnitude.
TEST_CASE("gpu agrees with the cpu backend at sizes the oracle is slow for") {
  const LargeCase cases[] = {
      {"bf16 d128 causal GQA", DType::bf16, 2, 1536, 2048, 8, 2, 128, true, -1, -1, 0, false},
      {"f16 d64 window+alibi+softcap", DType::f16, 1, 2048, 2048, 4, 4, 64, false, 300, 40, 30.0f, true},
      {"bf16 d256 seqlen_q 1", DType::bf16, 3, 1, 3000, 4, 1, 256, true, -1, -1, 0, false},
  };
  for (const LargeCase& c : cases) {
    INFO(c.name);
    const DType t = c.dtype;
    const int64_t nq = c.batch * c.seqlen_q * c.heads_q * c.dim, nk = c.batch * c.seqlen_k * c.heads_k * c.dim;
    Device16 q(nq, t, 21), k(nk, t, 22), v(nk, t, 23), dout(nq, t, 24), out(nq, t, 25), dq(nq, t, 26), dk(nk, t, 27),
        dv(nk, t, 28);
    std::vector<uint16_t> hq = q.read(), hk = k.read(), hv = v.read(), hdout = dout.read();
    std::vector<uint16_t> hout(nq), hdq(nq), hdk(nk), hdv(nk);
    const int64_t nlse = c.batch * c.heads_q * c.seqlen_q;
    std::vector<float> hlse(nlse), slopes(c.heads_q);
    for (int64_t h = 0; h < c.heads_q; ++h) slopes[h] = std::exp2(-8.0f * static_cast<float>(h + 1) / c.heads_q);
    float *dlse = nullptr, *dslopes = nullptr;
    cuda_ok(cudaMalloc(&dlse, sizeof(float) * nlse), "cudaMalloc");
    cuda_ok(cudaMalloc(&dslopes, sizeof(float) * c.heads_q), "cudaMalloc");
    cuda_ok(cudaMemcpy(dslopes, slopes.data(), sizeof(float) * c.heads_q, cudaMemcpyHostToDevice), "cudaMemcpy");

    auto args = [&](void* pq, void* pk, void* pv, void* po, float* plse, void* pdo, void* pdq, void* pdk, void* pdv,
                    const float* pslopes) {
      ForwardArgs f;
      f.q = flashattn::bshd(pq, t, c.batch, c.seqlen_q, c.heads_q, c.dim);
      f.k = flashattn::bshd(pk, t, c.batch, c.seqlen_k, c.heads_k, c.dim);
      f.v = flashattn::bshd(pv, t, c.batch, c.seqlen_k, c.heads_k, c.dim);
      f.out = flashattn::bshd(po, t, c.batch, c.seqlen_q, c.heads_q, c.dim);
      f.lse = plse;
      f.causal = c.causal;
      f.window_left = c.window_left, f.window_right = c.window_right;
      f.softcap = c.softcap;
      f.alibi_slopes = c.alibi ? pslopes : nullptr;
      BackwardArgs a = flashattn::backward_args(f);
      a.dout = flashattn::bshd(pdo, t, c.batch, c.seqlen_q, c.heads_q, c.dim);
      a.dq = flashattn::bshd(pdq, t, c.batch, c.seqlen_q, c.heads_q, c.dim);
      a.dk = flashattn::bshd(pdk, t, c.batch, c.seqlen_k, c.heads_k, c.dim);
      a.dv = flashattn::bshd(pdv, t, c.batch, c.seqlen_k, c.heads_k, c.dim);
      return std::make_pair(f, a);
    };
    const auto [host_f, host] = args(hq.data(), hk.data(), hv.data(), hout.data(), hlse.data(), hdout.data(),
                                     hdq.data(), hdk.data(), hdv.data(), slopes.data());
    const auto [dev_f, dev] = args(q.ptr, k.ptr, v.ptr, out.ptr, dlse, dout.ptr, dq.ptr, dk.ptr, dv.ptr, dslopes);
    const double bound = 16 * flashattn::unit_roundoff(t);

    flashattn::cpu::forward(host_f);
    flashattn::gpu::forward(dev_f);
    cuda_ok(cudaDeviceSynchronize(), "forward");
    CHECK(relative_max_error(out.read(), hout, t) <= bound);
    std::vector<float> glse(nlse);
    cuda_ok(cudaMemcpy(glse.data(), dlse, sizeof(float) * nlse, cudaMemcpyDeviceToHost), "cudaMemcpy");
    CHECK(lse_max_error(glse, hlse) <= 1e-3);

    // Backward from the CPU's out and lse on both sides (the same function of the same inputs).
    cuda_ok(cudaMemcpy(out.ptr, hout.data(), 2 * nq, cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_ok(cudaMemcpy(dlse, hlse.data(), sizeof(float) * nlse, cudaMemcpyHostToDevice), "cudaMemcpy");
    flashattn::cpu::backward(host);
    for (bool deterministic : {true, false}) {
      INFO("deterministic = " << deterministic);
      flashattn::gpu::backward(dev, nullptr, deterministic);
      cuda_ok(cudaDeviceSynchronize(), "backward");
      CHECK(relative_max_error(dq.read(), hdq, t) <= bound);
      CHECK(relative_max_error(dk.read(), hdk, t) <= bound);
      CHECK(relative_max_error(dv.read(), hdv, t) <= bound);
    }
    cudaFree(dlse);
    cudaFree(dslopes);
  }
}

// More than 2^31 elements: q, out, dout and dq of 2·(2^24 + 32)·2·32 = 2^31 + 4096 bf16
// elements each (4 GiB apiece), so element offsets past 2^31 and byte offsets past 2^32 are used by
// every kernel of the forward and the (atomic-dQ) backward. Runs only with FLASHATTN_HUGE=1
// (scripts/gpu-check sets it; ~25 GiB of device memory, ~30 GiB of host memory). Checked: every
// element of out, lse, dq, dk, dv against the CPU backend given the same inputs (the GPU's out and
// lse for the backward), 16 units of bf16 rounding relative to the largest magnitude; and out, lse
// and dq of 64 rows per sequence, spread up to the last row, against the fp64 oracle with the
// tolerance rule, through a strided view of the same host buffers (no mask: a row's results do not
// depend on the other rows). Outputs start as NaN on the device, so an element never written fails.
namespace {
bool huge_enabled() {
  const char* e = std::getenv("FLASHATTN_HUGE");
  return e != nullptr && std::string(e) == "1";
}
}  // namespace

TEST_CASE("gpu computes tensors of more than 2^31 elements (FLASHATTN_HUGE=1)" * doctest::skip(!huge_enabled())) {
  constexpr int64_t B = 2, Nq = (int64_t{1} << 24) + 32, Hq = 2, Hk = 1, d = 32, Nk = 64, kSamples = 64;
  constexpr DType t = DType::bf16;
  const size_t nq = static_cast<size_t>(B * Nq * Hq * d), nk = static_cast<size_t>(B * Nk * Hk * d),
               nlse = static_cast<size_t>(B * Hq * Nq);
  REQUIRE(nq > (size_t{1} << 31));
  size_t free_bytes = 0, total_bytes = 0;
  cuda_ok(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const size_t device_need = 4 * nq * 2 + nq * 4 + 2 * nlse * 4;  // q out dout dq, fp32 dQ, lse and D
  INFO("device memory: needs about " << device_need / (1 << 20) << " MiB, " << free_bytes / (1 << 20) << " MiB free");
  REQUIRE(free_bytes > device_need + device_need / 8);

  const std::vector<uint16_t> hq = random16(nq, t, 1), hk = random16(nk, t, 2), hv = random16(nk, t, 3),
                              hdout = random16(nq, t, 4);
  Device16 q(hq), k(hk), v(hv), dout(hdout), out(nq, kPoison), dq(nq, kPoison), dk(nk, kPoison), dv(nk, kPoison);
  float* dlse = nullptr;
  cuda_ok(cudaMalloc(&dlse, sizeof(float) * nlse), "cudaMalloc");
  cuda_ok(cudaMemset(dlse, kPoison, sizeof(float) * nlse), "cudaMemset");
  auto args = [&](const void* pq, const void* pk, const void* pv, void* po, float* plse, const void* pdo, void* pdq,
                  void* pdk, void* pdv) {
    ForwardArgs f;
    f.q = flashattn::bshd(pq, t, B, Nq, Hq, d);
    f.k = flashattn::bshd(pk, t, B, Nk, Hk, d);
    f.v = flashattn::bshd(pv, t, B, Nk, Hk, d);
    f.out = flashattn::bshd(po, t, B, Nq, Hq, d);
    f.lse = plse;
    BackwardArgs a = flashattn::backward_args(f);
    a.dout = flashattn::bshd(pdo, t, B, Nq, Hq, d);
    a.dq = flashattn::bshd(pdq, t, B, Nq, Hq, d);
    a.dk = flashattn::bshd(pdk, t, B, Nk, Hk, d);
    a.dv = flashattn::bshd(pdv, t, B, Nk, Hk, d);
    return std::make_pair(f, a);
  };
  const auto [dev_f, dev] = args(q.ptr, k.ptr, v.ptr, out.ptr, dlse, dout.ptr, dq.ptr, dk.ptr, dv.ptr);
  flashattn::gpu::forward(dev_f);
  cuda_ok(cudaDeviceSynchronize(), "forward");
  flashattn::gpu::backward(dev);
  cuda_ok(cudaDeviceSynchronize(), "backward");
  std::vector<uint16_t> gout = out.read(), gdq = dq.read();
  std::vector<float> glse(nlse);
  cuda_ok(cudaMemcpy(glse.data(), dlse, sizeof(float) * nlse, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(dlse);

  // The CPU backend on the same inputs: its forward, then its backward from the GPU's out and lse.
  const double bound = 16 * flashattn::unit_roundoff(t);
  {
    std::vector<uint16_t> cout(nq);
    std::vector<float> clse(nlse);
    const auto [cpu_f, unused] = args(hq.data(), hk.data(), hv.data(), cout.data(), clse.data(), nullptr, nullptr,
                                      nullptr, nullptr);
    flashattn::cpu::forward(cpu_f);
    CHECK(relative_max_error(gout, cout, t) <= bound);
    CHECK(lse_max_error(glse, clse) <= 1e-3);  // NaN (never written) fails too
  }
  std::vector<uint16_t> cdq(nq), cdk(nk), cdv(nk);
  const auto [host_f, host] = args(hq.data(), hk.data(), hv.data(), gout.data(), glse.data(), hdout.data(),
                                   cdq.data(), cdk.data(), cdv.data());
  flashattn::cpu::backward(host);
  CHECK(relative_max_error(gdq, cdq, t) <= bound);
  CHECK(relative_max_error(dk.read(), cdk, t) <= bound);
  CHECK(relative_max_error(dv.read(), cdv, t) <= bound);

  // The oracle on sampled rows: rows first + r·step of every sequence (the last one included), as a
  // strided view of the host buffers holding the GPU's results; lse copied (it must be contiguous).
  const int64_t first = 3, step = (Nq - 1 - first) / (kSamples - 1);
  auto sample = [&](auto view) {
    using Element = std::conditional_t<std::is_same_v<decltype(view), flashattn::ConstTensor>, const uint16_t, uint16_t>;
    view.data = static_cast<Element*>(view.data) + first * view.stride_seq;
    view.seq = kSamples;
    view.stride_seq *= step;
    return view;
  };
  std::vector<float> slse(static_cast<size_t>(B * Hq * kSamples));
  for (int64_t bh = 0; bh < B * Hq; ++bh)
    for (int64_t r = 0; r < kSamples; ++r) slse[static_cast<size_t>(bh * kSamples + r)] = glse[static_cast<size_t>(bh * Nq + first + r * step)];
  BackwardArgs s = host;
  flashattn::Tensor gpu_dq = host.dq;  // the GPU's dq in the CPU's layout
  gpu_dq.data = gdq.data();
  s.q = sample(host.q), s.dout = sample(host.dout), s.out = sample(host.out), s.dq = sample(gpu_dq);
  s.lse = slse.data();
  std::vector<uint16_t> sdk(nk), sdv(nk);  // a sub-problem's dk, dv differ from the whole call's: not judged
  s.dk = flashattn::bshd(sdk.data(), t, B, Nk, Hk, d);
  s.dv = flashattn::bshd(sdv.data(), t, B, Nk, Hk, d);
  ForwardArgs sf;
  static_cast<flashattn::AttentionArgs&>(sf) = s;
  sf.out = sample(host_f.out);
  sf.lse = slse.data();
  const flashattn::tolerance::Judgement fwd = flashattn::tolerance::judge_forward(sf), bwd = flashattn::tolerance::judge_backward(s);
  for (const char* o : {"out", "lse"}) {
    INFO(o);
    CHECK(fwd.find(o)->message() == "");
  }
  CHECK(bwd.find("dq")->message() == "");
}
#endif  // FLASHATTN_GPU_TEST_CPU

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("no CUDA device, GPU properties skipped (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return kSkipExitCode;
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("GPU properties on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  props::add(gpu_implementation(true));
  return props::run(argc, argv);
}
