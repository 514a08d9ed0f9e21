// Appending to a quantized KV cache (docs/semantics.md, "Appending to a quantized cache"): the codes
// and per-token scales written for the new rows, computed here step by step from the documented
// definition (rotation in fp32, the scale, then flashattn::quantize_bits, whose rounding
// tests/unit/quantized.cpp checks against a search), rows outside the append untouched, the call's
// output equal to the plain call over the caches as this file writes them, on every host backend;
// and every bad argument rejected before anything is written.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "fixture.hpp"

using flashattn::bshd;
using flashattn::DType;
using flashattn::ScaleGranularity;

namespace {

// A forward call with an append of two rows into quantized caches [B, cap, Hk, d] / dv, q and the
// new rows of dtype `qt` (f32 or bf16), optional half-split rotary over the first 6 of 8 elements.
struct QuantizedAppend {
  static constexpr int64_t B = 2, cap = 6, hk = 2, hq = 4, d = 8, dv = 4, nq = 2, nnew = 2, rdim = 6;
  static constexpr uint8_t kOld = 0x11, kUnused = 0x5A;  // bytes of the rows before the call, of unused rows
  DType t;
  ScaleGranularity g;
  bool rotary;
  DType qt;
  std::vector<int32_t> lens{3, 1};
  std::vector<float> q, knew, vnew, cos, sin, ks, vs, lse;  // q, knew, vnew: the values (of dtype qt)
  std::vector<uint8_t> kc, vc;
  std::vector<unsigned char> qb, knewb, vnewb, out;  // q, k_new, v_new and out as qt

  QuantizedAppend(DType t_, ScaleGranularity g_, bool rotary_, DType qt_ = DType::f32)
      : t(t_), g(g_), rotary(rotary_), qt(qt_) {
    uint32_t s = 7;
    auto next = [&s] {
      s = s * 1664525u + 1013904223u;
      return static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / static_cast<float>(1 << 23);  // [-1, 1)
    };
    for (int64_t i = 0; i < B * nq * hq * d; ++i) q.push_back(next());
    for (int64_t i = 0; i < B * nnew * hk * d; ++i) knew.push_back(3 * next());
    for (int64_t i = 0; i < B * nnew * hk * dv; ++i) vnew.push_back(next() / 8);
    knew[5] = 0;        // a zero among others
    knew[9] = 1e6f;     // past the range under a given scale: saturates
    knew[10] = -1e6f;
    for (int64_t x = 0; x < d; ++x) knew[((1 * nnew + 1) * hk + 0) * d + x] = 0;  // an all-zero row: scale 1
    vnew[3] = 2.5e-6f;  // a tiny value: rounds toward zero
    for (int64_t p = 0; p < 8; ++p)
      for (int64_t r = 0; r < rdim / 2; ++r) {
        const double th = static_cast<double>(p + 1) / std::pow(10.0, static_cast<double>(r) / 3);
        cos.push_back(static_cast<float>(std::cos(th)));
        sin.push_back(static_cast<float>(std::sin(th)));
      }
    kc.assign(static_cast<size_t>(B * cap * hk * d), kUnused);
    vc.assign(static_cast<size_t>(B * cap * hk * dv), kUnused);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < lens[b]; ++j) {
        std::fill_n(kc.begin() + (b * cap + j) * hk * d, hk * d, kOld);
        std::fill_n(vc.begin() + (b * cap + j) * hk * dv, hk * dv, kOld);
      }
    const int64_t n = g == ScaleGranularity::tensor ? 1 : g == ScaleGranularity::head ? hk : B * cap * hk;
    ks.assign(static_cast<size_t>(n), g == ScaleGranularity::token ? NAN : 0.02f);  // unread token scales: NaN
    vs.assign(static_cast<size_t>(n), g == ScaleGranularity::token ? NAN : 0.004f);
    if (g == ScaleGranularity::head) ks[1] = 0.03f, vs[1] = 0.005f;
    if (g == ScaleGranularity::token)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < lens[b]; ++j)
          for (int64_t h = 0; h < hk; ++h) ks[(b * cap + j) * hk + h] = 0.25f, vs[(b * cap + j) * hk + h] = 0.125f;
    out.assign(static_cast<size_t>(B * nq * hq * dv) * flashattn::dtype_size(qt), 0xFF);
    lse.assign(static_cast<size_t>(B * hq * nq), NAN);
    sync();
  }

  // Stores q, knew and vnew (after a test edits them) as the call's qt buffers.
  void sync() {
    qb = as_bytes(q);
    knewb = as_bytes(knew);
    vnewb = as_bytes(vnew);
  }

  // Rounds the values x to qt (in place) and returns them stored as qt.
  std::vector<unsigned char> as_bytes(std::vector<float>& x) const {
    std::vector<unsigned char> r(x.size() * flashattn::dtype_size(qt));
    for (size_t i = 0; i < x.size(); ++i) {
      flashattn::store_from_float(r.data(), qt, int64_t(i), x[i]);
      x[i] = flashattn::load_as_float(r.data(), qt, int64_t(i));
    }
    return r;
  }

  flashattn::ForwardArgs call() {
    flashattn::ForwardArgs a;
    a.q = bshd(static_cast<const void*>(qb.data()), qt, B, nq, hq, d);
    a.seqlens_k = lens.data();
    a.causal = true;
    a.append.k_cache = bshd(static_cast<void*>(kc.data()), t, B, cap, hk, d);
    a.append.v_cache = bshd(static_cast<void*>(vc.data()), t, B, cap, hk, dv);
    a.append.k_new = bshd(static_cast<const void*>(knewb.data()), qt, B, nnew, hk, d);
    a.append.v_new = bshd(static_cast<const void*>(vnewb.data()), qt, B, nnew, hk, dv);
    if (g == ScaleGranularity::token) {
      a.kv_scales.granularity = g;
      a.append.k_scales = ks.data();
      a.append.v_scales = vs.data();
    } else {
      a.kv_scales = {ks.data(), vs.data(), g};
    }
    if (rotary) {
      a.append.rotary_cos = cos.data();
      a.append.rotary_sin = sin.data();
      a.append.rotary_dim = rdim;
      a.append.rotary_positions = 8;
    }
    a.out = bshd(static_cast<void*>(out.data()), qt, B, nq, hq, dv);
    a.lse = lse.data();
    return a;
  }

  // Row (b, t) of head h of new keys (`key`) or values, as the documented step 1 makes it: fp32,
  // keys rotated at position lens[b] + t with each result rounded to fp32 only.
  std::vector<float> source(bool key, int64_t b, int64_t tt, int64_t h) const {
    const int64_t e = key ? d : dv;
    const float* src = (key ? knew.data() : vnew.data()) + ((b * nnew + tt) * hk + h) * e;
    std::vector<float> x(src, src + e);
    if (key && rotary) {
      const int64_t p = lens[b] + tt, half = rdim / 2;
      for (int64_t r = 0; r < half; ++r) {
        const double x0 = src[r], x1 = src[r + half], c = cos[p * half + r], s = sin[p * half + r];
        x[r] = static_cast<float>(x0 * c - x1 * s);
        x[r + half] = static_cast<float>(x0 * s + x1 * c);
      }
    }
    return x;
  }
};

const double kQmax[] = {127, 448, 57344};
double qmax(DType t) { return kQmax[t == DType::i8 ? 0 : t == DType::e4m3 ? 1 : 2]; }

// Runs `forward` on the append call of a fresh problem and checks the caches and scales it wrote,
// then that its output equals the same backend's plain call over the caches this test expects.
void check_append(DType t, ScaleGranularity g, bool rotary, DType qt,
                  const std::function<void(const flashattn::ForwardArgs&)>& forward) {
  CAPTURE(flashattn::dtype_name(t));
  CAPTURE(static_cast<int>(g));
  CAPTURE(rotary);
  CAPTURE(flashattn::dtype_name(qt));
  QuantizedAppend p(t, g, rotary, qt);
  const std::vector<float> ks0 = p.ks, vs0 = p.vs;
  // Expected caches: old rows and unused rows as they were; new rows coded as documented.
  std::vector<uint8_t> kc = p.kc, vc = p.vc;
  std::vector<float> ks = p.ks, vs = p.vs;
  const int64_t hk = p.hk;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t tt = 0; tt < p.nnew; ++tt)
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t row = b * p.cap + p.lens[b] + tt;
        for (const bool key : {true, false}) {
          const std::vector<float> x = p.source(key, b, tt, h);
          std::vector<float>& sc = key ? ks : vs;
          float s;
          if (g == ScaleGranularity::token) {
            float amax = 0;
            for (const float e : x) amax = std::max(amax, std::fabs(e));
            s = static_cast<float>(amax / qmax(t));  // amax / qmax in fp32 (exact in double, one rounding)
            if (s == 0) s = 1;
            sc[row * hk + h] = s;
          } else {
            s = sc[g == ScaleGranularity::tensor ? 0 : h];
          }
          uint8_t* dst = (key ? kc.data() : vc.data()) + row * hk * int64_t(x.size()) + h * int64_t(x.size());
          for (size_t e = 0; e < x.size(); ++e) dst[e] = flashattn::quantize_bits(t, x[e] / s);
        }
      }
  const flashattn::ForwardArgs a = p.call();
  forward(a);
  CHECK(p.kc == kc);
  CHECK(p.vc == vc);
  for (size_t i = 0; i < ks.size(); ++i) {
    CAPTURE(i);
    CHECK((std::isnan(p.ks[i]) ? std::isnan(ks[i]) : p.ks[i] == ks[i]));
    CHECK((std::isnan(p.vs[i]) ? std::isnan(vs[i]) : p.vs[i] == vs[i]));
  }
  // The plain call over the expected caches (restored, then written by this test) gives the same bits.
  QuantizedAppend plain(t, g, rotary, qt);
  plain.kc = kc;
  plain.vc = vc;
  plain.ks = ks;
  plain.vs = vs;
  std::vector<float> qrot = plain.q;  // rotated as documented: each result rounded to fp32, then to qt
  if (rotary)
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t i = 0; i < p.nq; ++i)
        for (int64_t h = 0; h < p.hq; ++h) {
          float* x = qrot.data() + ((b * p.nq + i) * p.hq + h) * p.d;
          const float* src = plain.q.data() + ((b * p.nq + i) * p.hq + h) * p.d;
          const int64_t pos = p.lens[b] + i, half = p.rdim / 2;
          for (int64_t r = 0; r < half; ++r) {
            const double x0 = src[r], x1 = src[r + half], c = p.cos[pos * half + r], s = p.sin[pos * half + r];
            x[r] = static_cast<float>(x0 * c - x1 * s);
            x[r + half] = static_cast<float>(x0 * s + x1 * c);
          }
        }
  const std::vector<unsigned char> qrotb = plain.as_bytes(qrot);
  std::vector<int32_t> after{p.lens[0] + int32_t(p.nnew), p.lens[1] + int32_t(p.nnew)};
  flashattn::ForwardArgs b;
  b.q = bshd(static_cast<const void*>(qrotb.data()), qt, p.B, p.nq, p.hq, p.d);
  b.k = bshd(static_cast<const void*>(plain.kc.data()), t, p.B, p.cap, hk, p.d);
  b.v = bshd(static_cast<const void*>(plain.vc.data()), t, p.B, p.cap, hk, p.dv);
  b.kv_scales = {plain.ks.data(), plain.vs.data(), g};
  b.seqlens_k = after.data();
  b.causal = true;
  b.out = bshd(static_cast<void*>(plain.out.data()), qt, p.B, p.nq, p.hq, p.dv);
  b.lse = plain.lse.data();
  forward(b);
  CHECK(p.out == plain.out);
  CHECK(std::memcmp(p.lse.data(), plain.lse.data(), p.lse.size() * 4) == 0);
}

void each_case(const std::function<void(const flashattn::ForwardArgs&)>& forward) {
  for (const DType t : {DType::i8, DType::e4m3, DType::e5m2})
    for (const ScaleGranularity g : {ScaleGranularity::tensor, ScaleGranularity::head, ScaleGranularity::token})
      for (const bool rotary : {false, true})
        for (const DType qt : {DType::f32, DType::bf16}) check_append(t, g, rotary, qt, forward);
}

// Checks that `a` is rejected with `words` by every host entry point and that nothing is written.
void reject_append(QuantizedAppend& p, const flashattn::ForwardArgs& a, std::initializer_list<const char*> words) {
  const auto kc = p.kc, vc = p.vc;
  const auto ks = p.ks, vs = p.vs;
  unit::check_words(unit::error_of([&] { flashattn::validate(a); }), words);
  unit::check_words(unit::error_of([&] { flashattn::reference::forward(a); }), words);
#ifdef FLASHATTN_UNIT_HAS_CPU
  unit::check_words(unit::error_of([&] { flashattn::cpu::forward(a); }), words);
#endif
  CHECK(p.kc == kc);
  CHECK(p.vc == vc);
  CHECK(std::memcmp(p.ks.data(), ks.data(), ks.size() * 4) == 0);
  CHECK(std::memcmp(p.vs.data(), vs.data(), vs.size() * 4) == 0);
}

}  // namespace

TEST_CASE("quantized append: the oracle writes the documented codes and scales, then attends over them") {
  each_case([](const flashattn::ForwardArgs& a) { flashattn::reference::forward(a); });
}

#ifdef FLASHATTN_UNIT_HAS_CPU
TEST_CASE("quantized append: the CPU writes the documented codes and scales, then attends over them") {
  for (const bool decode : {true, false}) {  // the decode path, and the general tiled path
    CAPTURE(decode);
    flashattn::cpu::Config c;
    c.decode = decode;
    each_case([&c](const flashattn::ForwardArgs& a) { flashattn::cpu::forward(a, c); });
  }
}
#endif

TEST_CASE("quantized append: NaN and infinities in new rows of an 8-bit float cache") {
  for (const DType t : {DType::e4m3, DType::e5m2}) {
    CAPTURE(flashattn::dtype_name(t));
    QuantizedAppend p(t, ScaleGranularity::token, false);
    p.knew[1] = NAN;        // row (0, 0), head 0
    p.knew[2] = -INFINITY;  // saturates to the largest finite value; not counted in the row's scale
    p.sync();
    float amax = 0;
    for (int64_t x = 0; x < p.d; ++x)
      if (std::isfinite(p.knew[x])) amax = std::max(amax, std::fabs(p.knew[x]));
    flashattn::reference::forward(p.call());
    const int64_t row = 0 * p.cap + p.lens[0];
    const float s = p.ks[row * p.hk];
    CHECK(s == static_cast<float>(amax / qmax(t)));
    const uint8_t* codes = p.kc.data() + row * p.hk * p.d;
    CHECK(int(codes[1] & 0x7f) == (t == DType::e4m3 ? 0x7f : 0x7e));
    CHECK(int(codes[2]) == (t == DType::e4m3 ? 0xfe : 0xfb));
  }
}

TEST_CASE("quantized append: bad arguments are rejected before anything is written") {
  SUBCASE("an i8 cache fed a NaN or an infinity") {
    QuantizedAppend p(DType::i8, ScaleGranularity::tensor, false);
    p.vnew[6] = NAN;
    p.sync();
    reject_append(p, p.call(), {"append.v_new[0, 0, 1, 2] (nan) is not finite", "i8 cache"});
    p.vnew[6] = 0;
    p.knew[17] = INFINITY;
    p.sync();
    reject_append(p, p.call(), {"append.k_new[0, 1, 0, 1] (inf) is not finite"});
  }
  SUBCASE("an i8 cache whose new keys are rotated with a non-finite table entry") {
    QuantizedAppend p(DType::i8, ScaleGranularity::head, true);
    p.sin[3 * 3 + 1] = NAN;  // position 3 = lens[0]: the first new key of sequence 0
    reject_append(p, p.call(), {"append.rotary_sin[10] (nan) is not finite"});
  }
  SUBCASE("a non-finite table entry no new row uses is not read") {
    QuantizedAppend p(DType::i8, ScaleGranularity::head, true);
    p.sin[7 * 3] = NAN;  // position 7: past every new key (queries rotate at most to position 4)
    CHECK_NOTHROW(flashattn::validate(p.call()));
  }
  SUBCASE("caches of two dtypes") {
    QuantizedAppend p(DType::e4m3, ScaleGranularity::tensor, false);
    flashattn::ForwardArgs a = p.call();
    a.append.v_cache.dtype = DType::e5m2;
    reject_append(p, a, {"append.v_cache.dtype (e5m2) must equal append.k_cache.dtype (e4m3)"});
  }
  SUBCASE("token granularity without the caches' scale arrays, or with kv_scales") {
    QuantizedAppend p(DType::e5m2, ScaleGranularity::token, false);
    flashattn::ForwardArgs a = p.call();
    a.append.v_scales = nullptr;
    reject_append(p, a, {"append.v_scales is null", "token granularity"});
    a = p.call();
    a.kv_scales.k = p.ks.data();
    reject_append(p, a, {"kv_scales.k is set", "append.k_scales"});
  }
  SUBCASE("scale arrays at another granularity, or for a cache of q's dtype") {
    QuantizedAppend p(DType::i8, ScaleGranularity::head, false);
    flashattn::ForwardArgs a = p.call();
    std::vector<float> spare(p.ks.size() * 12, 1.0f);
    a.append.k_scales = spare.data();
    reject_append(p, a, {"append.k_scales is set but kv_scales.granularity is not token"});
  }
  SUBCASE("a bad scale of a row before the append") {
    QuantizedAppend p(DType::i8, ScaleGranularity::token, false);
    p.vs[(1 * p.cap + 0) * p.hk + 1] = 0;  // sequence 1, row 0, head 1
    reject_append(p, p.call(), {"append.v_scales[13] (0) must be finite and > 0"});
  }
  SUBCASE("written scale arrays overlapping each other or an input") {
    QuantizedAppend p(DType::i8, ScaleGranularity::token, false);
    std::vector<float> shared(p.ks.size() + p.q.size() + 8, 0.5f);  // valid scales everywhere
    flashattn::ForwardArgs a = p.call();
    a.append.k_scales = shared.data();
    a.append.v_scales = shared.data() + 1;
    reject_append(p, a, {"append.k_scales overlaps append.v_scales"});
    a = p.call();
    std::copy(p.q.begin(), p.q.end() - 4, shared.begin());  // q (f32): its last 4 elements are scales too
    a.q.data = shared.data();
    a.append.k_scales = shared.data() + p.q.size() - 4;
    reject_append(p, a, {"append.k_scales overlaps q"});
  }
}
