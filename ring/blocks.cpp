// Element-wise helpers of the ring (blocks.hpp).
#include "blocks.hpp"

#include <cstring>

#include "flashattn/convert.hpp"

namespace flashattn::ring::detail {
namespace {

// Calls f(src element index, dst element index, dim) for every row (b, s, h) of the shape of src,
// rows spread over `threads` OpenMP threads (each element is written once: any count gives the
// same bits).
template <class F>
void for_rows(const ConstTensor& src, const ConstTensor& dst, int threads, F f) {
  const int64_t rows = src.batch * src.seq;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && rows * src.heads * src.dim > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / src.seq, s = r % src.seq;
    for (int64_t h = 0; h < src.heads; ++h) f(src.offset(b, s, h), dst.offset(b, s, h), src.dim);
  }
}

}  // namespace

Tensor rows(const Tensor& t, int64_t start, int64_t count) {
  Tensor r = t;
  r.data = static_cast<unsigned char*>(t.data) + start * t.stride_seq * static_cast<int64_t>(dtype_size(t.dtype));
  r.seq = count;
  return r;
}

ConstTensor rows(const ConstTensor& t, int64_t start, int64_t count) {
  ConstTensor r = t;
  r.data = static_cast<const unsigned char*>(t.data) + start * t.stride_seq * static_cast<int64_t>(dtype_size(t.dtype));
  r.seq = count;
  return r;
}

void copy(const ConstTensor& src, const Tensor& dst, int threads) {
  const size_t es = dtype_size(src.dtype);
  for_rows(src, dst, threads, [&](int64_t i, int64_t o, int64_t n) {
    std::memcpy(static_cast<unsigned char*>(dst.data) + o * es, static_cast<const unsigned char*>(src.data) + i * es, n * es);
  });
}

void convert(const ConstTensor& src, const Tensor& dst, int threads) {
  for_rows(src, dst, threads, [&](int64_t i, int64_t o, int64_t n) {
    for (int64_t x = 0; x < n; ++x) store_from_float(dst.data, dst.dtype, o + x, load_as_float(src.data, src.dtype, i + x));
  });
}

void accumulate(const ConstTensor& src, const Tensor& acc, int threads) {
  float* a = static_cast<float*>(acc.data);
  for_rows(src, acc, threads, [&](int64_t i, int64_t o, int64_t n) {
    for (int64_t x = 0; x < n; ++x) a[o + x] += load_as_float(src.data, src.dtype, i + x);
  });
}

void zero(const Tensor& t, int threads) {
  float* a = static_cast<float*>(t.data);
  for_rows(t, t, threads, [&](int64_t, int64_t o, int64_t n) { std::memset(a + o, 0, sizeof(float) * n); });
}

Dense::Dense(DType t, int64_t batch, int64_t seq, int64_t heads, int64_t dim)
    : bytes(dense_bytes(t, batch, seq, heads, dim)), view(bshd(bytes.data(), t, batch, seq, heads, dim)) {}

}  // namespace flashattn::ring::detail
