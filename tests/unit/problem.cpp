// Problem geometry helpers (flashattn/problem.hpp): sequences of plain, key-length and varlen
// calls, the LSE index, the key/value head of a query head, the default scale, ALiBi slopes and
// the order of softcap and ALiBi.
#include <cmath>
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/problem.hpp"

using flashattn::DType;
using flashattn::ForwardArgs;
using flashattn::bshd;

namespace {

// Shape-only args (no data is read by the helpers): q [B, Nq, Hq, d], k [B, Nk, Hk, d].
ForwardArgs shapes(int64_t B, int64_t Nq, int64_t Nk, int64_t Hq, int64_t Hk, int64_t d) {
  ForwardArgs a;
  a.q = a.out = bshd(nullptr, DType::f32, B, Nq, Hq, d);
  a.k = a.v = bshd(nullptr, DType::f32, B, Nk, Hk, d);
  return a;
}

}  // namespace

TEST_CASE("problem: sequences of a batched call") {
  ForwardArgs a = shapes(3, 4, 6, 2, 1, 8);
  a.causal = true;
  a.window_left = 2;
  CHECK(flashattn::num_sequences(a) == 3);
  const flashattn::Sequence s = flashattn::sequence(a, 2);
  CHECK(s.index == 2);
  CHECK(s.batch == 2);
  CHECK(s.q_start == 0);
  CHECK(s.k_start == 0);
  CHECK(s.k_rows == 6);
  CHECK(s.mask.seqlen_q == 4);
  CHECK(s.mask.seqlen_k == 6);
  CHECK(s.mask.left == 2);
  CHECK(s.mask.right == 0);  // causal
}

TEST_CASE("problem: key lengths shorten the mask but not the rows") {
  ForwardArgs a = shapes(2, 3, 6, 2, 2, 4);
  const std::vector<int32_t> lens = {6, 2};
  a.seqlens_k = lens.data();
  const flashattn::Sequence s = flashattn::sequence(a, 1);
  CHECK(s.k_rows == 6);
  CHECK(s.mask.seqlen_k == 2);
  CHECK(s.mask.diag() == -1);  // aligned from the key length: row 2 sees key 1 last
  CHECK(flashattn::sequence(a, 0).mask.seqlen_k == 6);
}

TEST_CASE("problem: varlen sequences and the packed LSE index") {
  ForwardArgs a = shapes(1, 9, 10, 4, 2, 8);  // totals: 9 query rows, 10 key rows
  const std::vector<int32_t> cu_q = {0, 2, 2, 9}, cu_k = {0, 3, 7, 10}, lens = {3, 1, 0};
  a.cu_seqlens_q = cu_q.data();
  a.cu_seqlens_k = cu_k.data();
  a.varlen_batch = 3;
  a.seqlens_k = lens.data();
  CHECK(flashattn::num_sequences(a) == 3);
  const flashattn::Sequence s1 = flashattn::sequence(a, 1), s2 = flashattn::sequence(a, 2);
  CHECK(s1.batch == 0);
  CHECK(s1.q_start == 2);
  CHECK(s1.mask.seqlen_q == 0);  // an empty sequence
  CHECK(s1.k_start == 3);
  CHECK(s1.k_rows == 4);
  CHECK(s1.mask.seqlen_k == 1);
  CHECK(s2.q_start == 2);
  CHECK(s2.mask.seqlen_q == 7);
  CHECK(s2.k_start == 7);
  CHECK(s2.k_rows == 3);
  CHECK(s2.mask.seqlen_k == 0);
  // LSE is [1, Hq, total_q]: head h of row i of sequence s at h * total_q + q_start + i.
  CHECK(flashattn::lse_index(a, s2, 3, 4) == 3 * 9 + 2 + 4);
  CHECK(flashattn::lse_index(a, flashattn::sequence(a, 0), 1, 1) == 9 + 1);
}

TEST_CASE("problem: LSE index of a batched call is [B x Hq x Nq] row-major") {
  const ForwardArgs a = shapes(3, 5, 7, 4, 1, 8);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 5; ++i) CHECK(flashattn::lse_index(a, flashattn::sequence(a, b), h, i) == (b * 4 + h) * 5 + i);
}

TEST_CASE("problem: key/value head of a query head") {
  for (int64_t h = 0; h < 8; ++h) {
    CHECK(flashattn::kv_head(h, 8, 8) == h);      // MHA
    CHECK(flashattn::kv_head(h, 8, 2) == h / 4);  // GQA: groups of 4 consecutive query heads
    CHECK(flashattn::kv_head(h, 8, 1) == 0);      // MQA
  }
  static_assert(flashattn::kv_head(5, 6, 3) == 2, "kv_head is constexpr");
}

TEST_CASE("problem: effective scale and ALiBi slopes") {
  ForwardArgs a = shapes(2, 1, 1, 3, 1, 64);
  CHECK(flashattn::effective_scale(a) == 0.125f);
  a.q.dim = 3;
  CHECK(flashattn::effective_scale(a) == static_cast<float>(1.0 / std::sqrt(3.0)));
  a.scale = -0.5f;
  CHECK(flashattn::effective_scale(a) == -0.5f);
  a.scale = 0.0f;  // an explicit zero is a zero scale, not the default
  CHECK(flashattn::effective_scale(a) == 0.0f);
  a.scale.reset();
  CHECK(flashattn::effective_scale(a) == static_cast<float>(1.0 / std::sqrt(3.0)));
  CHECK(flashattn::alibi_slope(a, 1, 2) == 0.0f);
  const std::vector<float> slopes = {1, 2, 3, 4, 5, 6};
  a.alibi_slopes = slopes.data();
  CHECK(flashattn::alibi_slope(a, 1, 2) == 3.0f);  // shared by every sequence
  a.alibi_batch_stride = 3;
  CHECK(flashattn::alibi_slope(a, 1, 2) == 6.0f);  // per sequence
}

TEST_CASE("problem: softcap is applied before ALiBi with the bottom-right distance") {
  const flashattn::Mask m = flashattn::Mask::make(2, 5, false, -1, -1);  // diag 3
  // Row 0 is aligned with key 3: key 1 is at distance 2, key 4 at distance 1.
  CHECK(flashattn::transform_score(10.0, 0.0, 0.5, 0, 1, m) == 10.0 - 0.5 * 2);
  CHECK(flashattn::transform_score(10.0, 0.0, 0.5, 0, 4, m) == 10.0 - 0.5 * 1);
  CHECK(flashattn::transform_score(10.0, 5.0, 0.0, 0, 1, m) == doctest::Approx(5.0 * std::tanh(2.0)));
  CHECK(flashattn::transform_score(10.0, 5.0, 0.5, 1, 1, m) == doctest::Approx(5.0 * std::tanh(2.0) - 0.5 * 3));
}
