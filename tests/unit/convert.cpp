// f16 and bf16 conversions (flashattn/convert.hpp): round-to-nearest-even on hand-worked bit
// patterns, NaN, infinities, overflow, the f16 subnormal range, and exhaustive checks of all 65536
// patterns of each type against an independent nearest-value search in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ios>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/convert.hpp"

using flashattn::bf16_bits_from_float;
using flashattn::bits_float;
using flashattn::f16_bits_from_float;
using flashattn::float_bits;
using flashattn::float_from_bf16_bits;
using flashattn::float_from_f16_bits;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr uint32_t kPatterns = 1u << 16;

bool is_nan16(uint16_t h, uint16_t exp_mask) { return (h & exp_mask) == exp_mask && (h & ~exp_mask & 0x7fffu) != 0; }
bool is_f16_nan(uint16_t h) { return is_nan16(h, 0x7c00u); }
bool is_bf16_nan(uint16_t h) { return is_nan16(h, 0x7f80u); }

// Returns the value of f16 pattern h computed from the IEEE definition in double (independent of
// the code under test): (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024.
double f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000u) ? -mag : mag;
}

// Returns x rounded to the nearest of the sorted finite `grid` (ties to the pattern with an even
// last bit), or ±inf beyond the overflow threshold `limit` (the midpoint between the largest finite
// value and the next power of two, which rounds to inf).
struct Nearest {
  std::vector<std::pair<double, uint16_t>> grid;  // non-negative finite values and their patterns
  double limit = 0;

  uint16_t operator()(float xf, uint16_t inf_bits) const {
    const double x = std::fabs(static_cast<double>(xf));
    const uint16_t sign = std::signbit(xf) ? 0x8000u : 0u;
    if (x >= limit) return sign | inf_bits;
    auto hi = std::lower_bound(grid.begin(), grid.end(), std::make_pair(x, uint16_t{0}));
    if (hi == grid.end()) return sign | grid.back().second;  // between the largest finite and limit
    if (hi->first == x) return sign | hi->second;
    auto lo = hi - 1;
    const double dl = x - lo->first, dh = hi->first - x;
    const uint16_t pick = dl < dh ? lo->second : dh < dl ? hi->second : ((lo->second & 1u) ? hi->second : lo->second);
    return sign | pick;
  }
};

Nearest f16_nearest() {
  Nearest n;
  for (uint32_t h = 0; h < 0x7c00u; ++h) n.grid.push_back({f16_value(static_cast<uint16_t>(h)), static_cast<uint16_t>(h)});
  n.limit = 65520.0;  // midpoint of 65504 and 65536
  return n;
}

Nearest bf16_nearest() {
  Nearest n;
  for (uint32_t h = 0; h < 0x7f80u; ++h)
    n.grid.push_back({static_cast<double>(bits_float(h << 16)), static_cast<uint16_t>(h)});
  n.limit = std::ldexp(2.0 - std::ldexp(1.0, -8), 127);  // midpoint of bf16 max and 2^128
  return n;
}

// Float inputs that probe every rounding decision: each 16-bit value, the midpoints to its
// neighbour, and the floats one ulp either side of those midpoints.
std::vector<float> probes(double (*value)(uint16_t), uint16_t last_finite) {
  std::vector<float> r;
  for (uint32_t h = 0; h < last_finite; ++h) {
    const double a = value(static_cast<uint16_t>(h)), b = value(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((a + b) / 2);  // exact: a, b have few significant bits
    for (float x : {static_cast<float>(a), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      r.push_back(x);
      r.push_back(-x);
    }
  }
  return r;
}

double bf16_value(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

}  // namespace

TEST_CASE("bf16: round to nearest even on hand-worked patterns") {
  CHECK(bf16_bits_from_float(1.0f) == 0x3f80u);
  CHECK(bf16_bits_from_float(bits_float(0x3f808000u)) == 0x3f80u);  // 1 + 2^-8: tie, 0x3f80 even
  CHECK(bf16_bits_from_float(bits_float(0x3f818000u)) == 0x3f82u);  // tie, 0x3f81 odd: up
  CHECK(bf16_bits_from_float(bits_float(0x3f808001u)) == 0x3f81u);  // just above the tie
  CHECK(bf16_bits_from_float(bits_float(0x3f817fffu)) == 0x3f81u);  // just below the tie
  CHECK(bf16_bits_from_float(bits_float(0xbf818000u)) == 0xbf82u);  // negative tie
  CHECK(bf16_bits_from_float(bits_float(0x3f7fffffu)) == 0x3f80u);  // carry into the exponent
  CHECK(bf16_bits_from_float(-0.0f) == 0x8000u);
  CHECK(bf16_bits_from_float(bits_float(0x00008000u)) == 0x0000u);  // subnormal tie to even (0)
  CHECK(bf16_bits_from_float(bits_float(0x00018000u)) == 0x0002u);  // subnormal tie up to even
}

TEST_CASE("bf16: infinities and overflow and NaN") {
  CHECK(bf16_bits_from_float(kInf) == 0x7f80u);
  CHECK(bf16_bits_from_float(-kInf) == 0xff80u);
  CHECK(bf16_bits_from_float(bits_float(0x7f7f7fffu)) == 0x7f7fu);  // below the tie: largest finite
  CHECK(bf16_bits_from_float(bits_float(0x7f7f8000u)) == 0x7f80u);  // tie with 2^128: even is inf
  CHECK(bf16_bits_from_float(std::numeric_limits<float>::max()) == 0x7f80u);
  CHECK(bf16_bits_from_float(-std::numeric_limits<float>::max()) == 0xff80u);
  // Signalling and quiet NaNs whose payload lies only in the low bits must not become inf.
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = bf16_bits_from_float(bits_float(u));
    CHECK_MESSAGE(is_bf16_nan(b), "0x" << std::hex << u << " -> 0x" << b);
    CHECK((b & 0x8000u) == ((u >> 16) & 0x8000u));  // sign kept
  }
  CHECK(std::isnan(float_from_bf16_bits(0x7fc0u)));
}

TEST_CASE("f16: round to nearest even on hand-worked patterns") {
  CHECK(f16_bits_from_float(1.0f) == 0x3c00u);
  CHECK(f16_bits_from_float(1.0f + 0x1p-11f) == 0x3c00u);         // tie, 0x3c00 even
  CHECK(f16_bits_from_float(1.0f + 3 * 0x1p-11f) == 0x3c02u);     // tie, 0x3c01 odd: up
  CHECK(f16_bits_from_float(std::nextafter(1.0f + 0x1p-11f, 2.0f)) == 0x3c01u);
  CHECK(f16_bits_from_float(-(1.0f + 3 * 0x1p-11f)) == 0xbc02u);
  CHECK(f16_bits_from_float(2048.0f + 1.0f) == 0x6800u);          // 2049: tie between 2048 and 2050
  CHECK(f16_bits_from_float(2048.0f + 3.0f) == 0x6802u);          // 2051: tie, up to 2052
  CHECK(f16_bits_from_float(-0.0f) == 0x8000u);
  CHECK(f16_bits_from_float(0.1f) == 0x2e66u);                    // 0.0999755859375
}

TEST_CASE("f16: overflow and infinities and NaN") {
  CHECK(f16_bits_from_float(65504.0f) == 0x7bffu);                          // largest finite
  CHECK(f16_bits_from_float(std::nextafter(65520.0f, 0.0f)) == 0x7bffu);   // below the threshold
  CHECK(f16_bits_from_float(65520.0f) == 0x7c00u);                          // tie with 65536: inf
  CHECK(f16_bits_from_float(-65520.0f) == 0xfc00u);
  CHECK(f16_bits_from_float(1e6f) == 0x7c00u);
  CHECK(f16_bits_from_float(kInf) == 0x7c00u);
  CHECK(f16_bits_from_float(-kInf) == 0xfc00u);
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7f801fffu, 0xff800001u, 0xffffffffu}) {
    const uint16_t h = f16_bits_from_float(bits_float(u));
    CHECK_MESSAGE(is_f16_nan(h), "0x" << std::hex << u << " -> 0x" << h);
    CHECK((h & 0x8000u) == ((u >> 16) & 0x8000u));
  }
  CHECK(std::isinf(float_from_f16_bits(0x7c00u)));
  CHECK(std::isnan(float_from_f16_bits(0x7e00u)));
}

TEST_CASE("f16: subnormals and the underflow boundary") {
  const float tiny = 0x1p-24f;  // smallest subnormal f16
  CHECK(f16_bits_from_float(tiny) == 0x0001u);
  CHECK(float_from_f16_bits(0x0001u) == tiny);
  CHECK(f16_bits_from_float(0x1p-25f) == 0x0000u);                          // half of it: tie to 0
  CHECK(f16_bits_from_float(std::nextafter(0x1p-25f, 1.0f)) == 0x0001u);    // just above: rounds up
  CHECK(f16_bits_from_float(-std::nextafter(0x1p-25f, 1.0f)) == 0x8001u);
  CHECK(f16_bits_from_float(0x1p-26f) == 0x0000u);
  CHECK(f16_bits_from_float(-0x1p-26f) == 0x8000u);                         // signed zero kept
  CHECK(f16_bits_from_float(1.5f * tiny) == 0x0002u);                       // tie between 1 and 2: even
  CHECK(f16_bits_from_float(2.5f * tiny) == 0x0002u);                       // tie between 2 and 3: even
  CHECK(f16_bits_from_float(1023.0f * tiny) == 0x03ffu);                    // largest subnormal
  CHECK(f16_bits_from_float(1023.5f * tiny) == 0x0400u);                    // tie: smallest normal (even)
  CHECK(f16_bits_from_float(0x1p-14f) == 0x0400u);
  CHECK(float_from_f16_bits(0x03ffu) == 1023.0f * tiny);
  CHECK(f16_bits_from_float(std::numeric_limits<float>::denorm_min()) == 0x0000u);
}

TEST_CASE("f16: all 65536 patterns decode exactly and round trip") {
  for (uint32_t h = 0; h < kPatterns; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float x = float_from_f16_bits(b);
    if (is_f16_nan(b)) {
      CHECK(std::isnan(x));
      CHECK(is_f16_nan(f16_bits_from_float(x)));
      continue;
    }
    CHECK_MESSAGE(static_cast<double>(x) == f16_value(b), "pattern 0x" << std::hex << h);
    CHECK_MESSAGE(f16_bits_from_float(x) == b, "pattern 0x" << std::hex << h);
  }
}

TEST_CASE("bf16: all 65536 patterns round trip") {
  for (uint32_t h = 0; h < kPatterns; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float x = float_from_bf16_bits(b);
    if (is_bf16_nan(b)) {
      CHECK(std::isnan(x));
      CHECK(is_bf16_nan(bf16_bits_from_float(x)));
      continue;
    }
    CHECK(float_bits(x) == (h << 16));
    CHECK_MESSAGE(bf16_bits_from_float(x) == b, "pattern 0x" << std::hex << h);
  }
}

TEST_CASE("f16 and bf16: rounding equals the nearest representable value (ties to even)") {
  const Nearest f16 = f16_nearest(), bf16 = bf16_nearest();
  int mismatches = 0;
  for (float x : probes(f16_value, 0x7bffu)) {
    const uint16_t got = f16_bits_from_float(x), want = f16(x, 0x7c00u);
    if (got != want && ++mismatches <= 5) FAIL_CHECK("f16 of " << x << ": 0x" << std::hex << got << " != 0x" << want);
  }
  for (float x : probes(bf16_value, 0x7f7fu)) {
    const uint16_t got = bf16_bits_from_float(x), want = bf16(x, 0x7f80u);
    if (got != want && ++mismatches <= 10) FAIL_CHECK("bf16 of " << x << ": 0x" << std::hex << got << " != 0x" << want);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("round_to and load_as_float and store_from_float agree with the bit conversions") {
  using flashattn::DType;
  const float x = 1.0f + 3 * 0x1p-11f;
  CHECK(flashattn::round_to(DType::f32, x) == x);
  CHECK(flashattn::round_to(DType::f16, x) == float_from_f16_bits(0x3c02u));
  CHECK(flashattn::round_to(DType::bf16, bits_float(0x3f818000u)) == float_from_bf16_bits(0x3f82u));
  uint16_t buf[3] = {};
  flashattn::store_from_float(buf, DType::f16, 1, x);
  CHECK(buf[0] == 0u);
  CHECK(buf[1] == 0x3c02u);
  CHECK(buf[2] == 0u);
  CHECK(flashattn::load_as_float(buf, DType::f16, 1) == float_from_f16_bits(0x3c02u));
  flashattn::store_from_float(buf, DType::bf16, 2, bits_float(0x3f808000u));
  CHECK(buf[2] == 0x3f80u);
  CHECK(flashattn::to_float(flashattn::from_float<flashattn::bf16_t>(-2.0f)) == -2.0f);
  CHECK(flashattn::to_float(flashattn::from_float<flashattn::f16_t>(0.5f)) == 0.5f);
  CHECK(flashattn::unit_roundoff(DType::f16) == 0x1p-11);
  CHECK(flashattn::unit_roundoff(DType::bf16) == 0x1p-8);
}
