// Padding for dv != d and the backward's dsinks (see options.h).
#include "options.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/problem.hpp"

namespace flashattn::cpu::detail {

PaddedCopy scratch_like(const ConstTensor& t, int64_t dim) {
  PaddedCopy r;
  r.bytes.assign(static_cast<size_t>(t.batch * t.seq * t.heads * dim) * dtype_size(t.dtype), 0);
  r.view = bshd(static_cast<void*>(r.bytes.data()), t.dtype, t.batch, t.seq, t.heads, dim);
  return r;
}

PaddedCopy pad_columns(const ConstTensor& t, int64_t dim) {
  PaddedCopy r = scratch_like(t, dim);  // zero-filled
  const size_t es = dtype_size(t.dtype);
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        std::memcpy(static_cast<unsigned char*>(r.view.data) + r.view.offset(b, s, h) * es,
                    static_cast<const unsigned char*>(t.data) + t.offset(b, s, h) * es, static_cast<size_t>(t.dim) * es);
  return r;
}

void copy_columns(const ConstTensor& src, const Tensor& dst) {
  const size_t es = dtype_size(dst.dtype);
  for (int64_t b = 0; b < dst.batch; ++b)
    for (int64_t s = 0; s < dst.seq; ++s)
      for (int64_t h = 0; h < dst.heads; ++h)
        std::memcpy(static_cast<unsigned char*>(dst.data) + dst.offset(b, s, h) * es,
                    static_cast<const unsigned char*>(src.data) + src.offset(b, s, h) * es, static_cast<size_t>(dst.dim) * es);
}

void sink_gradients(const BackwardArgs& a) {
  if (!a.dsinks) return;
  std::vector<double> sums(static_cast<size_t>(a.q.heads), 0.0);
  add_sink_gradients(a, sums.data());
  for (int64_t h = 0; h < a.q.heads; ++h) a.dsinks[h] = static_cast<float>(sums[h]);
}

}  // namespace flashattn::cpu::detail
