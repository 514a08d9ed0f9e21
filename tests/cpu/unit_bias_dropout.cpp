// The CPU backend's additive bias, dropout and dbias (docs/semantics.md, "Additive bias and
// dropout"), judged against the oracle by the tolerance rule (flashattn::tolerance::judge_forward / judge_backward)
// on every compiled target, with 1 and 3 threads and with tiny tiles:
// - bias shapes: full, [1, Nq, 1, Nk], [1, 1, Hq, Nk], [1, 1, 1, Nk] (size-1 broadcast), a full-size
//   view with stride 0 (broadcast by stride), −∞ entries including rows with every key −∞; bias
//   dtypes f32, f16, bf16;
// - dropout p = 0 (bitwise the call without dropout), 0.1 and 0.5, the keep mask output;
// - with GQA, causal, windows, softcap, ALiBi, sinks, varlen, seqlens_k, dv != d and decode shapes
//   (Nq = 1, paged K/V);
// - out is bitwise equal for 1 and 3 threads (the keep decisions depend on coordinates only), and
//   dbias is bitwise the same for 1 and 3 threads.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/block_mask_build.hpp"
#include "flashattn/convert.hpp"
#include "flashattn/cpu.hpp"
#include "flashattn/flashattn.hpp"
#include "flashattn/philox.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "tolerance/judge.hpp"

namespace flashattn_test {
namespace {

using flashattn::DType;

enum class BiasKind { none, full, rows, heads, keys, stride0 };

struct Spec {
  std::string name;
  int64_t batch = 2, nq = 19, nk = 23, hq = 4, hk = 2, d = 16, dv = 16;
  DType dtype = DType::f32, bias_dtype = DType::f32;
  BiasKind bias = BiasKind::full;
  bool neg_inf = false;  // scattered −∞ entries and, in the first bias row, every key −∞
  float p = 0;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0;
  bool alibi = false, sinks = false, varlen = false, seqlens = false, paged = false;
  bool backward = true;
  bool blocks = false;  // a block-sparse mask at 3 x 4 blocks, per sequence and head, with bits
};

// Visibility of the block-sparse mask of Spec::blocks: per 3 x 4 block hidden, full or partial
// (elements by a hash), so rows and keys of every kind occur.
bool block_visible(int64_t s, int64_t h, int64_t i, int64_t j) {
  const uint64_t blk = (static_cast<uint64_t>(s) * 131 + h * 31 + (i / 3) * 7 + j / 4) * 0x9E3779B97F4A7C15ull;
  const int kind = static_cast<int>((blk >> 40) % 4);  // 0 hidden, 1-2 full, 3 partial
  if (kind != 3) return kind != 0;
  return ((static_cast<uint64_t>(i) * 0x2545F4914F6CDD1Dull + j * 0x9E3779B9ull) >> 33) % 3 != 0;
}

// A byte buffer holding `n` elements of dtype t with values from rng in [−1, 1) (times `scale`).
std::vector<unsigned char> random_buffer(DType t, int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::vector<unsigned char> b(static_cast<size_t>(n) * flashattn::dtype_size(t));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) flashattn::store_from_float(b.data(), t, i, scale * u(rng));
  return b;
}

// Owns every buffer of one call built from a Spec.
struct Call {
  Spec spec;
  std::vector<unsigned char> q, k, v, out, dout, dq, dk, dv, bias, dbias;
  std::vector<float> lse, alibi, sinks;
  std::vector<int32_t> cu_q, cu_k, seqlens, table;
  std::vector<uint8_t> mask;
  flashattn::BlockMaskBuffers blocks;
  flashattn::ForwardArgs fwd;
  flashattn::BackwardArgs bwd;

  explicit Call(const Spec& s) : spec(s) {
    std::mt19937 rng(1234);
    using flashattn::bshd;
    const int64_t B = s.varlen ? 1 : s.batch;
    const int64_t S = s.batch;  // sequences
    int64_t qrows = s.nq, krows = s.nk, kcols = s.nk;
    if (s.varlen) {  // sequences of lengths nq - 3·i and nk - 2·i packed
      cu_q = {0};
      cu_k = {0};
      for (int64_t i = 0; i < S; ++i) {
        cu_q.push_back(cu_q.back() + static_cast<int32_t>(s.nq - 3 * i));
        cu_k.push_back(cu_k.back() + static_cast<int32_t>(s.nk - 2 * i));
      }
      qrows = cu_q.back();
      krows = cu_k.back();
    }
    const int64_t page = 4;
    int64_t pages = 0;
    if (s.paged) {  // pages of `page` keys, sequence b's pages in reverse order
      pages = (s.nk + page - 1) / page;
      for (int64_t b = 0; b < S; ++b)
        for (int64_t x = 0; x < pages; ++x) table.push_back(static_cast<int32_t>(b * pages + pages - 1 - x));
      kcols = pages * page;
    }
    q = random_buffer(s.dtype, B * qrows * s.hq * s.d, rng, 2.0f);
    const int64_t kb = s.paged ? S * pages : B, kn = s.paged ? page : krows;
    k = random_buffer(s.dtype, kb * kn * s.hk * s.d, rng, 2.0f);
    v = random_buffer(s.dtype, kb * kn * s.hk * s.dv, rng);
    out.assign(static_cast<size_t>(B * qrows * s.hq * s.dv) * flashattn::dtype_size(s.dtype), 0);
    lse.assign(static_cast<size_t>(B * s.hq * qrows), 0.0f);
    fwd.q = bshd(q.data(), s.dtype, B, qrows, s.hq, s.d);
    fwd.k = bshd(k.data(), s.dtype, kb, kn, s.hk, s.d);
    fwd.v = bshd(v.data(), s.dtype, kb, kn, s.hk, s.dv);
    fwd.out = bshd(out.data(), s.dtype, B, qrows, s.hq, s.dv);
    fwd.lse = lse.data();
    fwd.causal = s.causal;
    fwd.window_left = s.window_left;
    fwd.window_right = s.window_right;
    fwd.softcap = s.softcap;
    if (s.varlen) {
      fwd.cu_seqlens_q = cu_q.data();
      fwd.cu_seqlens_k = cu_k.data();
      fwd.varlen_batch = S;
    }
    if (s.paged) {
      fwd.block_table = table.data();
      fwd.block_table_pages = pages;
    }
    if (s.seqlens) {
      for (int64_t b = 0; b < S; ++b) seqlens.push_back(static_cast<int32_t>(std::max<int64_t>(s.nk - 5 * b - 1, 0)));
      fwd.seqlens_k = seqlens.data();
    }
    if (s.alibi) {
      for (int64_t h = 0; h < s.hq; ++h) alibi.push_back(0.25f / static_cast<float>(h + 1));
      fwd.alibi_slopes = alibi.data();
    }
    if (s.sinks) {
      for (int64_t h = 0; h < s.hq; ++h) sinks.push_back(0.5f * static_cast<float>(h) - 1.0f);
      fwd.sinks = sinks.data();
    }
    make_bias(rng, S, qrows, kcols);
    if (s.blocks) {
      blocks = flashattn::block_mask_from_predicate(S, s.hq, s.varlen ? s.nq : qrows, kcols, 3, 4, block_visible);
      fwd.block_mask = blocks.view();
    }
    fwd.dropout_p = s.p;
    fwd.dropout_seed = 0x123456789abcdefull;
    fwd.dropout_offset = 77;
    mask.assign(static_cast<size_t>(flashattn::lse_count(fwd) * flashattn::dropout_mask_row_bytes(fwd)), 0xFF);
    fwd.dropout_mask = mask.data();
    bwd = flashattn::backward_args(fwd);
    dout = random_buffer(s.dtype, B * qrows * s.hq * s.dv, rng);
    dq.assign(q.size(), 0);
    dk.assign(static_cast<size_t>(B * krows * s.hk * s.d) * flashattn::dtype_size(s.dtype), 0);
    dv.assign(static_cast<size_t>(B * krows * s.hk * s.dv) * flashattn::dtype_size(s.dtype), 0);
    bwd.dout = bshd(dout.data(), s.dtype, B, qrows, s.hq, s.dv);
    bwd.dq = bshd(dq.data(), s.dtype, B, qrows, s.hq, s.d);
    bwd.dk = bshd(dk.data(), s.dtype, B, krows, s.hk, s.d);
    bwd.dv = bshd(dv.data(), s.dtype, B, krows, s.hk, s.dv);
    if (flashattn::has_bias(fwd)) {
      const flashattn::ConstTensor& b = fwd.bias;
      dbias.assign(static_cast<size_t>(b.batch * b.seq * b.heads * b.dim) * flashattn::dtype_size(s.bias_dtype), 0xEE);
      bwd.dbias = bshd(dbias.data(), s.bias_dtype, b.batch, b.seq, b.heads, b.dim);
    }
  }

  void make_bias(std::mt19937& rng, int64_t S, int64_t qrows, int64_t kcols) {
    if (spec.bias == BiasKind::none) return;
    int64_t bb = S, bq = spec.varlen ? spec.nq : qrows, bh = spec.hq;
    if (spec.bias == BiasKind::rows) bb = bh = 1;
    if (spec.bias == BiasKind::heads) bb = bq = 1;
    if (spec.bias == BiasKind::keys) bb = bq = bh = 1;
    const int64_t stored_b = spec.bias == BiasKind::stride0 ? 1 : bb;
    const int64_t n = stored_b * bq * bh * kcols;
    bias = random_buffer(spec.bias_dtype, n, rng, 3.0f);
    if (spec.neg_inf) {
      const float inf = std::numeric_limits<float>::infinity();
      for (int64_t x = 0; x < n; x += 5) flashattn::store_from_float(bias.data(), spec.bias_dtype, x, -inf);
      for (int64_t j = 0; j < kcols; ++j) flashattn::store_from_float(bias.data(), spec.bias_dtype, j, -inf);
    }
    fwd.bias = flashattn::bshd(static_cast<const void*>(bias.data()), spec.bias_dtype, bb, bq, bh, kcols);
    if (spec.bias == BiasKind::stride0) fwd.bias.stride_batch = 0;
  }
};

// The configurations every case runs under: each target, 1 and 3 threads, default and tiny tiles,
// the decode path on and off (the cases' shapes are decode-shaped, cpu/decode.h).
struct Run {
  flashattn::cpu::Config config;
  std::string name;
};

std::vector<Run> runs() {
  std::vector<Run> r;
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    for (const bool decode : {true, false}) {
      for (const bool tiny : {false, true}) {
        for (const int threads : {1, 3}) {
          flashattn::cpu::Config c;
          c.target = t.bit;
          c.threads = threads;
          c.decode = decode;
          if (tiny) {
            c.block_q = 5;
            c.block_k = 6;
          }
          r.push_back({c, t.name + (decode ? "" : " no decode") + (tiny ? " tiny tiles" : "") + " threads " +
                              std::to_string(threads)});
        }
      }
    }
  }
  return r;
}

// Checks the keep mask the forward wrote against flashattn::dropout_keep for every row and key.
void check_mask(const Call& call) {
  const flashattn::ForwardArgs& a = call.fwd;
  const int64_t row_bytes = flashattn::dropout_mask_row_bytes(a);
  const uint32_t t = flashattn::dropout_threshold(a.dropout_p);
  int64_t wrong = 0;
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    for (int64_t h = 0; h < a.q.heads; ++h)
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
        const uint8_t* row = call.mask.data() + flashattn::lse_index(a, seq, h, i) * row_bytes;
        const uint64_t stream = flashattn::dropout_stream(a.dropout_offset, s, a.q.heads, h);
        for (int64_t j = 0; j < seq.mask.seqlen_k; ++j) {
          const bool bit = (row[j / 8] >> (j % 8)) & 1;
          wrong += bit != flashattn::dropout_keep(a.dropout_seed, stream, i, j, t);
        }
      }
  }
  CHECK(wrong == 0);
}

// Runs the case under every configuration: forward and backward judged by the tolerance rule, out
// and dbias bitwise equal across thread counts of one target and tile size.
void check_case(const Spec& spec) {
  Call call(spec);
  std::vector<unsigned char> out_one, dbias_one;
  for (const Run& run : runs()) {
    INFO(spec.name, " on ", run.name);
    flashattn::cpu::forward(call.fwd, run.config);
    const flashattn::tolerance::Judgement f = flashattn::tolerance::judge_forward(call.fwd);
    CHECK_MESSAGE(f.passed(), f.first_failure());
    if (spec.p > 0) check_mask(call);
    if (run.config.threads == 1) {
      out_one = call.out;
    } else {
      CHECK(out_one == call.out);  // keep decisions and sums do not depend on the thread count
    }
    if (!spec.backward) continue;
    flashattn::cpu::backward(call.bwd, run.config);
    const flashattn::tolerance::Judgement b = flashattn::tolerance::judge_backward(call.bwd);
    CHECK_MESSAGE(b.passed(), b.first_failure());
    if (run.config.threads == 1) {
      dbias_one = call.dbias;
    } else {
      CHECK(dbias_one == call.dbias);
    }
  }
}

TEST_CASE("cpu bias: shapes, dtypes and broadcasts, forward and backward with dbias") {
  Spec s;
  for (const BiasKind kind : {BiasKind::full, BiasKind::rows, BiasKind::heads, BiasKind::keys, BiasKind::stride0}) {
    for (const DType t : {DType::f32, DType::bf16, DType::f16}) {
      s.bias = kind;
      s.dtype = t;
      s.bias_dtype = t == DType::f32 ? DType::bf16 : DType::f32;
      s.name = "bias kind " + std::to_string(static_cast<int>(kind)) + " dtype " + std::to_string(static_cast<int>(t));
      check_case(s);
    }
  }
  s = Spec{};
  s.bias_dtype = DType::f16;
  s.name = "f16 bias";
  check_case(s);
}

TEST_CASE("cpu bias: −∞ entries and rows whose every key is −∞, with masks, softcap, ALiBi, sinks") {
  for (const DType t : {DType::f32, DType::bf16}) {
    Spec s;
    s.dtype = t;
    s.neg_inf = true;
    s.name = "-inf";
    check_case(s);
    s.causal = true;
    s.softcap = 5;
    s.alibi = true;
    s.name = "-inf causal softcap alibi";
    check_case(s);
    s.causal = false;
    s.softcap = 0;
    s.sinks = true;
    s.window_left = 4;
    s.window_right = 2;
    s.bias = BiasKind::rows;
    s.name = "-inf window sinks rows";
    check_case(s);
  }
}

TEST_CASE("cpu dropout: p = 0 is bitwise the call without dropout") {
  for (const DType t : {DType::f32, DType::bf16}) {
    Spec s;
    s.dtype = t;
    s.causal = true;
    Call with(s), without(s);
    without.fwd.dropout_mask = nullptr;
    without.fwd.dropout_seed = 0;
    for (const Run& run : runs()) {
      INFO(run.name);
      flashattn::cpu::forward(with.fwd, run.config);
      flashattn::cpu::forward(without.fwd, run.config);
      CHECK(with.out == without.out);
      CHECK(with.lse == without.lse);
      check_mask(with);  // every bit 1
      flashattn::cpu::backward(with.bwd, run.config);
      flashattn::cpu::backward(without.bwd, run.config);
      CHECK(with.dq == without.dq);
      CHECK(with.dk == without.dk);
      CHECK(with.dv == without.dv);
      CHECK(with.dbias == without.dbias);
    }
  }
}

TEST_CASE("cpu dropout: p = 0.1 and 0.5 with bias, GQA, masks, softcap, ALiBi, sinks") {
  for (const float p : {0.1f, 0.5f}) {
    for (const DType t : {DType::f32, DType::bf16, DType::f16}) {
      Spec s;
      s.dtype = t;
      s.p = p;
      s.name = "dropout";
      check_case(s);
      s.causal = true;
      s.softcap = 4;
      s.alibi = true;
      s.sinks = true;
      s.bias = BiasKind::heads;
      s.name = "dropout causal softcap alibi sinks";
      check_case(s);
    }
  }
}

TEST_CASE("cpu bias and dropout: varlen, seqlens_k, dv != d") {
  for (const DType t : {DType::f32, DType::bf16}) {
    Spec s;
    s.dtype = t;
    s.p = 0.25f;
    s.batch = 3;
    s.varlen = true;
    s.name = "varlen";
    check_case(s);
    s.varlen = false;
    s.seqlens = true;
    s.neg_inf = true;
    s.name = "seqlens_k";
    check_case(s);
    s.seqlens = false;
    s.dv = 24;
    s.bias = BiasKind::keys;
    s.name = "dv > d";
    check_case(s);
    s.dv = 8;
    s.bias = BiasKind::rows;
    s.name = "dv < d";
    check_case(s);
  }
}

TEST_CASE("cpu bias and dropout: decode shapes, paged K/V") {
  for (const DType t : {DType::f32, DType::bf16}) {
    Spec s;
    s.dtype = t;
    s.nq = 1;
    s.nk = 41;
    s.p = 0.3f;
    s.neg_inf = true;
    s.name = "decode";
    check_case(s);
    s.causal = true;
    s.nq = 3;
    s.alibi = true;
    s.sinks = true;
    s.seqlens = true;
    s.paged = true;
    s.backward = false;  // paged K/V is forward-only
    s.name = "decode paged";
    check_case(s);
  }
}

// Block-sparse masks on the CPU's general path (the decode path declines them) with what the
// property generator does not draw together with them: paged K/V, decode shapes, sinks, dv != d.
TEST_CASE("cpu block mask: decode shapes, paged K/V, sinks, dv != d, varlen, with bias and dropout") {
  for (const DType t : {DType::f32, DType::bf16}) {
    Spec s;
    s.dtype = t;
    s.blocks = true;
    s.p = 0.2f;
    s.name = "blocks";
    check_case(s);
    s.varlen = true;
    s.sinks = true;
    s.dv = 24;
    s.bias = BiasKind::heads;
    s.name = "blocks varlen sinks dv";
    check_case(s);
    s = Spec{};
    s.dtype = t;
    s.blocks = true;
    s.nq = 3;
    s.nk = 41;
    s.causal = true;
    s.seqlens = true;
    s.paged = true;
    s.sinks = true;
    s.backward = false;  // paged K/V is forward-only
    s.name = "blocks decode paged";
    check_case(s);
  }
}

}  // namespace
}  // namespace flashattn_test
