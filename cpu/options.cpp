// Padding for dv != d and the backward's dsinks (see options.h).
#include "options.h"

#include <cmath>
#include <cstring>

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
  for (int64_t h = 0; h < a.q.heads; ++h) {
    double sum = 0;
    for (int64_t s = 0; s < num_sequences(a); ++s) {
      const Sequence seq = sequence(a, s);
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
        const double lse = a.lse[lse_index(a, seq, h, i)];
        if (std::isinf(lse)) continue;  // cannot hold with finite sinks unless overflowed: no term
        double dot = 0;
        const int64_t o = a.out.offset(seq.batch, seq.q_start + i, h), g = a.dout.offset(seq.batch, seq.q_start + i, h);
        for (int64_t x = 0; x < a.v.dim; ++x)
          dot += static_cast<double>(load_as_float(a.dout.data, a.dout.dtype, g + x)) *
                 load_as_float(a.out.data, a.out.dtype, o + x);
        sum -= std::exp(static_cast<double>(a.sinks[h]) - lse) * dot;
      }
    }
    a.dsinks[h] = static_cast<float>(sum);
  }
}

}  // namespace flashattn::cpu::detail
