// Element-wise helpers over strided [B, N, H, D] views: row slices, packing a shard for the wire,
// and the fp32 accumulators of the ring (widen, add, round back); `threads` OpenMP threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashattn/types.hpp"

namespace flashattn::ring::detail {

// Returns rows [start, start + count) of t (same batch, heads, dim, strides).
Tensor rows(const Tensor& t, int64_t start, int64_t count);
ConstTensor rows(const ConstTensor& t, int64_t start, int64_t count);

// Returns the bytes of a contiguous [batch, seq, heads, dim] tensor of dtype t.
inline size_t dense_bytes(DType t, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return static_cast<size_t>(batch * seq * heads * dim) * dtype_size(t);
}

// Copies src into dst (same shape and dtype, any strides).
void copy(const ConstTensor& src, const Tensor& dst, int threads = 1);

// dst = src converted to dst's dtype (fp32 widening exactly; fp32 to 16 bits rounding to nearest even).
void convert(const ConstTensor& src, const Tensor& dst, int threads = 1);

// acc += src, acc fp32, src of any dtype (widened exactly).
void accumulate(const ConstTensor& src, const Tensor& acc, int threads = 1);

// Sets every element of the fp32 view to 0.
void zero(const Tensor& t, int threads = 1);

// A fp32 or 16-bit contiguous buffer with a bshd view of it.
struct Dense {
  std::vector<unsigned char> bytes;
  Tensor view;
  Dense() = default;
  Dense(DType t, int64_t batch, int64_t seq, int64_t heads, int64_t dim);
  Dense(const Dense&) = delete;  // the view points into bytes
  Dense& operator=(const Dense&) = delete;
  Dense(Dense&&) = default;
  Dense& operator=(Dense&&) = default;
};

}  // namespace flashattn::ring::detail
