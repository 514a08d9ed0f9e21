// Properties of the oracle's block-sparse masks (docs/semantics.md, "Block-sparse masks"): a block
// mask built from a dense boolean mask equals that mask as a −∞ bias; the block mask of the call's
// own window rule equals no block mask; lists that show every block fully equal no block mask; the
// bits of full blocks never matter. All bitwise, forward and backward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/block_mask_build.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/check.hpp"
#include "props/instance.hpp"
#include "props/oracle_support.hpp"
#include "props/rng.hpp"

namespace props {
namespace {

using flashattn::DType;
using flashattn::reference::Precision;

constexpr int kCases = 60;

// Cases without a block mask of their own (the properties add one), with or without a bias.
CaseSpace plain_space() {
  CaseSpace space;
  space.bias = true;
  return space;
}

// Draws a block size of 1..70.
int64_t draw_block() { return *rc::gen::weightedOneOf<int64_t>({{1, rc::gen::inRange<int64_t>(1, 5)}, {3, rc::gen::inRange<int64_t>(5, 71)}}); }

}  // namespace

TEST_CASE("oracle: a block mask built from a dense mask equals that mask as a -inf bias, bitwise") {
  check("oracle/blocks-dense", [] {
    const Case c = *gen_case(CaseSpace{});
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    const int64_t S = flashattn::num_sequences(a), Nq = a.q.seq, H = a.q.heads, Nk = flashattn::key_columns(a);
    // A random dense mask with rows of every density (row r of a table keeps keys with probability r % 5 / 4).
    Rng rng(c.seed + 17);
    std::vector<uint8_t> dense(static_cast<size_t>(S * Nq * H * Nk));
    for (size_t x = 0; x < dense.size(); ++x) dense[x] = static_cast<uint8_t>(rng.below(4) < static_cast<int64_t>((x / Nk) % 5));
    const flashattn::BlockMaskBuffers blocks =
        flashattn::block_mask_from_dense(dense.data(), S, Nq, H, Nk, Nq * H * Nk, H * Nk, Nk, draw_block(), draw_block());
    // The same mask as a −∞ bias (f32, [S, Nq, H, Nk]), with the call's own bias added in where it has one.
    // Both calls take their bias in f32 [S, Nq, H, Nk]: with the blocks the call's own bias (0 without
    // one), with the −∞ table the same where the mask shows the element and −∞ where it hides it.
    std::vector<float> plain(dense.size()), table(dense.size()), plain_grad(dense.size()), grad(dense.size());
    const flashattn::ConstTensor own = flashattn::bias_view(a);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t i = 0; i < Nq; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < Nk; ++j) {
            const size_t x = static_cast<size_t>(((s * Nq + i) * H + h) * Nk + j);
            plain[x] = flashattn::has_bias(a) ? flashattn::load_as_float(own.data, own.dtype, own.offset(s, i, h) + j) : 0.0f;
            table[x] = dense[x] ? plain[x] : -std::numeric_limits<float>::infinity();
          }
    flashattn::BackwardArgs with_blocks = a, with_bias = a;
    with_blocks.block_mask = blocks.view();
    if (flashattn::has_bias(a)) {
      with_blocks.bias = flashattn::bshd(plain.data(), DType::f32, S, Nq, H, Nk);
      with_blocks.dbias = flashattn::bshd(plain_grad.data(), DType::f32, S, Nq, H, Nk);
      with_bias.dbias = flashattn::bshd(grad.data(), DType::f32, S, Nq, H, Nk);
    } else {
      with_blocks.dbias = {};
      with_bias.dbias = {};
    }
    with_bias.bias = flashattn::bshd(table.data(), DType::f32, S, Nq, H, Nk);
    // Without an own bias the −∞ table is the only bias and there is no dbias to compare.
    require_same_values(with_blocks, with_bias, "block mask from a dense mask vs the mask as a -inf bias",
                        flashattn::has_bias(a));
  }, kCases);
}

TEST_CASE("oracle: the block mask of the call's window rule equals no block mask, bitwise") {
  check("oracle/blocks-rule", [] {
    const Case c = *gen_case(plain_space());
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    flashattn::BackwardArgs b = a;
    const flashattn::BlockMaskBuffers rule = flashattn::block_mask_from_rule(a, draw_block(), draw_block());
    b.block_mask = rule.view();
    require_same_values(a, b, "block mask of the window rule", true);
  }, kCases);
}

TEST_CASE("oracle: lists showing every block fully equal no block mask; bits of full blocks never matter") {
  check("oracle/blocks-all-full", [] {
    const Case c = *gen_case(plain_space());
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    const int64_t S = flashattn::num_sequences(a), H = a.q.heads, Nk = flashattn::key_columns(a);
    int64_t rows = 0;
    for (int64_t s = 0; s < S; ++s) rows = std::max(rows, flashattn::sequence(a, s).mask.seqlen_q);
    const int64_t bq = draw_block(), bk = draw_block();
    // Every block full; random bits (which full blocks ignore) over [S, rows, H].
    const flashattn::BlockMaskBuffers all =
        flashattn::block_mask_from_predicate(S, 1, rows, Nk, bq, bk, [](int64_t, int64_t, int64_t, int64_t) { return true; });
    Rng rng(c.seed + 5);
    std::vector<uint8_t> junk(static_cast<size_t>(S * std::max<int64_t>(rows, 1) * H * ((Nk + 7) / 8) + 1));
    for (uint8_t& x : junk) x = static_cast<uint8_t>(rng.below(256));
    flashattn::BlockMask m = all.view();
    m.bits.data = junk.data();
    m.bits.batch = S;
    m.bits.seq = std::max<int64_t>(rows, 1);
    m.bits.heads = H;
    m.bits.stride_head = (Nk + 7) / 8;
    m.bits.stride_seq = H * m.bits.stride_head;
    m.bits.stride_batch = m.bits.seq * m.bits.stride_seq;
    if (a.cu_seqlens_q == nullptr && m.bits.seq != a.q.seq) m.bits.seq = 1;  // q.seq rows or one shared row
    flashattn::BackwardArgs b = a;
    b.block_mask = m;
    require_same_values(a, b, "every block full", true);
  }, kCases);
}

}  // namespace props
