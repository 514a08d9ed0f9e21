// The public API's ergonomics: const inputs need no cast, and the scale is explicit (empty means
// 1/sqrt(d); any value set, 0 included, is used as given).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "flashattn/reference.hpp"
#ifdef FLASHATTN_UNIT_HAS_CPU
#include "flashattn/cpu.hpp"
#endif

namespace {

using flashattn::DType;

static_assert(std::is_same_v<decltype(flashattn::bshd(static_cast<const float*>(nullptr), DType::f32, 1, 1, 1, 1)),
                             flashattn::ConstTensor>,
              "a const pointer gives a read-only view");
static_assert(std::is_same_v<decltype(flashattn::bshd(static_cast<float*>(nullptr), DType::f32, 1, 1, 1, 1)),
                             flashattn::Tensor>,
              "a writable pointer gives a writable view");
static_assert(std::is_convertible_v<flashattn::Tensor, flashattn::ConstTensor>, "writable views are readable");
static_assert(!std::is_convertible_v<flashattn::ConstTensor, flashattn::Tensor>, "read-only views stay read-only");

constexpr int64_t kNq = 3, kNk = 5, kH = 2, kD = 4;

std::vector<float> ramp(size_t n, float step) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 11) * step - 0.4f;
  return x;
}

// Runs `forward` on const q, k, v with the given scale; returns out.
template <class Forward>
std::vector<float> run(Forward forward, std::optional<float> scale, bool causal) {
  const std::vector<float> q = ramp(kNq * kH * kD, 0.3f), k = ramp(kNk * kH * kD, 0.2f), v = ramp(kNk * kH * kD, 0.1f);
  std::vector<float> out(q.size());
  flashattn::ForwardArgs a;
  a.q = flashattn::bshd(q.data(), DType::f32, 1, kNq, kH, kD);
  a.k = flashattn::bshd(k.data(), DType::f32, 1, kNk, kH, kD);
  a.v = flashattn::bshd(v.data(), DType::f32, 1, kNk, kH, kD);
  a.out = flashattn::bshd(out.data(), DType::f32, 1, kNq, kH, kD);
  a.scale = scale;
  a.causal = causal;
  forward(a);
  return out;
}

// Checks that scale 0 averages the visible V rows and that the empty scale is 1/sqrt(d).
template <class Forward>
void check_scale(Forward forward) {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const std::vector<float> v = ramp(kNk * kH * kD, 0.1f), out = run(forward, 0.0f, causal);
    const flashattn::Mask m = flashattn::Mask::make(kNq, kNk, causal, -1, -1);
    for (int64_t i = 0; i < kNq; ++i)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t x = 0; x < kD; ++x) {
          double mean = 0;
          for (int64_t j = m.key_begin(i); j < m.key_end(i); ++j) mean += v[(j * kH + h) * kD + x];
          mean /= static_cast<double>(m.key_end(i) - m.key_begin(i));
          CHECK(out[(i * kH + h) * kD + x] == doctest::Approx(mean).epsilon(1e-6));
        }
    CHECK(run(forward, std::nullopt, causal) == run(forward, flashattn::default_scale(kD), causal));
    CHECK(run(forward, std::nullopt, causal) != run(forward, 1.0f, causal));
  }
}

}  // namespace

TEST_CASE("api: a zero scale is a uniform average, an empty scale is 1/sqrt(d) (reference)") {
  check_scale([](const flashattn::ForwardArgs& a) { flashattn::reference::forward(a); });
}

#ifdef FLASHATTN_UNIT_HAS_CPU
TEST_CASE("api: a zero scale is a uniform average, an empty scale is 1/sqrt(d) (cpu, every target)") {
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    CAPTURE(t.name);
    flashattn::cpu::Config c;
    c.target = t.bit;
    check_scale([&](const flashattn::ForwardArgs& a) { flashattn::cpu::forward(a, c); });
  }
}
#endif

TEST_CASE("api: backward_args carries the forward's inputs, options, out and lse") {
  std::vector<float> buf(64), lse(8);
  flashattn::ForwardArgs f;
  f.q = flashattn::bshd(buf.data(), DType::f32, 1, 2, 2, 4);
  f.out = flashattn::bshd(buf.data() + 16, DType::f32, 1, 2, 2, 4);
  f.lse = lse.data();
  f.scale = 0.0f;
  f.causal = true;
  f.window_left = 3;
  const flashattn::BackwardArgs b = flashattn::backward_args(f);
  CHECK(b.q.data == f.q.data);
  CHECK(b.out.data == f.out.data);
  CHECK(b.lse == f.lse);
  CHECK(b.scale == 0.0f);
  CHECK(b.causal);
  CHECK(b.window_left == 3);
  CHECK(b.dq.data == nullptr);
}
