// The KV-cache append pre-step shared by every host backend (see flashattn/append.hpp).
#include "flashattn/append.hpp"

#include <algorithm>
#include <cmath>

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

namespace {

// Returns the `dim` elements at src + src_off (dtype t) widened to fp32, the first ap.rotary_dim of
// them rotated at `position` and rounded to `round`.
std::vector<float> rotated_row(const KvAppend& ap, int64_t position, const void* src, int64_t src_off, int64_t dim,
                               DType t, DType round) {
  std::vector<float> x(static_cast<size_t>(dim));
  for (int64_t e = 0; e < dim; ++e) x[e] = load_as_float(src, t, src_off + e);
  if (!ap.rotary_cos) return x;
  const int64_t half = ap.rotary_dim / 2;
  const float* cs = ap.rotary_cos + position * half;
  const float* sn = ap.rotary_sin + position * half;
  std::vector<float> y(x);
  for (int64_t r = 0; r < half; ++r) {
    const int64_t i0 = ap.rotary_interleaved ? 2 * r : r;
    const int64_t i1 = ap.rotary_interleaved ? 2 * r + 1 : r + half;
    y[i0] = rotary_first(x[i0], x[i1], cs[r], sn[r], round);
    y[i1] = rotary_second(x[i0], x[i1], cs[r], sn[r], round);
  }
  return y;
}

// Returns a (row, head)'s scale at token granularity: the largest finite magnitude over the format's
// largest value, or 1 when that is 0.
float token_scale(const std::vector<float>& x, DType t) {
  float amax = 0;
  for (const float e : x)
    if (std::isfinite(e)) amax = std::max(amax, std::fabs(e));
  const float s = amax / quantized_max(t);
  return s > 0 ? s : 1.0f;
}

// Writes x / scale as codes of quantized dtype t at dst + dst_off.
void store_quantized(const std::vector<float>& x, float scale, void* dst, int64_t dst_off, DType t) {
  uint8_t* out = static_cast<uint8_t*>(dst) + dst_off;
  for (size_t e = 0; e < x.size(); ++e) out[e] = quantize_bits(t, x[e] / scale);
}

// Writes the fp32 row x (of head h, at cache row `at`) into a cache: rounded to its dtype, or for a
// quantized cache as codes under the row's scale (the given one, or at token granularity computed
// from x and written to `token_scales`).
void store_new_row(const std::vector<float>& x, const Tensor& cache, const KeyRow& at, int64_t h,
                   const ForwardArgs& plain, const float* given, float* token_scales) {
  const int64_t off = cache.offset(at.batch, at.row, h);
  if (!is_quantized(cache.dtype)) {
    for (size_t e = 0; e < x.size(); ++e) store_from_float(cache.data, cache.dtype, off + int64_t(e), x[e]);
    return;
  }
  float s;
  if (token_scales) {
    s = token_scale(x, cache.dtype);
    token_scales[kv_scale_index(ScaleGranularity::token, cache.seq, cache.heads, at.batch, at.row, h)] = s;
  } else {
    s = kv_scale(plain, given, at.batch, at.row, h);
  }
  store_quantized(x, s, cache.data, off, cache.dtype);
}

}  // namespace

void rotate_row(const KvAppend& ap, int64_t position, const void* src, int64_t src_off, void* dst, int64_t dst_off,
                int64_t dim, DType t) {
  const std::vector<float> x = rotated_row(ap, position, src, src_off, dim, t, t);
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
  if (a.append.k_scales) r.kv_scales.k = a.append.k_scales;
  if (a.append.v_scales) r.kv_scales.v = a.append.v_scales;
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
  // 2. write the new rows: k rotated, v as given. Located as the plain call over the caches does. A
  // quantized cache takes the rotation in fp32, then codes (docs/semantics.md, "Appending to a
  // quantized cache").
  const DType kround = is_quantized(ap.k_cache.dtype) ? DType::f32 : a.q.dtype;
  const KvAppend plain;  // values are never rotated
  for (int64_t b = 0; b < B; ++b) {
    const Sequence seq = sequence(r.args, b);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = int64_t{a.seqlens_k[b]} + t;
      const KeyRow at = key_row(r.args, seq, pos);
      for (int64_t h = 0; h < heads; ++h) {
        store_new_row(rotated_row(ap, pos, ap.k_new.data, ap.k_new.offset(b, t, h), ap.k_new.dim, a.q.dtype, kround),
                      ap.k_cache, at, h, r.args, r.args.kv_scales.k, ap.k_scales);
        store_new_row(rotated_row(plain, pos, ap.v_new.data, ap.v_new.offset(b, t, h), ap.v_new.dim, a.q.dtype, a.q.dtype),
                      ap.v_cache, at, h, r.args, r.args.kv_scales.v, ap.v_scales);
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
