// Valid edge cases are accepted and computed: empty sequences, packed qkv (interleaved views of one
// buffer), stride-0 broadcast inputs, bhsd and padded layouts. Results are compared with the same
// problem in contiguous buffers (the oracle is deterministic, so they must match bit for bit).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "fixture.hpp"

using flashattn::bshd;
using flashattn::DType;
using flashattn::Tensor;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Returns n values in [-1, 1) from a fixed linear congruential sequence.
std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> r(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1u;
  for (auto& e : r) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return r;
}

// Copies view t (f32) into a dense bshd vector.
std::vector<float> dense(const flashattn::ConstTensor& t) {
  std::vector<float> r;
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t x = 0; x < t.dim; ++x) r.push_back(static_cast<const float*>(t.data)[t.offset(b, s, h) + x]);
  return r;
}

// The results of a forward and backward call on contiguous copies of the given views.
struct Results {
  std::vector<float> out, lse, dq, dk, dv;
};

Results run_contiguous(const flashattn::BackwardArgs& a) {  // a: the backward; its forward shares the views
  auto q = dense(a.q), k = dense(a.k), v = dense(a.v), dout = dense(a.dout);
  Results r;
  r.out.resize(q.size());
  r.lse.resize(static_cast<size_t>(a.q.batch * a.q.heads * a.q.seq));
  r.dq.resize(q.size());
  r.dk.resize(k.size());
  r.dv.resize(k.size());
  flashattn::ForwardArgs f;
  static_cast<flashattn::AttentionArgs&>(f) = a;
  f.q = bshd(q.data(), DType::f32, a.q.batch, a.q.seq, a.q.heads, a.q.dim);
  f.k = bshd(k.data(), DType::f32, a.k.batch, a.k.seq, a.k.heads, a.k.dim);
  f.v = bshd(v.data(), DType::f32, a.v.batch, a.v.seq, a.v.heads, a.v.dim);
  f.out = bshd(r.out.data(), DType::f32, a.q.batch, a.q.seq, a.q.heads, a.q.dim);
  f.lse = r.lse.data();
  flashattn::BackwardArgs c = flashattn::backward_args(f);
  c.dout = bshd(dout.data(), DType::f32, a.q.batch, a.q.seq, a.q.heads, a.q.dim);
  c.dq = bshd(r.dq.data(), DType::f32, a.q.batch, a.q.seq, a.q.heads, a.q.dim);
  c.dk = bshd(r.dk.data(), DType::f32, a.k.batch, a.k.seq, a.k.heads, a.k.dim);
  c.dv = bshd(r.dv.data(), DType::f32, a.k.batch, a.k.seq, a.k.heads, a.k.dim);
  flashattn::reference::forward(f);
  flashattn::reference::backward(c);
  return r;
}

// Runs the forward `f` and the backward `a` (over f's out and lse) on their views and checks them
// against contiguous copies.
void check_same_as_contiguous(const flashattn::ForwardArgs& f, const flashattn::BackwardArgs& a) {
  const Results want = run_contiguous(a);
  REQUIRE_NOTHROW(flashattn::reference::forward(f));
  REQUIRE_NOTHROW(flashattn::reference::backward(a));
  CHECK(dense(a.out) == want.out);
  CHECK(std::vector<float>(a.lse, a.lse + want.lse.size()) == want.lse);
  CHECK(dense(a.dq) == want.dq);
  CHECK(dense(a.dk) == want.dk);
  CHECK(dense(a.dv) == want.dv);
}

}  // namespace

TEST_CASE("accepts: packed qkv and dqkv as interleaved views of one buffer") {
  const int64_t B = 2, N = 5, H = 2, d = 4, row = 3 * H * d;  // buffer [B, N, 3, H, d]
  std::vector<float> qkv = values(B * N * row, 1), dqkv(qkv.size()), out(B * N * H * d), lse(B * H * N);
  std::vector<float> dout = values(B * N * H * d, 2);
  auto slot = [&](std::vector<float>& buf, int which) {
    return Tensor{buf.data() + which * H * d, DType::f32, B, N, H, d, N * row, row, d};
  };
  flashattn::ForwardArgs f;
  f.q = slot(qkv, 0);
  f.k = slot(qkv, 1);
  f.v = slot(qkv, 2);
  f.out = bshd(out.data(), DType::f32, B, N, H, d);
  f.lse = lse.data();
  f.causal = true;
  flashattn::BackwardArgs a = flashattn::backward_args(f);
  a.dout = bshd(dout.data(), DType::f32, B, N, H, d);
  a.dq = slot(dqkv, 0);
  a.dk = slot(dqkv, 1);
  a.dv = slot(dqkv, 2);
  CHECK_NOTHROW(flashattn::validate(f));
  CHECK_NOTHROW(flashattn::validate(a));
  check_same_as_contiguous(f, a);
}

TEST_CASE("accepts: stride-0 broadcast inputs and bhsd and padded layouts") {
  const int64_t B = 2, Nq = 3, Nk = 4, Hq = 4, Hk = 2, d = 5;
  std::vector<float> q = values(Nq * Hq * d, 3), k = values(Nk * Hk * d, 4), v = values(B * Nk * Hk * d * 2, 5);
  std::vector<float> out(B * Nq * Hq * d), lse(B * Hq * Nq), dout = values(B * Nq * Hq * d, 6);
  std::vector<float> dq(B * Nq * Hq * d * 2), dk(B * Nk * Hk * d), dv(B * Nk * Hk * d);
  flashattn::ForwardArgs f;
  f.q = bshd(q.data(), DType::f32, B, Nq, Hq, d);
  f.q.stride_batch = 0;                       // every batch reads the same queries
  f.k = Tensor{k.data(), DType::f32, B, Nk, Hk, d, 0, d, 0};  // one key row for all heads, all batches
  f.v = Tensor{v.data(), DType::f32, B, Nk, Hk, d, Nk * Hk * d * 2, Hk * d * 2, d + 1};  // padded
  f.out = flashattn::bhsd(out.data(), DType::f32, B, Nq, Hq, d);
  f.lse = lse.data();
  f.window_left = 1;
  flashattn::BackwardArgs a = flashattn::backward_args(f);
  a.dout = bshd(dout.data(), DType::f32, B, Nq, Hq, d);
  a.dq = Tensor{dq.data(), DType::f32, B, Nq, Hq, d, Nq * Hq * d * 2, Hq * d * 2, d};  // padded rows
  a.dk = flashattn::bhsd(dk.data(), DType::f32, B, Nk, Hk, d);
  a.dv = bshd(dv.data(), DType::f32, B, Nk, Hk, d);
  CHECK_NOTHROW(flashattn::validate(a));
  check_same_as_contiguous(f, a);
}

TEST_CASE("accepts: empty sequences") {
  SUBCASE("no queries: nothing to write, null pointers allowed") {
    std::vector<float> k = values(3 * 2 * 4, 7), v = values(3 * 2 * 4, 8);
    flashattn::ForwardArgs a;
    a.q = bshd(nullptr, DType::f32, 1, 0, 2, 4);
    a.k = bshd(k.data(), DType::f32, 1, 3, 2, 4);
    a.v = bshd(v.data(), DType::f32, 1, 3, 2, 4);
    a.out = bshd(nullptr, DType::f32, 1, 0, 2, 4);
    CHECK_NOTHROW(flashattn::reference::forward(a));
  }
  SUBCASE("no keys: out = 0, lse = -inf, zero gradients") {
    std::vector<float> q = values(2 * 3 * 2 * 4, 9), dout = values(q.size(), 10), out(q.size(), 7.0f);
    std::vector<float> lse(2 * 2 * 3, 7.0f), dq(q.size(), 7.0f);
    flashattn::ForwardArgs f;
    f.q = bshd(q.data(), DType::f32, 2, 3, 2, 4);
    f.k = bshd(nullptr, DType::f32, 2, 0, 1, 4);
    f.v = bshd(nullptr, DType::f32, 2, 0, 1, 4);
    f.out = bshd(out.data(), DType::f32, 2, 3, 2, 4);
    f.lse = lse.data();
    f.causal = true;
    REQUIRE_NOTHROW(flashattn::reference::forward(f));
    flashattn::BackwardArgs a = flashattn::backward_args(f);
    for (float o : out) CHECK(o == 0.0f);
    for (float l : lse) CHECK(l == kNegInf);
    a.dout = bshd(dout.data(), DType::f32, 2, 3, 2, 4);
    a.dq = bshd(dq.data(), DType::f32, 2, 3, 2, 4);
    a.dk = bshd(nullptr, DType::f32, 2, 0, 1, 4);
    a.dv = bshd(nullptr, DType::f32, 2, 0, 1, 4);
    REQUIRE_NOTHROW(flashattn::reference::backward(a));
    for (float g : dq) CHECK(g == 0.0f);
  }
  SUBCASE("key length 0 for one sequence") {
    unit::Fixture fx;
    fx.seqlens_k = {0, 5};
    auto a = fx.forward();
    a.seqlens_k = fx.seqlens_k.data();
    REQUIRE_NOTHROW(flashattn::reference::forward(a));
    const int64_t per_batch = 4 * 4 * 8;
    for (int64_t i = 0; i < per_batch; ++i) CHECK(fx.out[i] == 0.0f);
    for (int64_t i = 0; i < 4 * 4; ++i) CHECK(fx.lse[i] == kNegInf);
    for (int64_t i = 4 * 4; i < 2 * 4 * 4; ++i) CHECK(std::isfinite(fx.lse[i]));
  }
  SUBCASE("batch 0") {
    flashattn::ForwardArgs a;
    a.out = bshd(nullptr, DType::bf16, 0, 3, 2, 4);
    a.q = a.out;
    a.k = a.v = bshd(nullptr, DType::bf16, 0, 3, 2, 4);
    CHECK_NOTHROW(flashattn::reference::forward(a));
  }
}
