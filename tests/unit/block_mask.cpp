// Block-sparse masks (docs/semantics.md, "Block-sparse masks"): BlockMask's lookups and tile
// classification against brute force, the builders, and every bad field rejected with
// flashattn::Error naming it, before anything is written, by validate, the oracle and the CPU.
#include <cstdint>
#include <vector>

#include "flashattn/block_mask_build.hpp"
#include "fixture.hpp"

using flashattn::BlockKind;
using flashattn::BlockMask;
using flashattn::TileKind;
using unit::Fixture;
using unit::reject;

namespace {

// A small pseudo-random predicate over (s, h, i, j): blocks of every kind at block size 3 x 4 when
// `blocky`, else element noise.
bool noise(int64_t s, int64_t h, int64_t i, int64_t j) {
  const uint64_t x = (static_cast<uint64_t>(s) * 1000003u + h * 10007u + i * 101u + j) * 0x9E3779B97F4A7C15ull;
  return (x >> 61) < 5;
}

// Per 2 x 2 block of (s, h): key blocks 0 and 2 full, key block 1 hidden, full (every element) or
// partial (the first row only) by (s + h + query block) % 3.
bool blocky(int64_t s, int64_t h, int64_t i, int64_t j) {
  const int64_t kb = j / 2;
  const int kind = kb == 0 || kb == 2 ? 1 : static_cast<int>((s + h + i / 2) % 3);
  return kind == 1 || (kind == 2 && i % 2 == 0);
}

// Lists for the fixture's call (2 sequences, 4 heads, 4 rows, 5 keys) at block 2 x 2: per head.
struct MaskFixture : Fixture {
  flashattn::BlockMaskBuffers blocks;
  MaskFixture() {
    blocks = flashattn::block_mask_from_predicate(shape.batch, shape.hq, shape.nq, shape.nk, 2, 2, blocky);
    REQUIRE(!blocks.bits.empty());
    fwd.block_mask = blocks.view();
    bwd.block_mask = fwd.block_mask;
  }
};

}  // namespace

TEST_CASE("block mask: lookups, visibility and tile classes equal brute force") {
  for (const auto& [bq, bk] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 3}, {3, 4}, {4, 2}, {7, 7}}) {
    const int64_t S = 2, H = 3, N = 9, K = 11;
    const flashattn::BlockMaskBuffers b = flashattn::block_mask_from_predicate(S, H, N, K, bq, bk, noise);
    const BlockMask m = b.view();
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < K; ++j) REQUIRE(m.visible(s, h, i, j) == noise(s, h, i, j));
        // Every tile of every size: empty iff no element's block is listed, full iff every block
        // met is listed and none needs bits.
        for (int64_t r0 = 0; r0 < N; ++r0)
          for (int64_t r1 = r0 + 1; r1 <= N; ++r1)
            for (int64_t c0 = 0; c0 < K; ++c0)
              for (int64_t c1 = c0 + 1; c1 <= K; ++c1) {
                bool any = false, all = true;
                for (int64_t i = r0; i < r1; ++i)
                  for (int64_t j = c0; j < c1; ++j) {
                    const BlockKind k = m.kind(s, h, i / bq, j / bk);
                    any = any || k != BlockKind::hidden;
                    all = all && k == BlockKind::full;
                  }
                const TileKind t = m.classify(s, h, r0, r1, c0, c1);
                REQUIRE((t == TileKind::empty) == !any);
                REQUIRE((t == TileKind::full) == all);
              }
      }
  }
}

TEST_CASE("block mask builders: full, partial and hidden blocks as documented") {
  // 5 rows x 6 keys at 2 x 3: row block 0 sees everything (full), row block 1 keys 0..2 only in
  // row 2 (partial), row block 2 nothing.
  auto pred = [](int64_t, int64_t, int64_t i, int64_t j) { return i < 2 || (i == 2 && j < 3); };
  const flashattn::BlockMaskBuffers b = flashattn::block_mask_from_predicate(1, 1, 5, 6, 2, 3, pred);
  CHECK(b.q_blocks == 3);
  CHECK(b.full_count == std::vector<int32_t>{2, 0, 0});
  CHECK(b.partial_count == std::vector<int32_t>{0, 1, 0});
  CHECK(b.partial_index[b.max_blocks * 1] == 0);
  CHECK(b.listed() == 3);
  const BlockMask m = b.view();
  CHECK(m.visible(0, 0, 2, 1));
  CHECK(!m.visible(0, 0, 3, 1));  // partial block, bit 0
  CHECK(!m.visible(0, 0, 2, 4));  // hidden block
  // A dense mask gives the same lists.
  std::vector<uint8_t> dense(30);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 6; ++j) dense[i * 6 + j] = pred(0, 0, i, j);
  const flashattn::BlockMaskBuffers d = flashattn::block_mask_from_dense(dense.data(), 1, 5, 1, 6, 30, 6, 6, 2, 3);
  CHECK(d.full_count == b.full_count);
  CHECK(d.partial_count == b.partial_count);
  CHECK(d.bits == b.bits);
  // The window rule: causal Nq = Nk = 4 at 2 x 2 lists the diagonal blocks partial, below full.
  Fixture fx(unit::Shape{1, 4, 4, 1, 1, 8});
  flashattn::ForwardArgs a = fx.forward();
  a.causal = true;
  const flashattn::BlockMaskBuffers r = flashattn::block_mask_from_rule(a, 2, 2);
  CHECK(r.full_count == std::vector<int32_t>{0, 1});
  CHECK(r.partial_count == std::vector<int32_t>{1, 1});
  CHECK(r.full_index[r.max_blocks] == 0);
  CHECK(r.partial_index[r.max_blocks] == 1);
  CHECK(r.bits.empty());
}

TEST_CASE("validate: a block mask is accepted as documented") {
  MaskFixture fx;
  CHECK_NOTHROW(flashattn::validate(fx.forward()));
  CHECK_NOTHROW(flashattn::validate(fx.bwd));
  flashattn::ForwardArgs a = fx.forward();
  a.block_mask.partial_count = nullptr;  // one kind may be left out
  a.block_mask.partial_index = nullptr;
  CHECK_NOTHROW(flashattn::validate(a));
  a = fx.forward();
  a.block_mask.bits = {};  // partial blocks without bits
  CHECK_NOTHROW(flashattn::validate(a));
}

TEST_CASE("validate: bad block masks are rejected naming the field") {
  MaskFixture fx;
  auto bad = [&](auto change, std::initializer_list<const char*> words) {
    flashattn::ForwardArgs a = fx.forward();
    change(a.block_mask);
    reject(fx, a, words);
    flashattn::BackwardArgs b = fx.bwd;
    change(b.block_mask);
    reject(fx, b, words);
  };
  bad([](BlockMask& m) { m.block_q = 0; }, {"block_mask.block_q (0)", "[1, 2^31)"});
  bad([](BlockMask& m) { m.block_k = -2; }, {"block_mask.block_k (-2)"});
  bad([](BlockMask& m) { m.batch = 3; }, {"block_mask.batch (3)", "number of sequences (2)"});
  bad([](BlockMask& m) { m.heads = 2; }, {"block_mask.heads (2)", "q.heads (4)"});
  bad([](BlockMask& m) { m.q_blocks = 1; }, {"block_mask.q_blocks (1)", "= 2"});
  bad([](BlockMask& m) { m.max_blocks = -1; }, {"block_mask.max_blocks (-1)"});
  bad([](BlockMask& m) { m.partial_index = nullptr; }, {"partial_count and block_mask.partial_index must be given together"});
  std::vector<int32_t> counts(fx.blocks.full_count), index(fx.blocks.full_index);
  bad([&](BlockMask& m) {
    counts = fx.blocks.full_count;
    counts[3] = static_cast<int32_t>(m.max_blocks + 1);
    m.full_count = counts.data();
  }, {"block_mask.full_count[3]", "must be in [0, max_blocks"});
  // An out-of-range entry, and an unsorted list, in the first list that has two full blocks.
  int64_t l2 = -1;
  for (size_t l = 0; l < counts.size() && l2 < 0; ++l)
    if (fx.blocks.full_count[l] >= 2) l2 = static_cast<int64_t>(l);
  REQUIRE(l2 >= 0);
  bad([&](BlockMask& m) {
    index = fx.blocks.full_index;
    index[l2 * m.max_blocks] = 3;  // keys 5 at block 2: blocks 0..2
    m.full_index = index.data();
  }, {"block_mask.full_index", "(3) must be in [0, 3)"});
  bad([&](BlockMask& m) {
    index = fx.blocks.full_index;
    std::swap(index[l2 * m.max_blocks], index[l2 * m.max_blocks + 1]);
    m.full_index = index.data();
  }, {"block_mask.full_index", "strictly increasing"});
  bad([&](BlockMask& m) {  // a block listed twice
    index = fx.blocks.full_index;
    index[l2 * m.max_blocks + 1] = index[l2 * m.max_blocks];
    m.full_index = index.data();
  }, {"block_mask.full_index", "strictly increasing"});
  // A block both full and partial.
  std::vector<int32_t> pcount(fx.blocks.partial_count), pindex(fx.blocks.partial_index);
  bad([&](BlockMask& m) {
    pcount = fx.blocks.partial_count;
    pindex = fx.blocks.partial_index;
    const int64_t l = l2;
    pcount[l] = 1;
    pindex[l * m.max_blocks] = fx.blocks.full_index[l * m.max_blocks];
    m.partial_count = pcount.data();
    m.partial_index = pindex.data();
  }, {"listed both full and partial"});
  // Bits.
  bad([](BlockMask& m) { m.bits.heads = 3; }, {"block_mask.bits.heads (3)"});
  bad([](BlockMask& m) { m.bits.seq = 2; }, {"block_mask.bits.seq (2)", "q.seq (4)"});
  bad([](BlockMask& m) { m.bits.stride_seq = -1; }, {"block_mask.bits strides"});
  bad([](BlockMask& m) { m.bits.data = nullptr; }, {"block_mask.bits.data is null"});
  // Outputs over the lists.
  flashattn::ForwardArgs a = fx.forward();
  a.out.data = const_cast<int32_t*>(a.block_mask.full_index);
  reject(fx, a, {"out overlaps input block_mask.full_index"});
  flashattn::BackwardArgs b = fx.bwd;
  b.dq.data = const_cast<int32_t*>(b.block_mask.partial_count);
  reject(fx, b, {"dq overlaps input block_mask."});
}
