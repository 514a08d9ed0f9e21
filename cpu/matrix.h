// Operand views of the tile products (gemm-inl.h): a matrix carries its shape and row stride, and
// an operand read transposed says so with Transposed(), instead of a call swapping two strides.
// Plain types (no SIMD): included by gemm-inl.h and by the kernels that build the views.
#pragma once

#include <cstdint>
#include <type_traits>

namespace flashattn::cpu::detail {

// A row-major matrix: element (r, c) at data[r·stride + c], r < rows, c < cols (stride in elements).
template <typename T>
struct Matrix {
  T* data = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;

  // A writable matrix is readable: Matrix<float> converts to ConstMatrix.
  template <typename U = T, typename = std::enable_if_t<!std::is_const_v<U>>>
  operator Matrix<const U>() const {  // NOLINT(google-explicit-constructor)
    return {data, rows, cols, stride};
  }
};

using ConstMatrix = Matrix<const float>;

// An operand read as the transpose of `of`: element (r, c) is of(c, r). Made by Transposed().
template <typename T>
struct TransposedOf {
  Matrix<const T> of;
};
using TransposedMatrix = TransposedOf<float>;

// Returns m read transposed ([m.cols x m.rows]), e.g. Vᵀ from the V rows in place.
inline TransposedMatrix Transposed(const ConstMatrix& m) { return {m}; }

// Rows of bf16 pairs (bf16_dot.h): each uint32 holds two bf16 values of the reduction dimension.
using PairMatrix = Matrix<const uint32_t>;
inline TransposedOf<uint32_t> Transposed(const PairMatrix& m) { return {m}; }

// Whether a product adds to its output or overwrites it.
enum class Accumulate : bool { no, yes };

// The left operand of a product, A in C (+)= A·B: read one element at a time (broadcast), so it may
// be a row-major matrix or a transposed one; element (a, b) at data[a·row_step + b·col_step]. Built
// implicitly from either, so a call states the orientation and never the strides.
template <typename T>
struct BroadcastOperand {
  const T* data;
  int64_t rows, cols;
  int64_t row_step, col_step;

  BroadcastOperand(const Matrix<const T>& m)  // NOLINT(google-explicit-constructor): the point of the type
      : data(m.data), rows(m.rows), cols(m.cols), row_step(m.stride), col_step(1) {}
  BroadcastOperand(const TransposedOf<T>& t)  // NOLINT(google-explicit-constructor)
      : data(t.of.data), rows(t.of.cols), cols(t.of.rows), row_step(1), col_step(t.of.stride) {}
};
using ScalarOperand = BroadcastOperand<float>;  // fp32 tile products (gemm-inl.h)
using PairOperand = BroadcastOperand<uint32_t>;  // bf16-pair tile products (bf16_dot.h)

}  // namespace flashattn::cpu::detail
