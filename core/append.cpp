// The KV-cache append pre-step shared by every host backend (see flashattn/append.hpp).
#include "flashattn/append.hpp"

#include "flashattn/convert.hpp"
#include "flashattn/problem.hpp"

namespace flashattn {

float rotary_first(float x0, float x1, float c, float s, DType t) {
  const double v = static_cast<double>(x0) * c - static_cast<double>(x1) * s;
  return round_to(t, static_cast<float>(v));
}

float rotary_second(float x0, float x1, float c, float s, DType t) {
  const double v = static_cast<double>(x0) * s + static_cast<double>(x1) * c;
  return round_to(t, static_cast<float>(v));
}

void rotate_row(const KvAppend& ap, int64_t position, const void* src, int64_t src_off, void* dst, int64_t dst_off,
                int64_t dim, DType t) {
  std::vector<float> x(static_cast<size_t>(dim));
  for (int64_t e = 0; e < dim; ++e) x[e] = load_as_float(src, t, src_off + e);
  if (ap.rotary_cos) {
    const int64_t half = ap.rotary_dim / 2;
    const float* cs = ap.rotary_cos + position * half;
    const float* sn = ap.rotary_sin + position * half;
    std::vector<float> y(x);
    for (int64_t r = 0; r < half; ++r) {
      const int64_t i0 = ap.rotary_interleaved ? 2 * r : r;
      const int64_t i1 = ap.rotary_interleaved ? 2 * r + 1 : r + half;
      y[i0] = rotary_first(x[i0], x[i1], cs[r], sn[r], t);
      y[i1] = rotary_second(x[i0], x[i1], cs[r], sn[r], t);
    }
    x.swap(y);
  }
  for (int64_t e = 0; e < dim; ++e) store_from_float(dst, t, dst_off + e, x[e]);
}

std::vector<int32_t> lengths_after_append(const ForwardArgs& a) {
  std::vector<int32_t> r(a.seqlens_k, a.seqlens_k + a.q.batch);
  for (int32_t& l : r) l += static_cast<int32_t>(a.append.k_new.seq);
  return r;
}

ForwardArgs appended_call(const ForwardArgs& a, const int32_t* lengths, const void* q_rot) {
  ForwardArgs r = a;
  r.append = KvAppend{};
  r.k = a.append.k_cache;
  r.v = a.append.v_cache;
  r.seqlens_k = lengths;
  if (a.append.rotary_cos) r.q = bshd(q_rot, a.q.dtype, a.q.batch, a.q.seq, a.q.heads, a.q.dim);
  return r;
}

AppendedCall apply_append(const ForwardArgs& a) {
  AppendedCall r;
  r.args = a;
  if (!a.append.used()) return r;
  const KvAppend& ap = a.append;
  const int64_t B = a.q.batch, n = ap.k_new.seq, heads = ap.k_new.heads;
  r.seqlens_k = lengths_after_append(a);
  if (ap.rotary_cos) r.q.resize(static_cast<size_t>(B * a.q.seq * a.q.heads * a.q.dim) * dtype_size(a.q.dtype));
  r.args = appended_call(a, r.seqlens_k.data(), r.q.data());
  // 2. write the new rows: k rotated, v as given. Located as the plain call over the caches does.
  for (int64_t b = 0; b < B; ++b) {
    const Sequence seq = sequence(r.args, b);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = int64_t{a.seqlens_k[b]} + t;
      const KeyRow at = key_row(r.args, seq, pos);
      for (int64_t h = 0; h < heads; ++h) {
        rotate_row(ap, pos, ap.k_new.data, ap.k_new.offset(b, t, h), ap.k_cache.data, ap.k_cache.offset(at.batch, at.row, h),
                   ap.k_new.dim, a.q.dtype);
        KvAppend plain;  // values are never rotated
        rotate_row(plain, pos, ap.v_new.data, ap.v_new.offset(b, t, h), ap.v_cache.data,
                   ap.v_cache.offset(at.batch, at.row, h), ap.v_new.dim, a.q.dtype);
      }
    }
  }
  // 3. the plain call (r.args): keys = lengths after the append, queries rotated into scratch.
  if (ap.rotary_cos) {
    const int64_t nq = a.q.seq, hq = a.q.heads, d = a.q.dim;
    const Tensor rq = bshd(static_cast<void*>(r.q.data()), a.q.dtype, B, nq, hq, d);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t h = 0; h < hq; ++h)
          rotate_row(ap, int64_t{a.seqlens_k[b]} + i, a.q.data, a.q.offset(b, i, h), rq.data, rq.offset(b, i, h), d,
                     a.q.dtype);
  }
  return r;
}

}  // namespace flashattn
