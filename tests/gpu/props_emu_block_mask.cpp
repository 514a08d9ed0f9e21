// The GPU kernels with block-sparse masks (docs/semantics.md, "Block-sparse masks"), run by the host
// emulator (gpu/emu) on host memory and judged against the fp64 oracle, which applies the block
// mask through flashattn::visible_element:
//   forward (out, lse) and backward in both dQ modes (dq, dk, dv, dbias) by the tolerance rule, over
//   fixed cases (the forward also with split-KV) whose masks come from flashattn::block_mask_from_predicate with random blocks
//   (hidden, full, partial with random bits) at block sizes that divide the GPU tiles and sizes that
//   do not, lists per (sequence, head) and broadcast, empty lists, partial blocks without bits,
//   varlen, GQA, causal and windows, seqlens_k, bias with dbias, dropout, softcap and ALiBi;
//   paged K/V with split-KV (1 and 3 splits) and sinks against the plain call;
//   NaN in every K/V row, bias entry and bit that no listed block covers (and flipped bits of full
//   blocks) changes no output bit (forward, deterministic backward);
//   a block mask from flashattn::block_mask_from_rule gives the bits of the call without one;
//   unsorted and out-of-range lists are rejected (flashattn::Error) before an output is written.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "emu/emu_api.hpp"
#include "emu/props_calls.hpp"
#include "flashattn/block_mask_build.hpp"
#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/inference.hpp"
#include "props/instance.hpp"
#include "tolerance/judge.hpp"

namespace {

using flashattn::BlockMaskBuffers;
using flashattn::DType;
using props::BiasKind;
using props::Case;

// Returns a hash of (seed, a, b, c, d) (splitmix64 steps): the random choices of a mask.
uint64_t mix(uint64_t seed, int64_t a, int64_t b, int64_t c, int64_t d) {
  uint64_t x = seed;
  for (const int64_t v : {a, b, c, d}) {
    x += 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(v);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
  }
  return x;
}

// A block mask of a case: each (sequence, head, query block, key block) is hidden, fully visible or
// partial (about half its elements, at random), by a hash of the seed.
struct MaskSpec {
  int64_t block_q = 16, block_k = 16;
  bool per_sequence = true, per_head = true;  // else lists shared by every sequence / head
  int hidden = 2, full = 1, partial = 1;      // weights of the three kinds (all 0: every list empty)
  bool bits = true;                           // false: partial blocks without bits (visible)
  uint64_t seed = 1;
};

// Returns the block mask of `spec` for a call with `sequences` sequences, `heads` query heads, the
// longest sequence's `rows` query rows and `keys` key columns; keys at or past `key_limit` are never
// visible.
BlockMaskBuffers make_mask(const MaskSpec& spec, int64_t sequences, int64_t heads, int64_t rows, int64_t keys,
                           int64_t key_limit) {
  const int total = spec.hidden + spec.full + spec.partial;
  auto kind = [&](int64_t s, int64_t h, int64_t qb, int64_t kb) {
    if (total == 0) return 0;
    const int x = static_cast<int>(mix(spec.seed, s, h, qb, kb) % static_cast<uint64_t>(total));
    return x < spec.hidden ? 0 : x < spec.hidden + spec.full ? 1 : 2;
  };
  BlockMaskBuffers b = flashattn::block_mask_from_predicate(
      spec.per_sequence ? sequences : 1, spec.per_head ? heads : 1, rows, keys, spec.block_q, spec.block_k,
      [&](int64_t s, int64_t h, int64_t i, int64_t j) {
        if (j >= key_limit) return false;
        const int k = kind(s, h, i / spec.block_q, j / spec.block_k);
        return k == 1 || (k == 2 && (mix(spec.seed + 1, s, h, i, j) & 1));
      });
  if (!spec.bits) b.bits.clear();
  return b;
}

// Returns the view of b, without bits when b has none, and leaving out a kind (count and index
// null) that no list uses (max_blocks 0: the builder's index arrays are empty).
flashattn::BlockMask view_of(const BlockMaskBuffers& b) {
  flashattn::BlockMask m = b.view();
  if (b.bits.empty()) m.bits = {};
  if (b.full_index.empty()) m.full_count = m.full_index = nullptr;
  if (b.partial_index.empty()) m.partial_count = m.partial_index = nullptr;
  return m;
}

struct BlockCase {
  Case c;
  MaskSpec mask;
};

Case base_case(DType dtype, int64_t dim, uint64_t seed) {
  Case c;
  c.batch = 2;
  c.heads_k = 1;
  c.group = 2;
  c.seqlen_q = 70;
  c.seqlen_k = 90;
  c.dim = dim;
  c.dtype = dtype;
  c.seed = seed;
  return c;
}

// The fixed cases.
std::vector<BlockCase> cases() {
  std::vector<BlockCase> r;
  BlockCase b;
  b.c = base_case(DType::f16, 64, 101);  // per (sequence, head) lists, blocks dividing the tiles
  r.push_back(b);
  b = {};
  b.c = base_case(DType::bf16, 128, 102);  // broadcast lists, blocks 7 x 5 (no tile edge on a block edge), causal
  b.c.causal = true;
  b.mask = {7, 5, false, false, 2, 1, 1, true, 2};
  r.push_back(b);
  b = {};
  b.c = base_case(DType::f16, 32, 103);  // GQA 2 x 3, window, 64 x 64 blocks, partial blocks without bits
  b.c.heads_k = 2;
  b.c.group = 3;
  b.c.seqlen_q = 130;
  b.c.seqlen_k = 150;
  b.c.window_left = 40;
  b.c.window_right = 10;
  b.mask = {64, 64, true, true, 1, 1, 1, false, 3};
  r.push_back(b);
  b = {};
  b.c = base_case(DType::bf16, 64, 104);  // varlen, blocks 13 x 24, per-sequence lists shared by heads
  b.c.varlen_q = {50, 23};
  b.c.varlen_k = {61, 80};
  b.c.seqlen_q = 73;
  b.c.seqlen_k = 141;
  b.c.causal = true;
  b.mask = {13, 24, true, false, 1, 1, 2, true, 4};
  r.push_back(b);
  b = {};
  b.c = base_case(DType::f16, 96, 105);  // full f32 bias (dbias), dropout, seqlens_k, blocks 20 x 33
  b.c.bias = BiasKind::full;
  b.c.dropout_p = 0.2f;
  b.c.key_lengths = {90, 47};
  b.mask = {20, 33, true, true, 1, 1, 1, true, 5};
  r.push_back(b);
  b = {};
  b.c = base_case(DType::bf16, 256, 106);  // d = 256 (32-key tiles), blocks 9 x 40, a bias table with −∞
  b.c.seqlen_q = 40;
  b.c.seqlen_k = 70;
  b.c.bias = BiasKind::rows_keys;
  b.c.bias_dtype = DType::bf16;
  b.c.bias_inf = true;
  b.c.softcap = 4;
  b.c.alibi = props::Alibi::shared;
  b.mask = {9, 40, false, true, 1, 2, 1, true, 6};
  r.push_back(b);
  b = {};
  b.c = base_case(DType::f16, 64, 107);  // every list empty: every row sees no key
  b.c.bias = BiasKind::head_keys;
  b.mask = {16, 32, true, true, 0, 0, 0, true, 7};
  r.push_back(b);
  b = {};
  b.c = base_case(DType::bf16, 64, 108);  // sparse (most blocks hidden, so rows and whole tiles are empty), block 1 x 3
  b.c.seqlen_q = 30;
  b.c.seqlen_k = 200;
  b.c.dropout_p = 0.3f;
  b.mask = {1, 3, true, true, 12, 1, 1, true, 8};
  r.push_back(b);
  return r;
}

// Returns the longest sequence's query rows of a case.
int64_t longest_rows(const Case& c) {
  int64_t rows = c.seqlen_q;
  if (c.varlen()) {
    rows = 0;
    for (const int32_t n : c.varlen_q) rows = std::max<int64_t>(rows, n);
  }
  return rows;
}

BlockMaskBuffers mask_of(const BlockCase& b, const flashattn::AttentionArgs& a) {
  const int64_t keys = flashattn::key_columns(a);
  return make_mask(b.mask, b.c.batch, b.c.heads_q(), longest_rows(b.c), keys, keys);
}

// Fills n bytes at p with 0xFF (NaN in every dtype the outputs use).
void poison(const flashattn::Tensor& t) {
  if (t.data) std::memset(t.data, 0xFF, static_cast<size_t>(t.batch * t.stride_batch) * flashattn::dtype_size(t.dtype));
}

// Returns backward arguments of inst with block mask m: out and lse from the fp64 oracle's forward
// with the mask (the backward's inputs), dout from the instance, dq, dk, dv (and dbias) poisoned.
flashattn::BackwardArgs backward_with(props::Instance& inst, const flashattn::BlockMask& m) {
  flashattn::ForwardArgs f = inst.forward_args();
  f.block_mask = m;
  flashattn::reference::forward(f, flashattn::reference::Precision::fp64);
  flashattn::BackwardArgs a = flashattn::backward_args(f);
  a.dout = inst.dout();
  a.dq = inst.dq();
  a.dk = inst.dk();
  a.dv = inst.dv();
  if (inst.problem().bias != BiasKind::off) a.dbias = inst.dbias();
  for (const flashattn::Tensor* t : {&a.dq, &a.dk, &a.dv, &a.dbias}) poison(*t);
  return a;
}

std::vector<unsigned char> bytes(const flashattn::Tensor& t) {
  if (!t.data) return {};
  const auto* p = static_cast<const unsigned char*>(t.data);
  return std::vector<unsigned char>(p, p + (t.batch * t.stride_batch) * flashattn::dtype_size(t.dtype));
}
std::vector<float> lse_of(const props::Instance& inst) {
  return std::vector<float>(inst.lse(), inst.lse() + inst.lse_count());
}

TEST_CASE("gpu-emulated block-sparse: the forward agrees with the oracle") {
  for (const BlockCase& b : cases()) {
    CAPTURE(props::to_string(b.c));
    props::Instance inst(b.c);
    const BlockMaskBuffers m = mask_of(b, inst.forward_args());
    CAPTURE(m.listed());
    for (const int64_t splits : {0, 3}) {  // 0: from the shape (1 here); 3: split-KV (at most one per key tile)
      CAPTURE(splits);
      flashattn::ForwardArgs a = inst.forward_args();
      a.block_mask = view_of(m);
      a.dropout_mask = nullptr;
      a.num_splits = splits;
      flashattn::gpu_emu::forward_in_gpu_layout(a);
      CHECK(flashattn::tolerance::judge_forward(a).first_failure() == "");
      CHECK(inst.check() == "");
    }
  }
}

TEST_CASE("gpu-emulated block-sparse: the backward (both dQ modes, dbias) agrees with the oracle") {
  for (const BlockCase& b : cases()) {
    CAPTURE(props::to_string(b.c));
    props::Instance inst(b.c);
    const BlockMaskBuffers m = mask_of(b, inst.forward_args());
    for (const bool deterministic : {true, false}) {
      CAPTURE(deterministic);
      const flashattn::BackwardArgs a = backward_with(inst, view_of(m));
      flashattn::gpu_emu::backward_in_gpu_layout(a, deterministic);
      const flashattn::tolerance::Judgement j = flashattn::tolerance::judge_backward(a);
      CHECK(j.first_failure() == "");
      if (b.c.bias != BiasKind::off) CHECK(j.find("dbias") != nullptr);
      CHECK(inst.check() == "");
    }
  }
}

// Writes NaN (all-ones bytes) into every K/V row, bias entry and bit that no listed block of m
// covers, and clears the bits of full blocks (never read): a non-varlen case with a full bias.
void poison_hidden(const Case& c, const flashattn::ForwardArgs& a, BlockMaskBuffers& m) {
  const flashattn::BlockMask bm = view_of(m);
  const int64_t nq = c.seqlen_q, nk = c.seqlen_k, hq = c.heads_q();
  for (int64_t s = 0; s < c.batch; ++s) {
    for (int64_t j = 0; j < nk; ++j) {
      bool covered = false;
      for (int64_t h = 0; h < hq && !covered; ++h)
        for (int64_t i = 0; i < nq && !covered; ++i) covered = bm.kind(s, h, i / bm.block_q, j / bm.block_k) != flashattn::BlockKind::hidden;
      if (covered) continue;
      for (const flashattn::ConstTensor* t : {&a.k, &a.v})
        for (int64_t hk = 0; hk < t->heads; ++hk)
          std::memset(static_cast<char*>(const_cast<void*>(t->data)) +
                          (s * t->stride_batch + j * t->stride_seq + hk * t->stride_head) * flashattn::dtype_size(t->dtype),
                      0xFF, static_cast<size_t>(t->dim) * flashattn::dtype_size(t->dtype));
    }
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t j = 0; j < nk; ++j) {
          const flashattn::BlockKind k = bm.kind(s, h, i / bm.block_q, j / bm.block_k);
          if (k == flashattn::BlockKind::hidden) {
            const int64_t o = s * a.bias.stride_batch + i * a.bias.stride_seq + h * a.bias.stride_head + j;
            std::memset(static_cast<char*>(const_cast<void*>(a.bias.data)) + o * flashattn::dtype_size(a.bias.dtype), 0xFF,
                        flashattn::dtype_size(a.bias.dtype));
          }
          if (bm.bits.data && k != flashattn::BlockKind::partial) {
            uint8_t& byte = m.bits[static_cast<size_t>((bm.bits.batch == 1 ? 0 : s) * bm.bits.stride_batch +
                                                       i * bm.bits.stride_seq + (bm.bits.heads == 1 ? 0 : h) * bm.bits.stride_head +
                                                       j / 8)];
            const uint8_t bit = static_cast<uint8_t>(1u << (j % 8));
            byte = k == flashattn::BlockKind::hidden ? (byte | bit) : (byte & ~bit);
          }
        }
  }
}

TEST_CASE("gpu-emulated block-sparse: no K/V row, bias entry or bit of an unlisted block is read") {
  for (const bool dropout : {false, true}) {
    CAPTURE(dropout);
    Case c = base_case(DType::f16, 64, 201 + dropout);
    c.heads_k = 2;
    c.seqlen_q = 75;
    c.seqlen_k = 200;
    c.bias = BiasKind::full;
    c.dropout_p = dropout ? 0.25f : 0.0f;
    MaskSpec spec{dropout ? int64_t{24} : 5, dropout ? int64_t{10} : 7, true, true, 3, 1, 1, true, 9};
    props::Instance inst(c);
    flashattn::ForwardArgs a = inst.forward_args();
    BlockMaskBuffers m = make_mask(spec, c.batch, c.heads_q(), c.seqlen_q, c.seqlen_k, c.seqlen_k - 20);
    CAPTURE(m.listed());
    a.block_mask = view_of(m);
    a.dropout_mask = nullptr;
    flashattn::gpu_emu::forward_in_gpu_layout(a);
    REQUIRE(flashattn::tolerance::judge_forward(a).first_failure() == "");
    const auto out = bytes(a.out);
    const auto lse = lse_of(inst);
    flashattn::BackwardArgs g = backward_with(inst, view_of(m));
    const std::vector<float> lse_in(g.lse, g.lse + inst.lse_count());
    const auto out_in = bytes(inst.out());
    flashattn::gpu_emu::backward_in_gpu_layout(g, true);
    REQUIRE(flashattn::tolerance::judge_backward(g).first_failure() == "");
    const auto dq = bytes(g.dq), dk = bytes(g.dk), dv = bytes(g.dv), dbias = bytes(g.dbias);

    poison_hidden(c, a, m);  // the same buffers the calls read
    a = inst.forward_args();
    a.block_mask = view_of(m);
    a.dropout_mask = nullptr;
    flashattn::gpu_emu::forward_in_gpu_layout(a);
    CHECK(bytes(a.out) == out);
    CHECK(std::memcmp(lse.data(), inst.lse(), lse.size() * sizeof(float)) == 0);
    // The backward's inputs out and lse as in the first run (the forward's above wrote the same bits).
    g = flashattn::backward_args(a);
    std::memcpy(const_cast<float*>(g.lse), lse_in.data(), lse_in.size() * sizeof(float));
    std::memcpy(a.out.data, out_in.data(), out_in.size());
    g.dout = inst.dout();
    g.dq = inst.dq();
    g.dk = inst.dk();
    g.dv = inst.dv();
    g.dbias = inst.dbias();
    for (const flashattn::Tensor* t : {&g.dq, &g.dk, &g.dv, &g.dbias}) poison(*t);
    flashattn::gpu_emu::backward_in_gpu_layout(g, true);
    CHECK(bytes(g.dq) == dq);
    CHECK(bytes(g.dk) == dk);
    CHECK(bytes(g.dv) == dv);
    CHECK(bytes(g.dbias) == dbias);
  }
}

TEST_CASE("gpu-emulated block-sparse: the mask of the call's own window rule gives the bits of the call without one") {
  struct Rule {
    Case c;
    int64_t block_q, block_k;
  };
  // Every rule uses an option (softcap here), so that the call without a block mask runs the
  // options' variant, which the block-mask variant extends; the plain variants fuse the scale into
  // the exponent's FFMA and round differently (docs/gpu.md, "Numerics").
  std::vector<Rule> rules;
  Case c = base_case(DType::bf16, 64, 301);
  c.causal = true;
  c.softcap = 30;
  rules.push_back({c, 16, 16});
  c = base_case(DType::f16, 128, 302);
  c.window_left = 20;
  c.window_right = 3;
  c.bias = BiasKind::full;
  c.dropout_p = 0.1f;
  rules.push_back({c, 7, 11});
  c = base_case(DType::f16, 32, 303);
  c.varlen_q = {40, 31};
  c.varlen_k = {52, 90};
  c.seqlen_q = 71;
  c.seqlen_k = 142;
  c.causal = true;
  c.key_lengths = {};
  c.softcap = 30;
  rules.push_back({c, 64, 5});
  for (const Rule& r : rules) {
    CAPTURE(props::to_string(r.c));
    CAPTURE(r.block_q);
    CAPTURE(r.block_k);
    props::Instance inst(r.c);
    flashattn::ForwardArgs a = inst.forward_args();
    a.dropout_mask = nullptr;
    const BlockMaskBuffers m = flashattn::block_mask_from_rule(a, r.block_q, r.block_k);
    flashattn::gpu_emu::forward_in_gpu_layout(a);
    const auto out = bytes(a.out);
    const auto lse = lse_of(inst);
    a = inst.forward_args();
    a.dropout_mask = nullptr;
    a.block_mask = m.view();
    flashattn::gpu_emu::forward_in_gpu_layout(a);
    CHECK(bytes(a.out) == out);
    CHECK(std::memcmp(lse.data(), inst.lse(), lse.size() * sizeof(float)) == 0);
    for (const bool deterministic : {true, false}) {
      CAPTURE(deterministic);
      flashattn::BackwardArgs g = backward_with(inst, flashattn::BlockMask{});
      flashattn::gpu_emu::backward_in_gpu_layout(g, deterministic);
      const auto dq = bytes(g.dq), dk = bytes(g.dk), dv = bytes(g.dv), dbias = bytes(g.dbias);
      g = backward_with(inst, m.view());
      flashattn::gpu_emu::backward_in_gpu_layout(g, deterministic);
      if (deterministic) CHECK(bytes(g.dq) == dq);  // fp32 atomics: order-dependent on a GPU
      CHECK(bytes(g.dk) == dk);
      CHECK(bytes(g.dv) == dv);
      CHECK(bytes(g.dbias) == dbias);
    }
  }
}

TEST_CASE("gpu-emulated block-sparse: paged K/V with split-KV and sinks agrees with the oracle") {
  for (const int64_t splits : {1, 3}) {
    props::InferenceSpec s;
    s.batch = 2;
    s.heads_k = 1;
    s.group = 2;
    s.seqlen_q = 5;
    s.dim = s.dim_v = 64;
    s.dtype = DType::bf16;
    s.sinks = true;
    s.page_size = 16;
    s.lengths = {190, 70};
    s.num_splits = splits;
    s.seed = 41 + static_cast<uint64_t>(splits);
    CAPTURE(s.describe());
    props::InferenceProblem p(s);
    flashattn::ForwardArgs a = p.call();
    flashattn::ForwardArgs plain = p.plain();
    const int64_t plain_cols = flashattn::key_columns(plain), cols = flashattn::key_columns(a);
    REQUIRE(plain_cols <= cols);
    const MaskSpec spec{3, 11, true, true, 2, 1, 1, true, 10 + static_cast<uint64_t>(splits)};
    const BlockMaskBuffers m = make_mask(spec, s.batch, s.heads_q(), s.seqlen_q, cols, plain_cols / spec.block_k * spec.block_k);
    CAPTURE(m.listed());
    a.block_mask = plain.block_mask = view_of(m);
    flashattn::gpu_emu::forward_in_gpu_layout(a);
    plain.out = a.out;
    plain.lse = a.lse;
    CHECK(flashattn::tolerance::judge_forward(plain).first_failure() == "");
  }
}

TEST_CASE("gpu-emulated block-sparse: unsorted and out-of-range lists are rejected before anything is written") {
  Case c = base_case(DType::f16, 64, 401);
  props::Instance inst(c);
  flashattn::ForwardArgs a = inst.forward_args();
  a.dropout_mask = nullptr;
  BlockMaskBuffers m = make_mask({16, 16, true, true, 0, 1, 0, false, 11}, c.batch, c.heads_q(), c.seqlen_q,
                                 c.seqlen_k, c.seqlen_k);  // every block full: lists 0, 1, ..., 5
  REQUIRE(m.full_count.at(0) == 6);
  struct Bad {
    const char* what;
    size_t at;
    int32_t value;
  };
  for (const Bad& bad : {Bad{"must be greater than the entry before it", 2, 0},
                         Bad{"must be in [0, 6)", 5, 6}, Bad{"must be in [0, 6)", 0, -1}}) {
    CAPTURE(bad.what);
    BlockMaskBuffers broken = m;
    broken.full_index.at(bad.at) = bad.value;
    a = inst.forward_args();
    a.dropout_mask = nullptr;
    a.block_mask = view_of(broken);
    const auto out = bytes(a.out);
    const auto lse = lse_of(inst);
    std::string message;
    try {
      flashattn::gpu_emu::forward_in_gpu_layout(a);
    } catch (const flashattn::Error& e) {
      message = e.what();
    }
    CHECK(message.find(bad.what) != std::string::npos);
    CHECK(bytes(a.out) == out);
    CHECK(std::memcmp(lse.data(), inst.lse(), lse.size() * sizeof(float)) == 0);
    flashattn::BackwardArgs g = backward_with(inst, flashattn::BlockMask{});
    g.block_mask = view_of(broken);
    const auto dq = bytes(g.dq), dk = bytes(g.dk), dv = bytes(g.dv);
    message.clear();
    try {
      flashattn::gpu_emu::backward_in_gpu_layout(g, true);
    } catch (const flashattn::Error& e) {
      message = e.what();
    }
    CHECK(message.find(bad.what) != std::string::npos);
    CHECK(bytes(g.dq) == dq);
    CHECK(bytes(g.dk) == dk);
    CHECK(bytes(g.dv) == dv);
  }
}

}  // namespace
