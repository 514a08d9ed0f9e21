// Properties of the CPU decode path (cpu/decode.h): the shared generator draws mostly short key
// lengths without the inference options, so these cases force decode shapes (Nq·g <= 64) with long
// keys, GQA groups, paged K/V (random page sizes, permuted and shared pages), split-KV, sinks and
// dv != d, and check on every compiled target:
// - the result agrees with the fp64 oracle by the tolerance rule, for any num_splits;
// - paged K/V gives bitwise the result of the same keys laid out contiguously with the same
//   num_splits (num_splits = 0 may choose differently: the rule sees the pages' capacity);
// - the result is bitwise identical for 1, 2 and 3 threads, and for any number of key/value heads a
//   work item reads together (Config::decode_heads 1..3: runs of equal and of unequal length).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/cpu.hpp"
#include "props/check.hpp"
#include "tolerance/judge.hpp"

namespace {

using flashattn::DType;

// A decode-shaped call and its buffers: contiguous K/V [B, Nk, Hk, d] and the same keys in a
// permuted page pool.
struct DecodeCase {
  DType dtype = DType::f32;
  int64_t B = 1, nq = 1, hk = 1, g = 1, d = 16, dv = 16, nk = 1, page = 1, splits = 0;
  bool causal = false, sinks = false, alibi = false;
  int64_t window_left = -1;
  float softcap = 0;
  float qscale = 1;  // magnitude of q: large values take the exact-score path of fp32 inputs
  std::vector<int32_t> seqlens;  // keys per sequence (<= nk)
  uint64_t seed = 0;

  std::string describe() const {
    return std::string("dtype=") + flashattn::dtype_name(dtype) + " B=" + std::to_string(B) + " nq=" +
           std::to_string(nq) + " hk=" + std::to_string(hk) + " g=" + std::to_string(g) + " d=" + std::to_string(d) +
           " dv=" + std::to_string(dv) + " nk=" + std::to_string(nk) + " page=" + std::to_string(page) +
           " splits=" + std::to_string(splits) + " causal=" + std::to_string(causal) + " window_left=" +
           std::to_string(window_left) + " softcap=" + std::to_string(softcap) + " sinks=" + std::to_string(sinks) +
           " alibi=" + std::to_string(alibi) + " qscale=" + std::to_string(qscale) + " seed=" + std::to_string(seed);
  }
};

DecodeCase gen_decode_case() {
  DecodeCase c;
  c.dtype = *rc::gen::element(DType::f32, DType::bf16, DType::f16);
  c.B = *rc::gen::inRange<int64_t>(1, 4);
  c.hk = *rc::gen::element<int64_t>(1, 2, 3, 4, 8);  // 8: short caches split a run of 8 heads
  c.g = *rc::gen::element<int64_t>(1, 2, 4, 8, 16);
  c.nq = *rc::gen::inRange<int64_t>(1, std::min<int64_t>(64 / c.g, 5) + 1);
  c.d = *rc::gen::element<int64_t>(8, 16, 37, 64, 128);
  c.dv = *rc::gen::elementOf(std::vector<int64_t>{c.d, c.d, 8, 24, 64});
  // Long keys (several default tiles, several splits), kept within the oracle's budget.
  const int64_t budget = int64_t{1} << 21;
  const int64_t most = std::max<int64_t>(budget / (c.B * c.nq * c.g * c.hk * (c.d + c.dv)), 2);
  c.nk = *rc::gen::inRange<int64_t>(1, std::min<int64_t>(most, 3000) + 1);
  c.page = *rc::gen::element<int64_t>(1, 3, 16, 64, 256);
  c.splits = *rc::gen::element<int64_t>(0, 0, 1, 2, 3, 7, 64);
  c.causal = *rc::gen::element(false, false, true);
  c.window_left = *rc::gen::element<int64_t>(-1, -1, -1, 0, 5, 200);
  c.softcap = *rc::gen::element(0.0f, 0.0f, 0.0f, 5.0f);
  c.sinks = *rc::gen::element(false, true);
  c.alibi = *rc::gen::element(false, false, true);
  c.qscale = *rc::gen::element(1.0f, 1.0f, 1.0f, 30.0f);
  for (int64_t b = 0; b < c.B; ++b) c.seqlens.push_back(*rc::gen::elementOf(std::vector<int32_t>{static_cast<int32_t>(c.nk), static_cast<int32_t>(c.nk), *rc::gen::inRange<int32_t>(0, static_cast<int32_t>(c.nk) + 1)}));
  c.seed = *rc::gen::arbitrary<uint64_t>();
  return c;
}

// The buffers of a DecodeCase and forward arguments over them.
struct DecodeCall {
  DecodeCase c;
  std::vector<uint32_t> q, k, v, kp, vp, out;  // elements as 32-bit slots (16-bit dtypes use the low half)
  std::vector<float> lse, sinks, slopes;
  std::vector<int32_t> table;
  int64_t pages_per_seq = 0, num_pages = 0;

  static size_t es(DType t) { return t == DType::f32 ? 4 : 2; }

  // Fills n elements of dtype t with values in [-scale, scale].
  static std::vector<uint32_t> fill(std::mt19937_64& rng, DType t, int64_t n, float scale) {
    std::vector<uint32_t> r(static_cast<size_t>((n * static_cast<int64_t>(es(t)) + 3) / 4 + 1));
    std::uniform_real_distribution<float> u(-scale, scale);
    auto* bytes = reinterpret_cast<unsigned char*>(r.data());
    for (int64_t i = 0; i < n; ++i) {
      const float x = u(rng);
      if (t == DType::f32) {
        std::memcpy(bytes + 4 * i, &x, 4);
      } else {
        const uint16_t h = t == DType::bf16 ? flashattn::bf16_bits_from_float(x) : flashattn::f16_bits_from_float(x);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
    }
    return r;
  }

  explicit DecodeCall(const DecodeCase& dc) : c(dc) {
    std::mt19937_64 rng(c.seed);
    const int64_t hq = c.hk * c.g;
    q = fill(rng, c.dtype, c.B * c.nq * hq * c.d, c.qscale);
    k = fill(rng, c.dtype, c.B * c.nk * c.hk * c.d, 1.0f);
    v = fill(rng, c.dtype, c.B * c.nk * c.hk * c.dv, 1.0f);
    out.assign((c.B * c.nq * hq * c.dv * static_cast<int64_t>(es(c.dtype)) + 3) / 4 + 1, 0);
    lse.assign(static_cast<size_t>(c.B * hq * c.nq), 0.0f);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    for (int64_t h = 0; h < hq; ++h) sinks.push_back(u(rng));
    for (int64_t h = 0; h < hq; ++h) slopes.push_back(0.05f * static_cast<float>(h + 1));
    // Pages: every sequence's pages in a shuffled pool; sequence 1 shares sequence 0's first page
    // when their first page holds the same keys (a shared prefix), with one spare page.
    pages_per_seq = (c.nk + c.page - 1) / c.page;
    num_pages = c.B * pages_per_seq + 1;
    std::vector<int32_t> perm(static_cast<size_t>(num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(static_cast<size_t>(c.B * pages_per_seq), 0);
    for (int64_t i = 0; i < c.B * pages_per_seq; ++i) table[i] = perm[i];
    const size_t e = es(c.dtype);
    kp.assign((num_pages * c.page * c.hk * c.d * static_cast<int64_t>(e) + 3) / 4 + 1, 0);
    vp.assign((num_pages * c.page * c.hk * c.dv * static_cast<int64_t>(e) + 3) / 4 + 1, 0);
    const bool share = c.B > 1 && *rc::gen::element(false, true);
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t j = 0; j < c.nk; ++j) {
        const int64_t src_b = share && b == 1 && j < c.page ? 0 : b;  // shared prefix: sequence 0's keys
        const int64_t page = table[b * pages_per_seq + j / c.page], row = j % c.page;
        auto* kb = reinterpret_cast<unsigned char*>(k.data());
        auto* vb = reinterpret_cast<unsigned char*>(v.data());
        if (src_b != b) {  // make the contiguous copy hold the shared keys too
          std::memcpy(kb + ((b * c.nk + j) * c.hk * c.d) * e, kb + ((src_b * c.nk + j) * c.hk * c.d) * e, c.hk * c.d * e);
          std::memcpy(vb + ((b * c.nk + j) * c.hk * c.dv) * e, vb + ((src_b * c.nk + j) * c.hk * c.dv) * e, c.hk * c.dv * e);
        }
        std::memcpy(reinterpret_cast<unsigned char*>(kp.data()) + ((page * c.page + row) * c.hk * c.d) * e,
                    kb + ((b * c.nk + j) * c.hk * c.d) * e, c.hk * c.d * e);
        std::memcpy(reinterpret_cast<unsigned char*>(vp.data()) + ((page * c.page + row) * c.hk * c.dv) * e,
                    vb + ((b * c.nk + j) * c.hk * c.dv) * e, c.hk * c.dv * e);
      }
      if (share && b == 1 && c.nk > 0) table[pages_per_seq] = table[0];  // the same page object
    }
  }

  flashattn::ForwardArgs args(bool paged) {
    flashattn::ForwardArgs a;
    const int64_t hq = c.hk * c.g;
    a.q = flashattn::bshd(static_cast<const void*>(q.data()), c.dtype, c.B, c.nq, hq, c.d);
    if (paged) {
      a.k = flashattn::bshd(static_cast<const void*>(kp.data()), c.dtype, num_pages, c.page, c.hk, c.d);
      a.v = flashattn::bshd(static_cast<const void*>(vp.data()), c.dtype, num_pages, c.page, c.hk, c.dv);
      a.block_table = table.data();
      a.block_table_pages = pages_per_seq;
    } else {
      a.k = flashattn::bshd(static_cast<const void*>(k.data()), c.dtype, c.B, c.nk, c.hk, c.d);
      a.v = flashattn::bshd(static_cast<const void*>(v.data()), c.dtype, c.B, c.nk, c.hk, c.dv);
    }
    a.out = flashattn::bshd(static_cast<void*>(out.data()), c.dtype, c.B, c.nq, hq, c.dv);
    a.lse = lse.data();
    a.seqlens_k = c.seqlens.data();
    a.causal = c.causal;
    a.window_left = c.window_left;
    a.softcap = c.softcap;
    a.sinks = c.sinks ? sinks.data() : nullptr;
    a.alibi_slopes = c.alibi ? slopes.data() : nullptr;
    a.num_splits = c.splits;
    return a;
  }

  // Runs the call and returns the bits of out and lse.
  std::vector<uint32_t> run(bool paged, const flashattn::cpu::Config& cfg) {
    std::fill(out.begin(), out.end(), 0x7fc00000u);
    flashattn::ForwardArgs a = args(paged);
    flashattn::cpu::forward(a, cfg);
    std::vector<uint32_t> bits = out;
    for (float x : lse) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      bits.push_back(u);
    }
    return bits;
  }
};

}  // namespace

TEST_CASE("cpu decode: decode-shaped calls agree with the oracle on every target, paged == contiguous bitwise, "
          "any thread count gives the same bits") {
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    props::check("cpu-decode-" + t.name, [t] {
      const DecodeCase dc = gen_decode_case();
      DecodeCall call(dc);
      flashattn::cpu::Config cfg;
      cfg.target = t.bit;
      cfg.threads = 1;
      RC_LOG() << dc.describe() << "\n";
      // Paged, num_splits as drawn (0: the shape rule, which sees the pages' capacity).
      call.run(true, cfg);
      RC_ASSERT(flashattn::tolerance::judge_forward(call.args(true)).first_failure() == "");
      // The same split count over contiguous keys: the oracle, and the paged bits.
      call.c.splits = std::max<int64_t>(dc.splits, 1);
      const std::vector<uint32_t> contiguous = call.run(false, cfg);
      RC_ASSERT(flashattn::tolerance::judge_forward(call.args(false)).first_failure() == "");
      RC_ASSERT(call.run(true, cfg) == contiguous);
      for (int threads : {2, 3}) {
        cfg.threads = threads;
        RC_ASSERT(call.run(true, cfg) == contiguous);
      }
      for (int heads : {1, 2, 3}) {
        cfg.decode_heads = heads;
        RC_ASSERT(call.run(true, cfg) == contiguous);
      }
    }, 40);
  }
}

TEST_CASE("cpu decode: every num_splits agrees with the oracle, and with tiny key tiles") {
  props::check("cpu-decode-splits", [] {
    DecodeCase dc = gen_decode_case();
    DecodeCall call(dc);
    flashattn::cpu::Config cfg;
    cfg.block_k = *rc::gen::element(0, 5, 16);
    RC_LOG() << dc.describe() << " block_k=" << cfg.block_k << "\n";
    for (int64_t splits : {int64_t{1}, int64_t{2}, int64_t{5}, dc.nk + 3}) {
      call.c.splits = splits;
      call.run(false, cfg);
      const flashattn::tolerance::Judgement j = flashattn::tolerance::judge_forward(call.args(false));
      RC_ASSERT(j.first_failure() == "");
    }
  }, 40);
}

// A NaN in one key of a decode call: in whichever split it falls, every row that reads it is NaN (out
// and LSE) with num_splits as unsplit — a NaN partial never drops out of the split combine, also
// when another split is empty for the row or holds finite values — and no other row changes.
TEST_CASE("cpu decode: a NaN key in any split makes the rows that read it NaN, as unsplit") {
  props::check("cpu-decode-nan-split", [] {
    DecodeCase dc = gen_decode_case();
    dc.sinks = false;
    RC_PRE(dc.nk >= 2);
    const int64_t b = *rc::gen::inRange<int64_t>(0, dc.B);
    RC_PRE(dc.seqlens[b] > 0);
    const int64_t j = *rc::gen::element<int64_t>(0, *rc::gen::inRange<int64_t>(0, dc.seqlens[b]));
    const int64_t hk = *rc::gen::inRange<int64_t>(0, dc.hk);
    DecodeCall call(dc);
    flashattn::cpu::Config cfg;
    cfg.block_k = *rc::gen::element(5, 16);  // small key tiles: several splits over short caches
    RC_LOG() << dc.describe() << " nan key b=" << b << " j=" << j << " hk=" << hk << " block_k=" << cfg.block_k << "\n";
    call.c.splits = 1;
    const std::vector<uint32_t> clean = call.run(false, cfg);
    flashattn::ForwardArgs a = call.args(false);
    flashattn::store_from_float(const_cast<void*>(a.k.data), a.k.dtype, a.k.offset(b, j, hk), NAN);
    const std::vector<uint32_t> unsplit = call.run(false, cfg);
    const int64_t hq = dc.hk * dc.g, lse0 = static_cast<int64_t>(call.out.size());
    for (int64_t splits : {int64_t{2}, int64_t{3}, dc.nk + 3}) {
      call.c.splits = splits;
      const std::vector<uint32_t> split = call.run(false, cfg);
      for (int64_t bb = 0; bb < dc.B; ++bb)
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < dc.nq; ++i) {
            const int64_t li = lse0 + (bb * hq + h) * dc.nq + i;
            float l_unsplit, l_split;
            std::memcpy(&l_unsplit, &unsplit[li], 4);
            std::memcpy(&l_split, &split[li], 4);
            RC_ASSERT(std::isnan(l_unsplit) == std::isnan(l_split));
            if (bb != b || h / dc.g != hk) RC_ASSERT(unsplit[li] == clean[li]);
          }
      RC_LOG() << "splits " << splits << " ok\n";
    }
  }, 60);
}
