// Element types and strided rank-4 tensor views.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flashattn {

// Element type of q, k, v, out, dout, dq, dk, dv: f32, f16 or bf16. LSE is always fp32. K and V of
// a forward call may instead be quantized (docs/semantics.md, "Quantized K/V"): i8 (int8), e4m3 and
// e5m2 (the OCP 8-bit floats E4M3FN and E5M2), each element multiplied by a scale of
// AttentionArgs::kv_scales.
enum class DType : uint8_t { f32, f16, bf16, i8, e4m3, e5m2 };

// Returns whether t is a quantized K/V element type (i8, e4m3, e5m2).
constexpr bool is_quantized(DType t) { return t == DType::i8 || t == DType::e4m3 || t == DType::e5m2; }

// Returns the size in bytes of one element of `t`.
constexpr size_t dtype_size(DType t) { return t == DType::f32 ? 4 : is_quantized(t) ? 1 : 2; }

// Returns "f32", "f16", "bf16", "i8", "e4m3" or "e5m2" (or "invalid" for a value outside the enum).
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
  }
  return "invalid";
}

// A writable strided view of a rank-4 tensor [batch, seq, heads, dim] (outputs). Strides are in
// elements; the last dimension is contiguous (stride 1). Element (b, s, h, x) lives at
// data + (b*stride_batch + s*stride_seq + h*stride_head + x) elements.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;

  // Returns the element offset of (b, s, h, 0).
  constexpr int64_t offset(int64_t b, int64_t s, int64_t h) const {
    return b * stride_batch + s * stride_seq + h * stride_head;
  }
};

// A read-only strided view (inputs), laid out exactly like Tensor. Every Tensor converts to it, so
// a writable buffer can be passed where an input is expected, and a const buffer needs no cast.
struct ConstTensor {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;

  constexpr ConstTensor() = default;
  constexpr ConstTensor(const void* data_, DType dtype_, int64_t batch_, int64_t seq_, int64_t heads_, int64_t dim_,
                        int64_t stride_batch_, int64_t stride_seq_, int64_t stride_head_)
      : data(data_), dtype(dtype_), batch(batch_), seq(seq_), heads(heads_), dim(dim_), stride_batch(stride_batch_),
        stride_seq(stride_seq_), stride_head(stride_head_) {}
  constexpr ConstTensor(const Tensor& t)  // NOLINT(google-explicit-constructor): writable -> read-only
      : ConstTensor(t.data, t.dtype, t.batch, t.seq, t.heads, t.dim, t.stride_batch, t.stride_seq, t.stride_head) {}

  // Returns the element offset of (b, s, h, 0).
  constexpr int64_t offset(int64_t b, int64_t s, int64_t h) const {
    return b * stride_batch + s * stride_seq + h * stride_head;
  }
};

// Returns a contiguous [batch, seq, heads, dim] view (the "bshd" layout used by FlashAttention):
// writable for a non-const pointer, read-only for a const one.
constexpr Tensor bshd(void* data, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return Tensor{data, dtype, batch, seq, heads, dim, seq * heads * dim, heads * dim, dim};
}
constexpr Tensor bshd(std::nullptr_t, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return bshd(static_cast<void*>(nullptr), dtype, batch, seq, heads, dim);
}
constexpr ConstTensor bshd(const void* data, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return ConstTensor(data, dtype, batch, seq, heads, dim, seq * heads * dim, heads * dim, dim);
}

// Returns a view of a contiguous [batch, heads, seq, dim] buffer (the "bhsd" layout), indexed as
// [batch, seq, heads, dim] like every other view; writable or read-only as bshd.
constexpr Tensor bhsd(void* data, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return Tensor{data, dtype, batch, seq, heads, dim, heads * seq * dim, dim, seq * dim};
}
constexpr Tensor bhsd(std::nullptr_t, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return bhsd(static_cast<void*>(nullptr), dtype, batch, seq, heads, dim);
}
constexpr ConstTensor bhsd(const void* data, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return ConstTensor(data, dtype, batch, seq, heads, dim, heads * seq * dim, dim, seq * dim);
}

}  // namespace flashattn
