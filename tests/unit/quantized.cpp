// Quantized K/V (docs/semantics.md, "Quantized K/V"): the 8-bit decodings against a decoder written
// here from the formats' definitions, the oracle's dequantization against the same call over fp32
// K/V holding the dequantized values, and every bad argument rejected before anything is written.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "fixture.hpp"

using flashattn::bshd;
using flashattn::DType;
using flashattn::ScaleGranularity;
using unit::Fixture;
using unit::reject;

namespace {

// The value of an 8-bit float with `ebits` exponent bits (bias 2^(ebits-1) - 1) and 7 - ebits
// mantissa bits, from its definition; e4m3fn has no infinities and one NaN per sign (all ones).
double decode_fp8(uint8_t b, int ebits, bool e4m3fn) {
  const int mbits = 7 - ebits, bias = (1 << (ebits - 1)) - 1;
  const int e = (b >> mbits) & ((1 << ebits) - 1), m = b & ((1 << mbits) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int emax = (1 << ebits) - 1;
  if (e4m3fn && e == emax && m == (1 << mbits) - 1) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3fn && e == emax) return m == 0 ? sign * INFINITY : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  return sign * std::ldexp(1.0 + static_cast<double>(m) / (1 << mbits), e - bias);
}

// A forward call over quantized K/V (dtype t, i8/e4m3/e5m2 bytes of a fixed pattern) with scales of
// granularity g, and the same call over fp32 K/V holding the dequantized values.
struct Quantized {
  static constexpr int64_t B = 2, nq = 3, nk = 5, hq = 4, hk = 2, d = 8;
  DType t;
  ScaleGranularity g;
  std::vector<float> q, out, lse, kf, vf, outf, lsef, ks, vs;
  std::vector<uint8_t> kb, vb;

  Quantized(DType t_, ScaleGranularity g_) : t(t_), g(g_) {
    const int64_t nqe = B * nq * hq * d, nke = B * nk * hk * d;
    for (int64_t i = 0; i < nqe; ++i) q.push_back(static_cast<float>((i * 5 % 13) - 6) / 4.0f);
    for (int64_t i = 0; i < nke; ++i) {
      // bytes that decode to modest finite values in every format (no NaN or inf patterns)
      const uint8_t base = t == DType::i8 ? static_cast<uint8_t>((i * 37) % 255) : static_cast<uint8_t>((i * 29) % 0x50);
      kb.push_back(static_cast<uint8_t>(base ^ ((i & 1) ? 0x80 : 0)));
      vb.push_back(static_cast<uint8_t>((base + 11) % (t == DType::i8 ? 255 : 0x50) ^ ((i & 2) ? 0x80 : 0)));
    }
    const int64_t n = g == ScaleGranularity::tensor ? 1 : g == ScaleGranularity::head ? hk : B * nk * hk;
    for (int64_t i = 0; i < n; ++i) {
      ks.push_back(0.013f * static_cast<float>(i % 7 + 1));
      vs.push_back(0.29f / static_cast<float>(i % 5 + 1));
    }
    out.assign(static_cast<size_t>(nqe), 0);
    outf.assign(static_cast<size_t>(nqe), 0);
    lse.assign(static_cast<size_t>(B * hq * nq), 0);
    lsef = lse;
    // The dequantized values, from this file's decoder: decode(byte) · scale, rounded to fp32.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t h = 0; h < hk; ++h) {
          const int64_t si = g == ScaleGranularity::tensor ? 0 : g == ScaleGranularity::head ? h : (b * nk + j) * hk + h;
          for (int64_t x = 0; x < d; ++x) {
            const int64_t i = ((b * nk + j) * hk + h) * d + x;
            kf.push_back(static_cast<float>(decoded(kb[i])) * ks[si]);
            vf.push_back(static_cast<float>(decoded(vb[i])) * vs[si]);
          }
        }
  }
  double decoded(uint8_t byte) const {
    if (t == DType::i8) return static_cast<int8_t>(byte);
    return t == DType::e4m3 ? decode_fp8(byte, 4, true) : decode_fp8(byte, 5, false);
  }
  flashattn::ForwardArgs call() {
    flashattn::ForwardArgs a;
    a.q = bshd(static_cast<const void*>(q.data()), DType::f32, B, nq, hq, d);
    a.k = bshd(static_cast<const void*>(kb.data()), t, B, nk, hk, d);
    a.v = bshd(static_cast<const void*>(vb.data()), t, B, nk, hk, d);
    a.kv_scales = {ks.data(), vs.data(), g};
    a.out = bshd(static_cast<void*>(out.data()), DType::f32, B, nq, hq, d);
    a.lse = lse.data();
    a.causal = true;
    return a;
  }
  flashattn::ForwardArgs plain() {
    flashattn::ForwardArgs a = call();
    a.k = bshd(static_cast<const void*>(kf.data()), DType::f32, B, nk, hk, d);
    a.v = bshd(static_cast<const void*>(vf.data()), DType::f32, B, nk, hk, d);
    a.kv_scales = {};
    a.out = bshd(static_cast<void*>(outf.data()), DType::f32, B, nq, hq, d);
    a.lse = lsef.data();
    return a;
  }
};

}  // namespace

TEST_CASE("quantized: the 8-bit decodings equal the formats' definitions for all 256 patterns") {
  for (int b = 0; b < 256; ++b) {
    CAPTURE(b);
    const uint8_t byte = static_cast<uint8_t>(b);
    const uint8_t bytes[4] = {byte, 0, 0, 0};  // a float's room: load_as_float's other branches read more
    CHECK(flashattn::load_as_float(bytes, DType::i8, 0) == static_cast<float>(static_cast<int8_t>(byte)));
    for (const auto& [t, ebits, fn] : {std::tuple<DType, int, bool>{DType::e4m3, 4, true}, {DType::e5m2, 5, false}}) {
      const double want = decode_fp8(byte, ebits, fn);
      const float got = flashattn::load_as_float(bytes, t, 0);
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
      } else {
        CHECK(static_cast<double>(got) == want);
        CHECK(std::signbit(got) == std::signbit(want));  // -0 included
      }
    }
  }
  const uint8_t special[4] = {0x7e, 0x7f, 0x7c, 0};  // largest e4m3, e4m3 NaN, e5m2 inf
  CHECK(flashattn::load_as_float(special, DType::e4m3, 0) == 448.0f);
  CHECK(std::isnan(flashattn::load_as_float(special, DType::e4m3, 1)));
  CHECK(flashattn::load_as_float(special, DType::e5m2, 2) == INFINITY);
}

TEST_CASE("quantized: a call over quantized K/V is the call over its dequantized values") {
  for (DType t : {DType::i8, DType::e4m3, DType::e5m2}) {
    for (ScaleGranularity g : {ScaleGranularity::tensor, ScaleGranularity::head, ScaleGranularity::token}) {
      const std::string name = flashattn::dtype_name(t);
      CAPTURE(name);
      CAPTURE(static_cast<int>(g));
      Quantized qz(t, g);
      flashattn::reference::forward(qz.call());
      flashattn::reference::forward(qz.plain());
      CHECK(std::memcmp(qz.out.data(), qz.outf.data(), qz.out.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(qz.lse.data(), qz.lsef.data(), qz.lse.size() * sizeof(float)) == 0);
#ifdef FLASHATTN_UNIT_HAS_CPU
      // The CPU over quantized K/V is the CPU over the dequantized values, up to its own rounding (the
      // two calls may take different paths: decode-shaped calls over quantized K/V take the general one).
      std::vector<float> cpu_out(qz.out.size());
      flashattn::ForwardArgs a = qz.call();
      a.out.data = cpu_out.data();
      flashattn::cpu::forward(a);
      for (size_t i = 0; i < cpu_out.size(); ++i) CHECK(std::fabs(cpu_out[i] - qz.outf[i]) <= 1e-5f * (1 + std::fabs(qz.outf[i])));
#endif
    }
  }
}

#ifdef FLASHATTN_UNIT_HAS_CPU
TEST_CASE("quantized: the CPU dequantizes every 8-bit pattern exactly, on every target and path") {
  // One query row over one key: P = 1, so out is the value row itself: the 256 patterns times the
  // scale, rounded to fp32 once, whatever the target's vector decoding. Paths: the general forward;
  // the decode path with its rows dequantized into fp32 tiles (d = 8, not a whole number of
  // vectors; or fp64 scores); and with its rows read in place (d = 16 and fp32 scores), where an
  // e4m3 NaN code sends the head's tile to the dequantized copy, so e4m3 also runs without them.
  constexpr int64_t dv = 256;
  const float scale = 0.75f;
  struct Path {
    const char* name;
    bool decode;
    int64_t d;
    flashattn::cpu::ScorePrecision scores;
  };
  const Path paths[] = {{"general", false, 8, flashattn::cpu::ScorePrecision::adaptive},
                        {"decode, tile copy", true, 8, flashattn::cpu::ScorePrecision::fp32},
                        {"decode, fp64 scores", true, 16, flashattn::cpu::ScorePrecision::adaptive},
                        {"decode, in place", true, 16, flashattn::cpu::ScorePrecision::fp32}};
  std::vector<float> out(dv), lse(1), ks{scale}, vs{scale};
  for (DType t : {DType::i8, DType::e4m3, DType::e5m2}) {
    for (bool nan_codes : {true, false}) {
      if (!nan_codes && t != DType::e4m3) continue;
      std::vector<uint8_t> vrow(dv);
      for (int64_t x = 0; x < dv; ++x) {
        const uint8_t code[4] = {static_cast<uint8_t>(x), 0, 0, 0};  // a float's room, as above
        const bool nan = std::isnan(flashattn::load_as_float(code, t, 0));
        vrow[x] = nan && !nan_codes ? 0 : static_cast<uint8_t>(x);
      }
      for (const auto& target : flashattn::cpu::targets()) {
        for (const Path& path : paths) {
          const std::string name = std::string(flashattn::dtype_name(t)) + " " + target.name + " " + path.name +
                                   (nan_codes ? "" : ", no NaN codes");
          CAPTURE(name);
          std::vector<uint8_t> krow(path.d, 0x30);
          std::vector<float> q(path.d, 0.5f);
          flashattn::ForwardArgs a;
          a.q = bshd(static_cast<const void*>(q.data()), DType::f32, 1, 1, 1, path.d);
          a.k = bshd(static_cast<const void*>(krow.data()), t, 1, 1, 1, path.d);
          a.v = bshd(static_cast<const void*>(vrow.data()), t, 1, 1, 1, dv);
          a.kv_scales = {ks.data(), vs.data(), ScaleGranularity::tensor};
          a.out = bshd(static_cast<void*>(out.data()), DType::f32, 1, 1, 1, dv);
          a.lse = lse.data();
          flashattn::cpu::Config c;
          c.target = target.bit;
          c.decode = path.decode;
          c.scores = path.scores;
          std::fill(out.begin(), out.end(), -1.0f);
          flashattn::cpu::forward(a, c);
          for (int64_t x = 0; x < dv; ++x) {
            const float want = flashattn::dequantize(flashattn::load_as_float(vrow.data(), t, x), scale);
            if (std::isnan(want))
              CHECK(std::isnan(out[x]));
            else
              CHECK_MESSAGE(out[x] == want, "pattern " << x << ": " << out[x] << " want " << want);  // -0: 0 + 1·(-0) = +0
          }
        }
      }
    }
  }
}
TEST_CASE("quantized: the CPU decode path dequantizes key rows exactly, in place and copied") {
  // One query row, one-hot at lane x, over one key row of 16 codes, softmax scale 1: S = K[x], and
  // with one key LSE = S, so lse is the key element itself (fl32(decode · scale)); a NaN or
  // infinite element makes S NaN (0 · inf in the other lanes). Each group of 16 patterns fills the
  // row in turn; fp32 scores read the codes in place (an e4m3 NaN code sends the tile to the copy),
  // fp64 scores read the dequantized copy.
  constexpr int64_t d = 16;
  const float scale = 0.75f;
  std::vector<float> q(d), out(d), lse(1), ks{scale}, vs{scale};
  std::vector<uint8_t> krow(d), vrow(d, 0x30);
  for (DType t : {DType::i8, DType::e4m3, DType::e5m2}) {
    for (const auto& target : flashattn::cpu::targets()) {
      for (auto scores : {flashattn::cpu::ScorePrecision::fp32, flashattn::cpu::ScorePrecision::adaptive}) {
        for (int64_t first = 0; first < 256; first += d) {
          for (int64_t x = 0; x < d; ++x) krow[x] = static_cast<uint8_t>(first + x);
          for (int64_t x = 0; x < d; ++x) {
            CAPTURE(flashattn::dtype_name(t));
            CAPTURE(target.name);
            CAPTURE(first + x);
            CAPTURE(scores == flashattn::cpu::ScorePrecision::fp32);
            std::fill(q.begin(), q.end(), 0.0f);
            q[x] = 1.0f;
            flashattn::ForwardArgs a;
            a.q = bshd(static_cast<const void*>(q.data()), DType::f32, 1, 1, 1, d);
            a.k = bshd(static_cast<const void*>(krow.data()), t, 1, 1, 1, d);
            a.v = bshd(static_cast<const void*>(vrow.data()), t, 1, 1, 1, d);
            a.kv_scales = {ks.data(), vs.data(), ScaleGranularity::tensor};
            a.out = bshd(static_cast<void*>(out.data()), DType::f32, 1, 1, 1, d);
            a.lse = lse.data();
            a.scale = 1.0f;
            flashattn::cpu::Config c;
            c.target = target.bit;
            c.scores = scores;
            flashattn::cpu::forward(a, c);
            bool finite = true;  // every element of the row: 0 · inf and 0 · NaN are NaN
            for (int64_t y = 0; y < d; ++y) finite = finite && std::isfinite(flashattn::load_as_float(krow.data(), t, y));
            const float want = flashattn::dequantize(flashattn::load_as_float(krow.data(), t, x), scale);
            if (!finite)
              CHECK(std::isnan(lse[0]));
            else
              CHECK(lse[0] == want);
          }
        }
      }
    }
  }
}


TEST_CASE("quantized: a scale that overflows a dequantized value is not applied per dot product") {
  // Read in place, a quantized key row's scale multiplies its finished dot product, which stays
  // finite where the definition's element fl32(decode · scale) is infinite; the decode path must then
  // take the dequantized copy. One query row over two keys: key 0 is the largest code times a scale
  // that overflows it (but not the e4m3 factor 2^8 that in-place reading folds into it), key 1 a
  // small code; the CPU's out and lse on every target must match the oracle's (NaN where it is NaN).
  constexpr int64_t d = 16, nk = 2;
  struct Case {
    DType t;
    uint8_t big, small;  // the largest finite code, and a code of value 1
    float scale;         // big's value times it overflows fp32
  };
  const Case cases[] = {{DType::i8, 127, 1, 3e36f}, {DType::e4m3, 0x7e, 0x38, 1e36f}, {DType::e5m2, 0x7b, 0x3c, 1e34f}};
  for (const Case& k : cases) {
    std::vector<uint8_t> krow(nk * d), vrow(nk * d, k.small);
    std::fill(krow.begin(), krow.begin() + d, k.big);
    std::fill(krow.begin() + d, krow.end(), k.small);
    std::vector<float> q(d, 0.01f), ks{k.scale, 1.0f}, vs(nk, 1.0f), out(d), lse(1), want_out(d), want_lse(1);
    const uint8_t big[4] = {k.big, 0, 0, 0};  // a float's room: load_as_float's other branches read more
    CHECK(std::isinf(flashattn::dequantize(flashattn::load_as_float(big, k.t, 0), k.scale)));
    flashattn::ForwardArgs a;
    a.q = bshd(static_cast<const void*>(q.data()), DType::f32, 1, 1, 1, d);
    a.k = bshd(static_cast<const void*>(krow.data()), k.t, 1, nk, 1, d);
    a.v = bshd(static_cast<const void*>(vrow.data()), k.t, 1, nk, 1, d);
    a.kv_scales = {ks.data(), vs.data(), ScaleGranularity::token};
    a.out = bshd(static_cast<void*>(want_out.data()), DType::f32, 1, 1, 1, d);
    a.lse = want_lse.data();
    flashattn::reference::forward(a);
    a.out = bshd(static_cast<void*>(out.data()), DType::f32, 1, 1, 1, d);
    a.lse = lse.data();
    for (const auto& target : flashattn::cpu::targets()) {
      CAPTURE(flashattn::dtype_name(k.t));
      CAPTURE(target.name);
      flashattn::cpu::Config c;
      c.target = target.bit;
      c.scores = flashattn::cpu::ScorePrecision::fp32;  // the in-place path where the target has it
      flashattn::cpu::forward(a, c);
      CHECK(std::isnan(lse[0]) == std::isnan(want_lse[0]));
      if (!std::isnan(want_lse[0])) CHECK(std::fabs(lse[0] - want_lse[0]) <= 1e-6f * (1 + std::fabs(want_lse[0])));
      for (int64_t x = 0; x < d; ++x) {
        CHECK(std::isnan(out[x]) == std::isnan(want_out[x]));
        if (!std::isnan(want_out[x])) CHECK(std::fabs(out[x] - want_out[x]) <= 1e-6f * (1 + std::fabs(want_out[x])));
      }
    }
  }
}

#endif

TEST_CASE("quantized: bad dtypes, scales and uses are rejected, naming the argument") {
  Fixture fx;
  std::vector<uint8_t> kb(fx.k.size()), vb(fx.v.size());
  std::vector<float> one{0.5f}, two{0.5f, 0.25f}, heads{0.5f, 0.25f}, tokens(2 * 5 * 2, 0.125f);
  auto quantized = [&](DType t) {
    flashattn::ForwardArgs a = fx.forward();
    a.k.data = kb.data();
    a.k.dtype = t;
    a.v.data = vb.data();
    a.v.dtype = t;
    a.kv_scales = {one.data(), one.data(), ScaleGranularity::tensor};
    return a;
  };
  SUBCASE("accepted") { CHECK_NOTHROW(flashattn::validate(quantized(DType::e5m2))); }
  SUBCASE("q quantized") {
    auto a = quantized(DType::i8);
    a.q.dtype = DType::i8;
    reject(fx, a, {"q.dtype (i8) must be f32, f16 or bf16"});
  }
  SUBCASE("out quantized") {
    auto a = fx.forward();
    a.out.dtype = DType::e4m3;
    reject(fx, a, {"out.dtype (e4m3) must be f32, f16 or bf16"});
  }
  SUBCASE("k and v of two quantized dtypes") {
    auto a = quantized(DType::i8);
    a.v.dtype = DType::e4m3;
    reject(fx, a, {"v.dtype (e4m3) must equal k.dtype (i8)"});
  }
  SUBCASE("k quantized, v not") {
    auto a = quantized(DType::i8);
    a.v = fx.fwd.v;
    reject(fx, a, {"v.dtype (f32) must equal k.dtype (i8)"});
  }
  SUBCASE("no scales") {
    auto a = quantized(DType::i8);
    a.kv_scales.v = nullptr;
    reject(fx, a, {"kv_scales.v is null", "quantized K/V (i8)"});
  }
  SUBCASE("scales without quantized K/V") {
    auto a = fx.forward();
    a.kv_scales.k = one.data();
    reject(fx, a, {"kv_scales.k is set but k.dtype (f32) is not quantized"});
  }
  SUBCASE("a zero, negative, NaN or infinite scale") {
    for (float bad : {0.0f, -0.5f, NAN, INFINITY}) {
      auto a = quantized(DType::e4m3);
      two[1] = bad;
      a.kv_scales = {heads.data(), two.data(), ScaleGranularity::head};  // one scale per head (Hk = 2) each
      reject(fx, a, {"kv_scales.v[1]", "must be finite and > 0"});
    }
  }
  SUBCASE("a bad per-token scale at a key the call reads, a bad one past seqlens_k is never read") {
    auto a = quantized(DType::i8);
    a.kv_scales = {tokens.data(), tokens.data(), ScaleGranularity::token};
    std::vector<int32_t> lens{5, 3};
    a.seqlens_k = lens.data();
    tokens[(1 * 5 + 4) * 2 + 1] = NAN;  // sequence 1, key 4 >= seqlens_k[1]: not read
    CHECK_NOTHROW(flashattn::validate(a));
    tokens[(1 * 5 + 2) * 2 + 1] = -1;  // sequence 1, key 2, head 1
    reject(fx, a, {"kv_scales.k[15] (-1) must be finite and > 0"});
  }
  SUBCASE("granularity outside the enum") {
    auto a = quantized(DType::i8);
    a.kv_scales.granularity = static_cast<ScaleGranularity>(7);
    reject(fx, a, {"kv_scales.granularity (7) is not a ScaleGranularity"});
  }
  SUBCASE("the backward takes no quantized K/V") {
    flashattn::BackwardArgs b = fx.bwd;
    b.k.data = kb.data();
    b.k.dtype = DType::i8;
    b.v.data = vb.data();
    b.v.dtype = DType::i8;
    b.kv_scales = {one.data(), one.data(), ScaleGranularity::tensor};
    reject(fx, b, {"k.dtype (i8) is quantized", "forward only"});
  }
  SUBCASE("an append into quantized caches without their scales") {
    auto a = fx.forward();
    std::vector<int32_t> lens{3, 3};
    a.seqlens_k = lens.data();
    a.append.k_cache = bshd(static_cast<void*>(kb.data()), DType::i8, 2, 5, 2, 8);
    a.append.v_cache = bshd(static_cast<void*>(vb.data()), DType::i8, 2, 5, 2, 8);
    a.append.k_new = bshd(static_cast<const void*>(fx.k.data()), DType::f32, 2, 1, 2, 8);
    a.append.v_new = bshd(static_cast<const void*>(fx.v.data()), DType::f32, 2, 1, 2, 8);
    a.k = {};
    a.v = {};
    reject(fx, a, {"kv_scales.k is null", "need their scales"});
  }
  SUBCASE("scales overlapping out") {
    auto a = quantized(DType::i8);
    a.kv_scales.k = reinterpret_cast<const float*>(a.out.data);
    fx.out[0] = 0.5f;  // a valid scale, so the overlap is what is wrong
    reject(fx, a, {"out overlaps input kv_scales.k"});
  }
}

namespace {

// The documented rounding (docs/semantics.md, "Appending to a quantized cache") by search over the
// patterns with this file's decoder: the finite pattern of x's sign nearest to x, ties to the even
// pattern; infinities saturate to the largest finite value, NaN is the format's NaN pattern.
uint8_t nearest_fp8(float x, int ebits, bool fn) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | (fn ? 0x7f : 0x7e));
  const uint8_t max = fn ? 0x7e : 0x7b;  // the largest finite value
  if (std::fabs(static_cast<double>(x)) >= decode_fp8(max, ebits, fn)) return static_cast<uint8_t>(sign | max);
  uint8_t best = sign;
  double err = INFINITY;
  for (int m = 0; m < 128; ++m) {
    const uint8_t b = static_cast<uint8_t>(sign | m);
    const double v = decode_fp8(b, ebits, fn);
    if (!std::isfinite(v)) continue;
    const double e = std::fabs(v - static_cast<double>(x));
    if (e < err || (e == err && (b & 1) == 0)) err = e, best = b;
  }
  return best;
}

// Floats that probe fp8 rounding: every pattern's value, the midpoints of neighbouring values and
// the floats just beside them, values past the range, specials, and pseudo-random floats.
std::vector<float> rounding_probes(int ebits, bool fn) {
  std::vector<double> values;
  for (int b = 0; b < 128; ++b)
    if (const double v = decode_fp8(static_cast<uint8_t>(b), ebits, fn); std::isfinite(v)) values.push_back(v);
  std::sort(values.begin(), values.end());
  std::vector<float> r;
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = static_cast<float>(values[i]);
    const float mid = static_cast<float>(i + 1 < values.size() ? (values[i] + values[i + 1]) / 2 : values[i] * 1.0625);
    for (const float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), static_cast<float>(values[i] * 2)}) {
      r.push_back(x);
      r.push_back(-x);
    }
  }
  for (const float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, 1e-38f, 3e38f, -3e38f}) r.push_back(x);
  uint32_t s = 12345;
  for (int i = 0; i < 20000; ++i) {
    s = s * 1664525u + 1013904223u;
    const int e = static_cast<int>(s >> 26) - 40 + (ebits == 5 ? 8 : 0);  // exponents around the format's range
    s = s * 1664525u + 1013904223u;
    r.push_back(std::ldexp(static_cast<float>(s >> 8) / 16777216.0f + 0.5f, e) * ((s & 1) ? -1.0f : 1.0f));
  }
  return r;
}

}  // namespace

TEST_CASE("quantized: the 8-bit floats' rounding takes the nearest pattern, ties to even, saturating") {
  for (const auto& format : {std::tuple<DType, int, bool>{DType::e4m3, 4, true}, {DType::e5m2, 5, false}}) {
    const DType t = std::get<0>(format);  // not a structured binding: CAPTURE's lambda refers to it
    const int ebits = std::get<1>(format);
    const bool fn = std::get<2>(format);
    CAPTURE(flashattn::dtype_name(t));
    for (const float x : rounding_probes(ebits, fn)) {
      CAPTURE(x);
      const uint8_t got = flashattn::quantize_bits(t, x), want = nearest_fp8(x, ebits, fn);
      if (got != want) CHECK(int(got) == int(want));  // one line per failure, not one per probe
    }
  }
}

TEST_CASE("quantized: int8 rounding takes the nearest integer, ties to even, saturating at +-127") {
  std::vector<float> probes{0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, 3e38f, -3e38f, 127.0f, -127.0f, 128.0f, -128.0f};
  for (int k = -140; k <= 140; ++k) {
    const float mid = static_cast<float>(k) + 0.5f;
    for (const float x : {static_cast<float>(k), mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)})
      probes.push_back(x);
  }
  for (int i = 1; i < 4000; ++i) probes.push_back(static_cast<float>(i) * 0.0371f - 75.0f);
  for (const float x : probes) {
    CAPTURE(x);
    const double r = std::clamp(std::nearbyint(static_cast<double>(x)), -127.0, 127.0);  // ties to even
    const int got = static_cast<int8_t>(flashattn::quantize_bits(DType::i8, x));
    if (got != static_cast<int>(r)) CHECK(got == static_cast<int>(r));
  }
}
