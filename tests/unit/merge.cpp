// flashattn::merge of partial results: a hand-computed case, empty halves, in place, layouts and the
// LSE index, rounding of 16-bit outputs, and rejection of bad arguments without writing.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/convert.hpp"
#include "flashattn/error.hpp"
#include "flashattn/merge.hpp"

using flashattn::bshd;
using flashattn::DType;
using flashattn::merge;
using flashattn::Tensor;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kTol = 1e-6f;  // fp32 merge of O(1) values: a few ulps

// One row (B = N = H = 1) of head dim d held in f32 storage.
Tensor row(std::vector<float>& data) { return bshd(data.data(), DType::f32, 1, 1, 1, static_cast<int64_t>(data.size())); }

// Returns the message of the flashattn::Error thrown by f, or "" (and a failed check) if none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const flashattn::Error& e) {
    return e.what();
  }
  FAIL_CHECK("no flashattn::Error");
  return "";
}

}  // namespace

TEST_CASE("merge: hand-computed example") {
  // Half 1 saw keys with Σexp = 1 (LSE 0), half 2 with Σexp = 3 (LSE log 3): weights 1/4 and 3/4.
  std::vector<float> o1 = {1.0f, 2.0f}, o2 = {3.0f, -1.0f}, out = {9.0f, 9.0f};
  const float l1 = 0.0f, l2 = std::log(3.0f);
  float lse = 9.0f;
  merge(row(o1), &l1, row(o2), &l2, row(out), &lse);
  CHECK(out[0] == doctest::Approx(2.5).epsilon(kTol));    // 1/4·1 + 3/4·3
  CHECK(out[1] == doctest::Approx(-0.25).epsilon(kTol));  // 1/4·2 − 3/4·1
  CHECK(lse == doctest::Approx(std::log(4.0)).epsilon(kTol));
}

TEST_CASE("merge: an empty half leaves the other half exactly") {
  std::vector<float> empty = {0.0f, 0.0f, 0.0f}, full = {0.1f, -7.25f, 3e-5f}, out(3, 9.0f);
  const float l_empty = kNegInf, l_full = 2.75f;
  float lse = 0.0f;
  merge(row(empty), &l_empty, row(full), &l_full, row(out), &lse);
  CHECK(out == full);
  CHECK(lse == l_full);
  std::fill(out.begin(), out.end(), 9.0f);
  merge(row(full), &l_full, row(empty), &l_empty, row(out), &lse);
  CHECK(out == full);
  CHECK(lse == l_full);
}

TEST_CASE("merge: both halves empty give O = 0 and LSE = -inf and no NaN") {
  std::vector<float> o1 = {0.0f, 0.0f}, o2 = {0.0f, 0.0f}, out = {9.0f, 9.0f};
  const float l = kNegInf;
  float lse = 0.0f;
  merge(row(o1), &l, row(o2), &l, row(out), &lse);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 0.0f);
  CHECK(lse == kNegInf);
}

TEST_CASE("merge: in place (out and lse_out alias the first or second operand)") {
  std::vector<float> o1 = {1.0f, 2.0f}, o2 = {3.0f, -1.0f};
  float l1 = 0.0f, l2 = std::log(3.0f);
  SUBCASE("first") {
    merge(row(o1), &l1, row(o2), &l2, row(o1), &l1);
    CHECK(o1[0] == doctest::Approx(2.5).epsilon(kTol));
    CHECK(o1[1] == doctest::Approx(-0.25).epsilon(kTol));
    CHECK(l1 == doctest::Approx(std::log(4.0)).epsilon(kTol));
  }
  SUBCASE("second") {
    merge(row(o1), &l1, row(o2), &l2, row(o2), &l2);
    CHECK(o2[0] == doctest::Approx(2.5).epsilon(kTol));
    CHECK(o2[1] == doctest::Approx(-0.25).epsilon(kTol));
    CHECK(l2 == doctest::Approx(std::log(4.0)).epsilon(kTol));
  }
}

TEST_CASE("merge: layouts and the [B x H x N] LSE index") {
  const int64_t B = 2, N = 3, H = 2, d = 4, count = B * N * H * d;
  std::vector<float> o1(count), o2(count), out(count, 9.0f), l1(B * H * N), l2(B * H * N), lo(B * H * N);
  const Tensor t1 = bshd(o1.data(), DType::f32, B, N, H, d);
  const Tensor t2 = flashattn::bhsd(o2.data(), DType::f32, B, N, H, d);  // a different layout
  const Tensor to = bshd(out.data(), DType::f32, B, N, H, d);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < N; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t li = (b * H + h) * N + s;
        l1[li] = 0.1f * static_cast<float>(li);
        l2[li] = li % 3 == 0 ? kNegInf : 1.0f - 0.2f * static_cast<float>(li);
        for (int64_t x = 0; x < d; ++x) {
          o1[t1.offset(b, s, h) + x] = static_cast<float>(x + li);
          o2[t2.offset(b, s, h) + x] = li % 3 == 0 ? 0.0f : -static_cast<float>(x * li);
        }
      }
  merge(t1, l1.data(), t2, l2.data(), to, lo.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < N; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t li = (b * H + h) * N + s;
        const double m = std::fmax(l1[li], l2[li]);
        const double w1 = std::exp(l1[li] - m), w2 = std::exp(static_cast<double>(l2[li]) - m);
        CHECK(lo[li] == doctest::Approx(m + std::log(w1 + w2)).epsilon(kTol));
        for (int64_t x = 0; x < d; ++x) {
          const double want = (w1 * o1[t1.offset(b, s, h) + x] + w2 * o2[t2.offset(b, s, h) + x]) / (w1 + w2);
          CHECK(out[to.offset(b, s, h) + x] == doctest::Approx(want).epsilon(kTol).scale(1.0));
        }
      }
}

TEST_CASE("merge: 16-bit outputs are rounded to nearest even") {
  // Equal weights: O = (O1 + O2) / 2, exact in fp32, a tie in the 16-bit type.
  const float l = 0.5f;
  float lse = 0.0f;
  SUBCASE("bf16") {
    uint16_t a[2] = {0x3f80u, 0x3f81u}, b[2] = {0x3f81u, 0x3f82u}, out[2] = {};  // 1, 1+2^-7, 1+2^-6
    const Tensor ta = bshd(a, DType::bf16, 1, 1, 1, 2), tb = bshd(b, DType::bf16, 1, 1, 1, 2);
    merge(ta, &l, tb, &l, bshd(out, DType::bf16, 1, 1, 1, 2), &lse);
    CHECK(out[0] == 0x3f80u);  // 1 + 2^-8: tie, down to even (truncation would agree)
    CHECK(out[1] == 0x3f82u);  // 1 + 3·2^-8: tie, up to even (truncation would give 0x3f81)
    CHECK(lse == doctest::Approx(0.5 + std::log(2.0)).epsilon(kTol));
  }
  SUBCASE("f16") {
    uint16_t a[2] = {0x3c00u, 0x3c01u}, b[2] = {0x3c01u, 0x3c02u}, out[2] = {};
    const Tensor ta = bshd(a, DType::f16, 1, 1, 1, 2), tb = bshd(b, DType::f16, 1, 1, 1, 2);
    merge(ta, &l, tb, &l, bshd(out, DType::f16, 1, 1, 1, 2), &lse);
    CHECK(out[0] == 0x3c00u);
    CHECK(out[1] == 0x3c02u);
  }
}

TEST_CASE("merge: bad arguments throw flashattn::Error and write nothing") {
  const int64_t B = 1, N = 2, H = 2, d = 4;
  std::vector<float> o1(B * N * H * d + 4, 1.0f), o2(o1.size(), 2.0f), out(o1.size(), 9.0f);
  std::vector<float> l1(B * H * N, 0.0f), l2(l1.size(), 0.0f), lo(l1.size(), 9.0f);
  Tensor t1 = bshd(o1.data(), DType::f32, B, N, H, d), t2 = bshd(o2.data(), DType::f32, B, N, H, d);
  Tensor to = bshd(out.data(), DType::f32, B, N, H, d);
  float* lo_ptr = lo.data();
  const float* l2_ptr = l2.data();
  std::vector<const char*> words;
  SUBCASE("shape") { t2.seq = 1; words = {"o2 shape [1, 1, 2, 4] must equal o1 shape [1, 2, 2, 4]"}; }
  SUBCASE("out shape") { to.dim = 2; words = {"out shape [1, 2, 2, 2] must equal o1 shape"}; }
  SUBCASE("dtype") { to.dtype = DType::f16; words = {"out.dtype (f16) must equal o1.dtype (f32)"}; }
  SUBCASE("null data") { to.data = nullptr; words = {"out.data is null"}; }
  SUBCASE("null lse") { l2_ptr = nullptr; words = {"lse2 is null"}; }
  SUBCASE("null lse_out") { lo_ptr = nullptr; words = {"lse_out is null"}; }
  SUBCASE("misaligned") {
    t2.data = reinterpret_cast<char*>(o2.data()) + 2;
    words = {"o2.data", "not aligned"};
  }
  SUBCASE("negative stride") { to.stride_seq = -8; words = {"out.stride_seq (-8) must not be negative"}; }
  SUBCASE("out overlaps itself") { to.stride_seq = 4; words = {"out.stride_", "makes the output overlap itself"}; }
  SUBCASE("out shifted over o1") {
    to.data = o1.data() + 4;
    words = {"out overlaps o1 in memory without being the same view"};
  }
  SUBCASE("huge size") { to.seq = int64_t{1} << 31; words = {"out.seq (2147483648) must be below 2^31"}; }
  const std::vector<float> out_before = out, lo_before = lo;
  const std::string msg = error_of([&] { merge(t1, l1.data(), t2, l2_ptr, to, lo_ptr); });
  for (const char* w : words) CHECK_MESSAGE(msg.find(w) != std::string::npos, "\"" << msg << "\" lacks \"" << std::string(w) << "\"");
  CHECK(std::memcmp(out.data(), out_before.data(), out.size() * sizeof(float)) == 0);
  CHECK(lo == lo_before);
}
