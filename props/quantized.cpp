#include "props/quantized.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "flashattn/append.hpp"
#include "flashattn/convert.hpp"
#include "props/rng.hpp"
#include "tolerance/judge.hpp"

namespace props {

using flashattn::DType;
using flashattn::ScaleGranularity;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// An 8-bit float with `ebits` exponent bits (bias 2^(ebits-1) - 1) and 7 - ebits mantissa bits;
// E4M3FN (`fn`) has no infinities and one NaN pattern per sign (all ones).
double decode_fp8(uint8_t b, int ebits, bool fn) {
  const int mbits = 7 - ebits, bias = (1 << (ebits - 1)) - 1, emax = (1 << ebits) - 1;
  const int e = (b >> mbits) & emax, m = b & ((1 << mbits) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (fn && e == emax && m == (1 << mbits) - 1) return std::numeric_limits<double>::quiet_NaN();
  if (!fn && e == emax) return m == 0 ? sign * INFINITY : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  return sign * std::ldexp(1.0 + static_cast<double>(m) / (1 << mbits), e - bias);
}

// Returns x / scale quantized to dtype t as a serving engine would (and an append does).
uint8_t quantize(DType t, float x, float scale) { return nearest_code(t, x / scale); }

// Returns the scale an append computes for a row at token granularity: the largest finite magnitude
// over the format's largest value (fp32 division), 1 when that is 0.
float row_scale(DType t, const std::vector<float>& x) {
  float amax = 0;
  for (const float e : x)
    if (std::isfinite(e)) amax = std::max(amax, std::fabs(e));
  const float s = amax / static_cast<float>(t == DType::i8 ? 127 : t == DType::e4m3 ? 448 : 57344);
  return s > 0 ? s : 1.0f;
}

// An element no call may read: a NaN pattern (int8 has none: its most negative value).
uint8_t garbage_element(DType t) { return t == DType::i8 ? 0x80 : 0x7f; }

// A scale as a quantizer picks one: the format's largest value stands for about 3-4 standard
// deviations of the data (values past it clip).
float random_scale(DType t, Rng& rng) {
  const double largest = t == DType::i8 ? 127 : t == DType::e4m3 ? 448 : 57344;
  return static_cast<float>((3.0 + rng.uniform()) / largest);
}

// A uniformly random finite code of t (fp8: magnitudes spread log-uniformly over the format's range).
uint8_t random_code(DType t, Rng& rng) {
  for (;;) {
    const auto byte = static_cast<uint8_t>(rng.below(256));
    if (t == DType::i8 ? byte != 0x80 : std::isfinite(decode_quantized(t, byte))) return byte;
  }
}

const char* granularity_name(ScaleGranularity g) {
  return g == ScaleGranularity::tensor ? "tensor" : g == ScaleGranularity::head ? "head" : "token";
}

}  // namespace

double decode_quantized(DType t, uint8_t byte) {
  if (t == DType::i8) return static_cast<int8_t>(byte);
  return t == DType::e4m3 ? decode_fp8(byte, 4, true) : decode_fp8(byte, 5, false);
}

uint8_t nearest_code(DType t, float y) {
  if (t == DType::i8)  // NaN has no code (an append rejects it): 0
    return std::isnan(y) ? 0 : static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(double{y}), -127.0, 127.0)));
  const uint8_t sign = std::signbit(y) ? 0x80 : 0, max = t == DType::e4m3 ? 0x7e : 0x7b;
  if (std::isnan(y)) return static_cast<uint8_t>(sign | (t == DType::e4m3 ? 0x7f : 0x7e));
  if (std::fabs(double{y}) >= decode_quantized(t, max)) return static_cast<uint8_t>(sign | max);
  uint8_t best = sign;
  double err = INFINITY;
  for (int m = 0; m <= max; ++m) {  // the finite patterns of y's sign
    const uint8_t b = static_cast<uint8_t>(sign | m);
    const double e = std::fabs(decode_quantized(t, b) - double{y});
    if (e < err || (e == err && (b & 1) == 0)) err = e, best = b;
  }
  return best;
}

std::string QuantizedSpec::describe() const {
  std::ostringstream s;
  s << "quantized b=" << batch << " hk=" << heads_k << " g=" << group << " nq=" << seqlen_q << " d=" << dim
    << " dv=" << dim_v << " dtype=" << flashattn::dtype_name(dtype) << " kv=" << flashattn::dtype_name(quant)
    << " scales=" << granularity_name(granularity) << " causal=" << causal << " wl=" << window_left
    << " softcap=" << softcap << " sinks=" << sinks << " page=" << page_size << " cap=" << capacity << " lengths=";
  for (size_t i = 0; i < lengths.size(); ++i) s << (i ? "," : "") << lengths[i];
  s << " splits=" << num_splits << " bias=" << bias << " dropout=" << dropout_p << " new_rows=" << new_rows
    << " raw=" << raw_codes << " seed=" << seed;
  return s.str();
}

rc::Gen<QuantizedSpec> gen_quantized() {
  return rc::gen::exec([] {
    QuantizedSpec s;
    s.batch = *rc::gen::inRange<int64_t>(1, 4);
    s.heads_k = *rc::gen::inRange<int64_t>(1, 3);
    s.group = *rc::gen::inRange<int64_t>(1, 4);
    s.seqlen_q = *rc::gen::elementOf(std::vector<int64_t>{1, 1, 2, 4, 9});
    s.dim = *rc::gen::elementOf(std::vector<int64_t>{1, 3, 8, 16, 33});
    s.dim_v = *rc::gen::elementOf(std::vector<int64_t>{s.dim, s.dim, 5, 16});
    s.dtype = *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f16, DType::bf16});
    s.quant = *rc::gen::elementOf(std::vector<DType>{DType::i8, DType::e4m3, DType::e5m2});
    s.granularity = *rc::gen::elementOf(
        std::vector<ScaleGranularity>{ScaleGranularity::tensor, ScaleGranularity::head, ScaleGranularity::token});
    s.causal = *rc::gen::arbitrary<bool>();
    s.window_left = *rc::gen::elementOf(std::vector<int64_t>{-1, -1, 0, 3, 20});
    s.softcap = *rc::gen::elementOf(std::vector<float>{0, 0, 5});
    s.sinks = *rc::gen::arbitrary<bool>();
    s.page_size = *rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 3, 16});
    int32_t longest = 0;
    for (int64_t b = 0; b < s.batch; ++b) {
      s.lengths.push_back(*rc::gen::elementOf(std::vector<int32_t>{0, 1, 5, 17, 40, 70}));
      longest = std::max(longest, s.lengths.back());
    }
    s.bias = *rc::gen::elementOf(std::vector<bool>{false, false, true});
    s.dropout_p = *rc::gen::elementOf(std::vector<float>{0, 0, 0, 0.25f});
    s.new_rows = *rc::gen::elementOf(std::vector<int64_t>{0, 0, 0, 1, 2, 5});
    s.raw_codes = *rc::gen::weightedElement<bool>({{3, false}, {1, true}});
    s.capacity = longest + s.new_rows + *rc::gen::inRange<int64_t>(0, 3);  // room past every sequence's keys
    if (s.page_size > 0) s.capacity = std::max<int64_t>(1, (s.capacity + s.page_size - 1) / s.page_size) * s.page_size;
    s.capacity = std::max<int64_t>(s.capacity, 1);
    s.num_splits = *rc::gen::inRange<int64_t>(0, 5);
    s.seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);
    return s;
  });
}

QuantizedProblem::QuantizedProblem(const QuantizedSpec& s) : spec_(s) {
  const DType t = s.dtype, qt = s.quant;
  const int64_t B = s.batch, hk = s.heads_k, hq = s.heads_q(), d = s.dim, e = s.dim_v, nq = s.seqlen_q, cap = s.capacity;
  const size_t es = flashattn::dtype_size(t);
  Rng rng(s.seed);
  q_.assign(static_cast<size_t>(B * nq * hq * d) * es, 0);
  for (int64_t i = 0; i < B * nq * hq * d; ++i) {
    flashattn::store_from_float(q_.data(), t, i, static_cast<float>(rng.normal()));
    q32_.push_back(flashattn::load_as_float(q_.data(), t, i));
  }
  for (int64_t h = 0; h < hq; ++h) sinks_.push_back(static_cast<float>(rng.normal()));
  // Where row j of sequence b lives: its batch (page) and row.
  const bool paged = s.page_size > 0;
  const int64_t ps = paged ? s.page_size : cap, per = cap / ps;
  pages_ = paged ? B * per + 2 : B;  // two pages no sequence uses
  stride_ = per + 1;
  std::vector<int32_t> order(static_cast<size_t>(pages_));
  std::iota(order.begin(), order.end(), 0);
  if (paged) {
    for (int64_t i = pages_ - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    table_.assign(static_cast<size_t>(B * stride_), -1);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < per; ++c) table_[b * stride_ + c] = order[b * per + c];
  }
  const int64_t rows = pages_ * ps;  // rows of the (pool of the) caches
  kc_.assign(static_cast<size_t>(rows * hk * d), garbage_element(qt));
  vc_.assign(static_cast<size_t>(rows * hk * e), garbage_element(qt));
  const int64_t nscales = s.granularity == ScaleGranularity::tensor ? 1
                          : s.granularity == ScaleGranularity::head ? hk
                                                                    : rows * hk;
  ks_.assign(static_cast<size_t>(nscales), kNaN);  // token scales of unread rows stay NaN
  vs_.assign(static_cast<size_t>(nscales), kNaN);
  if (s.granularity != ScaleGranularity::token)
    for (int64_t i = 0; i < nscales; ++i) ks_[i] = random_scale(qt, rng), vs_[i] = random_scale(qt, rng);
  k32_.assign(static_cast<size_t>(B * cap * hk * d), kNaN);
  v32_.assign(static_cast<size_t>(B * cap * hk * e), kNaN);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < s.lengths[b]; ++j) {
      const int64_t row = paged ? int64_t{table_[b * stride_ + j / ps]} * ps + j % ps : b * cap + j;
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t si = s.granularity == ScaleGranularity::tensor ? 0
                           : s.granularity == ScaleGranularity::head ? h
                                                                     : row * hk + h;
        if (s.granularity == ScaleGranularity::token) ks_[si] = random_scale(qt, rng), vs_[si] = random_scale(qt, rng);
        const int64_t plain = (b * cap + j) * hk + h;
        for (int64_t x = 0; x < d; ++x) {
          const uint8_t byte = s.raw_codes ? random_code(qt, rng) : quantize(qt, static_cast<float>(rng.normal()), ks_[si]);
          kc_[(row * hk + h) * d + x] = byte;
          k32_[plain * d + x] = static_cast<float>(decode_quantized(qt, byte)) * ks_[si];
        }
        for (int64_t x = 0; x < e; ++x) {
          const uint8_t byte = s.raw_codes ? random_code(qt, rng) : quantize(qt, static_cast<float>(rng.normal()), vs_[si]);
          vc_[(row * hk + h) * e + x] = byte;
          v32_[plain * e + x] = static_cast<float>(decode_quantized(qt, byte)) * vs_[si];
        }
      }
    }
  // Rows the call appends: values in q's dtype (a few outliers, which saturate under a given scale),
  // and the values they stand for once quantized into the caches, computed here.
  const int64_t n = s.new_rows;
  knew_.assign(static_cast<size_t>(B * n * hk * d) * es, 0);
  vnew_.assign(static_cast<size_t>(B * n * hk * e) * es, 0);
  for (int64_t b = 0; b < B; ++b) {
    after_.push_back(s.lengths[b] + static_cast<int32_t>(n));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t plain = (b * cap + s.lengths[b] + r) * hk + h;
        for (const bool key : {true, false}) {
          const int64_t width = key ? d : e, at = ((b * n + r) * hk + h) * width;
          std::vector<unsigned char>& src = key ? knew_ : vnew_;
          std::vector<float> x;
          for (int64_t i = 0; i < width; ++i) {
            const double outlier = rng.below(16) == 0 ? 300.0 : 1.0;
            flashattn::store_from_float(src.data(), t, at + i, static_cast<float>(rng.normal() * outlier));
            x.push_back(flashattn::load_as_float(src.data(), t, at + i));
          }
          const float* given = key ? ks_.data() : vs_.data();
          const float sc = s.granularity == ScaleGranularity::token ? row_scale(qt, x)
                           : s.granularity == ScaleGranularity::head ? given[h]
                                                                     : given[0];
          std::vector<float>& dst = key ? k32_ : v32_;
          for (int64_t i = 0; i < width; ++i)
            dst[plain * width + i] = static_cast<float>(decode_quantized(qt, quantize(qt, x[i], sc))) * sc;
        }
      }
  }
  if (s.bias) {  // [B, Hq, Nq, capacity]: normal values, now and then −inf (a hidden key)
    bias_.resize(static_cast<size_t>(B * hq * nq * cap));
    for (float& x : bias_) x = rng.below(16) == 0 ? -INFINITY : static_cast<float>(rng.normal());
  }
  out_.assign(static_cast<size_t>(B * nq * hq * e) * es, 0xFF);
  out32_.assign(static_cast<size_t>(B * nq * hq * e), kNaN);
  lse_.assign(static_cast<size_t>(B * hq * nq), kNaN);
  lse32_ = lse_;
}

flashattn::ForwardArgs QuantizedProblem::call() {
  const QuantizedSpec& s = spec_;
  const int64_t B = s.batch, hk = s.heads_k, hq = s.heads_q(), d = s.dim, e = s.dim_v, nq = s.seqlen_q;
  const bool paged = s.page_size > 0;
  const int64_t cb = paged ? pages_ : B, cs = paged ? s.page_size : s.capacity;
  flashattn::ForwardArgs a;
  a.q = flashattn::bshd(static_cast<const void*>(q_.data()), s.dtype, B, nq, hq, d);
  a.k = flashattn::bshd(static_cast<const void*>(kc_.data()), s.quant, cb, cs, hk, d);
  a.v = flashattn::bshd(static_cast<const void*>(vc_.data()), s.quant, cb, cs, hk, e);
  a.kv_scales = {ks_.data(), vs_.data(), s.granularity};
  if (s.new_rows > 0) {  // the same caches, reached through an append that writes the new rows first
    a.append.k_cache = flashattn::bshd(static_cast<void*>(kc_.data()), s.quant, cb, cs, hk, d);
    a.append.v_cache = flashattn::bshd(static_cast<void*>(vc_.data()), s.quant, cb, cs, hk, e);
    a.append.k_new = flashattn::bshd(static_cast<const void*>(knew_.data()), s.dtype, B, s.new_rows, hk, d);
    a.append.v_new = flashattn::bshd(static_cast<const void*>(vnew_.data()), s.dtype, B, s.new_rows, hk, e);
    a.k = {};
    a.v = {};
    if (s.granularity == ScaleGranularity::token) {  // the caches' scales, written for the new rows
      a.append.k_scales = ks_.data();
      a.append.v_scales = vs_.data();
      a.kv_scales.k = a.kv_scales.v = nullptr;
    }
  }
  if (paged) {
    a.block_table = table_.data();
    a.block_table_stride = stride_;
    a.block_table_pages = s.capacity / s.page_size;
  }
  a.seqlens_k = s.lengths.data();
  a.causal = s.causal;
  a.window_left = s.window_left;
  a.softcap = s.softcap;
  if (s.sinks) a.sinks = sinks_.data();
  a.num_splits = s.num_splits;
  if (s.bias) a.bias = flashattn::bhsd(static_cast<const void*>(bias_.data()), DType::f32, B, nq, hq, s.capacity);
  a.dropout_p = s.dropout_p;
  a.dropout_seed = s.seed * 0x9E3779B97F4A7C15ull;
  std::fill(out_.begin(), out_.end(), 0xFF);
  std::fill(lse_.begin(), lse_.end(), kNaN);
  a.out = flashattn::bshd(static_cast<void*>(out_.data()), s.dtype, B, nq, hq, e);
  a.lse = lse_.data();
  return a;
}

flashattn::ForwardArgs QuantizedProblem::dequantized() {
  const QuantizedSpec& s = spec_;
  const int64_t B = s.batch, hk = s.heads_k, hq = s.heads_q(), d = s.dim, e = s.dim_v, nq = s.seqlen_q;
  flashattn::ForwardArgs a = call();
  a.q = flashattn::bshd(static_cast<const void*>(q32_.data()), DType::f32, B, nq, hq, d);
  a.k = flashattn::bshd(static_cast<const void*>(k32_.data()), DType::f32, B, s.capacity, hk, d);
  a.v = flashattn::bshd(static_cast<const void*>(v32_.data()), DType::f32, B, s.capacity, hk, e);
  a.kv_scales = {};
  a.append = {};
  a.seqlens_k = after_.data();
  a.block_table = nullptr;
  a.block_table_stride = a.block_table_pages = 0;
  std::fill(out32_.begin(), out32_.end(), kNaN);
  std::fill(lse32_.begin(), lse32_.end(), kNaN);
  a.out = flashattn::bshd(static_cast<void*>(out32_.data()), DType::f32, B, nq, hq, e);
  a.lse = lse32_.data();
  return a;
}

std::string check_quantized_forward(QuantizedProblem& p, const std::function<void(const flashattn::ForwardArgs&)>& forward) {
  const flashattn::ForwardArgs a = p.call();
  forward(a);
  // An append call is judged as the plain call over the caches it wrote (writing them again, from
  // the same rows, changes no bit).
  const flashattn::AppendedCall plain = flashattn::apply_append(a);
  return flashattn::tolerance::judge_forward(plain.args).first_failure();
}

}  // namespace props
