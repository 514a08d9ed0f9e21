// The inference options (docs/semantics.md, "Inference"): every bad paged K/V, append, rotary,
// sinks, dv and num_splits argument is rejected with flashattn::Error naming it and its value,
// before anything (the caches included) is written, by validate and every built backend.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "fixture.hpp"

using flashattn::bshd;
using flashattn::DType;
using unit::check_words;
using unit::error_of;

namespace {

// A small paged call: B = 2, Nq = 2, Hq = 4, Hk = 2, d = 8, dv = 6; a pool of 4 pages of 3 rows,
// sequence 0 on pages (2, 0) with 5 keys, sequence 1 on pages (3, 1) with 4 keys. The append
// variant uses contiguous caches [2, 6, 2, d] instead with 2 new rows and rotary tables.
struct Inference {
  static constexpr int64_t B = 2, nq = 2, hq = 4, hk = 2, d = 8, dv = 6, pages = 4, page = 3, cap = 6, nnew = 2;
  std::vector<float> q, kpool, vpool, out, lse, kcache, vcache, knew, vnew, cosv, sinv, sinks, dout, dq, dk, dvv, dsinks;
  std::vector<int32_t> table{2, 0, 3, 1}, seqlens{5, 4}, cache_lens{3, 4};

  Inference() {
    fill(q, B * nq * hq * d, 1);
    fill(kpool, pages * page * hk * d, 2);
    fill(vpool, pages * page * hk * dv, 3);
    fill(out, B * nq * hq * dv, 4);
    fill(lse, B * hq * nq, 5);
    fill(kcache, B * cap * hk * d, 6);
    fill(vcache, B * cap * hk * dv, 7);
    fill(knew, B * nnew * hk * d, 8);
    fill(vnew, B * nnew * hk * dv, 9);
    fill(cosv, 16 * d / 2, 10);
    fill(sinv, 16 * d / 2, 11);
    fill(dout, B * nq * hq * dv, 12);
    fill(dq, B * nq * hq * d, 13);
    fill(dk, pages * page * hk * d, 14);
    fill(dvv, pages * page * hk * dv, 15);
    fill(dsinks, hq, 16);
    sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  }

  // The paged forward (valid).
  flashattn::ForwardArgs paged() {
    flashattn::ForwardArgs a;
    a.q = bshd(q.data(), DType::f32, B, nq, hq, d);
    a.k = bshd(kpool.data(), DType::f32, pages, page, hk, d);
    a.v = bshd(vpool.data(), DType::f32, pages, page, hk, dv);
    a.out = bshd(out.data(), DType::f32, B, nq, hq, dv);
    a.lse = lse.data();
    a.block_table = table.data();
    a.block_table_pages = 2;
    a.seqlens_k = seqlens.data();
    a.sinks = sinks.data();
    return a;
  }

  // The append forward over contiguous caches, with rotary (valid).
  flashattn::ForwardArgs append() {
    flashattn::ForwardArgs a;
    a.q = bshd(q.data(), DType::f32, B, nq, hq, d);
    a.out = bshd(out.data(), DType::f32, B, nq, hq, dv);
    a.lse = lse.data();
    a.seqlens_k = cache_lens.data();
    a.append.k_cache = bshd(kcache.data(), DType::f32, B, cap, hk, d);
    a.append.v_cache = bshd(vcache.data(), DType::f32, B, cap, hk, dv);
    a.append.k_new = bshd(knew.data(), DType::f32, B, nnew, hk, d);
    a.append.v_new = bshd(vnew.data(), DType::f32, B, nnew, hk, dv);
    a.append.rotary_cos = cosv.data();
    a.append.rotary_sin = sinv.data();
    a.append.rotary_dim = d;
    a.append.rotary_positions = 16;
    return a;
  }

  // A backward with sinks and dv != d over contiguous k, v (valid).
  flashattn::BackwardArgs backward() {
    flashattn::BackwardArgs a;
    a.q = bshd(q.data(), DType::f32, B, nq, hq, d);
    a.k = bshd(kpool.data(), DType::f32, B, 5, hk, d);
    a.v = bshd(vpool.data(), DType::f32, B, 5, hk, dv);
    a.out = bshd(out.data(), DType::f32, B, nq, hq, dv);
    a.lse = lse.data();
    a.dout = bshd(dout.data(), DType::f32, B, nq, hq, dv);
    a.dq = bshd(dq.data(), DType::f32, B, nq, hq, d);
    a.dk = bshd(dk.data(), DType::f32, B, 5, hk, d);
    a.dv = bshd(dvv.data(), DType::f32, B, 5, hk, dv);
    a.sinks = sinks.data();
    a.dsinks = dsinks.data();
    return a;
  }

  std::vector<unsigned char> snapshot() const {
    std::vector<unsigned char> r;
    for (const auto* b : {&q, &kpool, &vpool, &out, &lse, &kcache, &vcache, &knew, &vnew, &cosv, &sinv, &sinks, &dout,
                          &dq, &dk, &dvv, &dsinks}) {
      const auto* p = reinterpret_cast<const unsigned char*>(b->data());
      r.insert(r.end(), p, p + b->size() * sizeof(float));
    }
    return r;
  }

 private:
  static void fill(std::vector<float>& b, int64_t n, int seed) {
    b.assign(static_cast<size_t>(n) + unit::kSlack, 0.0f);
    for (int64_t i = 0; i < n; ++i) b[i] = static_cast<float>((i * 5 + seed * 11) % 13 - 6) / 8.0f;
  }
};

void reject(Inference& fx, const flashattn::ForwardArgs& a, std::initializer_list<const char*> words) {
  const auto before = fx.snapshot();
  check_words(error_of([&] { flashattn::validate(a); }), words);
  check_words(error_of([&] { flashattn::reference::forward(a); }), words);
#ifdef FLASHATTN_UNIT_HAS_CPU
  check_words(error_of([&] { flashattn::cpu::forward(a); }), words);
#endif
  CHECK_MESSAGE(fx.snapshot() == before, "a rejected forward call wrote to memory");
}

void reject(Inference& fx, const flashattn::BackwardArgs& a, std::initializer_list<const char*> words) {
  const auto before = fx.snapshot();
  check_words(error_of([&] { flashattn::validate(a); }), words);
  check_words(error_of([&] { flashattn::reference::backward(a); }), words);
#ifdef FLASHATTN_UNIT_HAS_CPU
  check_words(error_of([&] { flashattn::cpu::backward(a); }), words);
#endif
  CHECK_MESSAGE(fx.snapshot() == before, "a rejected backward call wrote to memory");
}

}  // namespace

TEST_CASE("validate inference: the fixture's paged, append and backward calls are valid") {
  Inference fx;
  CHECK_NOTHROW(flashattn::validate(fx.paged()));
  CHECK_NOTHROW(flashattn::validate(fx.append()));
  CHECK_NOTHROW(flashattn::validate(fx.backward()));
  // Table entries of pages no key lives on are not read: -1 padding is fine.
  fx.seqlens[1] = 3;
  fx.table[3] = -1;
  CHECK_NOTHROW(flashattn::validate(fx.paged()));
  // Pages shared between sequences (prefix sharing).
  fx.table = {2, 0, 2, 1};
  CHECK_NOTHROW(flashattn::validate(fx.paged()));
}

TEST_CASE("validate inference: paged K/V") {
  Inference fx;
  auto a = fx.paged();
  SUBCASE("entry past the pool") { fx.table[1] = 4; reject(fx, a, {"block_table[1] (4, page 1 of sequence 0) must be in [0, 4)"}); }
  SUBCASE("negative entry") { fx.table[2] = -1; reject(fx, a, {"block_table[2] (-1, page 0 of sequence 1)"}); }
  SUBCASE("page size 0") { a.k.seq = a.v.seq = 0; reject(fx, a, {"page size k.seq (0) must be >= 1"}); }
  SUBCASE("seqlens past the capacity") { fx.seqlens[0] = 7; reject(fx, a, {"seqlens_k[0] (7) must be in [0, 6]"}); }
  SUBCASE("stride below the pages") { a.block_table_stride = 1; reject(fx, a, {"block_table_stride (1) must be 0 or >= block_table_pages (2)"}); }
  SUBCASE("negative pages") { a.block_table_pages = -1; reject(fx, a, {"block_table_pages (-1) must be in [0, 2^31)"}); }
  SUBCASE("pages without a table") { a.block_table = nullptr; a.k.batch = a.v.batch = 2; reject(fx, a, {"block_table_pages (2) is set but block_table is null"}); }
  SUBCASE("v pool differs") { a.v.batch = 3; reject(fx, a, {"v shape [3, 3, 2, 6] must equal k shape [4, 3, 2, 8] except in dim"}); }
  SUBCASE("varlen") {
    std::vector<int32_t> cu{0, 2};
    a.cu_seqlens_q = a.cu_seqlens_k = cu.data();
    a.varlen_batch = 1;
    reject(fx, a, {"block_table cannot be combined with varlen"});
  }
  SUBCASE("backward") {
    auto b = fx.backward();
    b.block_table = fx.table.data();
    b.block_table_pages = 2;
    reject(fx, b, {"block_table is set: the backward does not support paged K/V"});
  }
}

TEST_CASE("validate inference: append and rotary") {
  Inference fx;
  auto a = fx.append();
  SUBCASE("capacity exceeded") {
    fx.cache_lens[1] = 5;
    reject(fx, a, {"seqlens_k[1] (5) + append.k_new.seq (2) must be in [0, the cache capacity 6]"});
  }
  SUBCASE("rotary_dim odd") { a.append.rotary_dim = 7; reject(fx, a, {"append.rotary_dim (7) must be even and in [2, d = 8]"}); }
  SUBCASE("rotary_dim > d") { a.append.rotary_dim = 10; reject(fx, a, {"append.rotary_dim (10) must be even"}); }
  SUBCASE("rotary positions too short") {
    a.append.rotary_positions = 5;
    reject(fx, a, {"append.rotary_positions (5) must exceed position 5 (seqlens_k[1] (4) + 2 - 1"});
  }
  SUBCASE("cos without sin") { a.append.rotary_sin = nullptr; reject(fx, a, {"append.rotary_cos and append.rotary_sin must be given together"}); }
  SUBCASE("rotary_dim without tables") {
    a.append.rotary_cos = a.append.rotary_sin = nullptr;
    reject(fx, a, {"append.rotary_dim (8), rotary_positions (16) or rotary_interleaved are set but append.rotary_cos is null"});
  }
  SUBCASE("k set too") { a.k = a.append.k_cache; reject(fx, a, {"k must be left empty when append is used"}); }
  SUBCASE("no seqlens_k") { a.seqlens_k = nullptr; reject(fx, a, {"append needs seqlens_k"}); }
  SUBCASE("k_new head dim") { a.append.k_new.dim = 4; reject(fx, a, {"append.k_new shape [2, 2, 2, 4] must be [B, Nnew, Hk, d] = [2, 2, 2, 8]"}); }
  SUBCASE("v_new seq") { a.append.v_new.seq = 1; reject(fx, a, {"append.v_new shape [2, 1, 2, 6]"}); }
  SUBCASE("cache overlaps q") { a.append.k_cache.data = fx.q.data(); reject(fx, a, {"overlaps"}); }
  SUBCASE("paged: two sequences append onto one shared row") {
    a.append.k_cache = bshd(fx.kcache.data(), DType::f32, 4, 3, Inference::hk, Inference::d);
    a.append.v_cache = bshd(fx.vcache.data(), DType::f32, 4, 3, Inference::hk, Inference::dv);
    a.block_table = fx.table.data();
    a.block_table_pages = 2;
    fx.table = {2, 0, 2, 0};
    fx.cache_lens = {3, 3};
    reject(fx, a, {"append writes cache row 0 of page 0 for sequences 0 and 1"});
  }
}

TEST_CASE("validate inference: sinks, dsinks, dv and num_splits") {
  Inference fx;
  SUBCASE("non-finite sink") {
    fx.sinks[1] = std::numeric_limits<float>::quiet_NaN();
    reject(fx, fx.paged(), {"sinks[1] (nan) must be finite"});
  }
  SUBCASE("infinite sink") {
    fx.sinks[3] = -std::numeric_limits<float>::infinity();
    reject(fx, fx.backward(), {"sinks[3] (-inf) must be finite"});
  }
  SUBCASE("dsinks without sinks") {
    auto b = fx.backward();
    b.sinks = nullptr;
    reject(fx, b, {"dsinks is set but sinks is null"});
  }
  SUBCASE("dsinks over dq") {
    auto b = fx.backward();
    b.dsinks = fx.dq.data();
    reject(fx, b, {"dsinks overlaps dq"});
  }
  SUBCASE("dv with d columns") {
    auto b = fx.backward();
    b.dv.dim = Inference::d;
    reject(fx, b, {"dv shape [2, 5, 2, 8] must equal v shape [2, 5, 2, 6]"});
  }
  SUBCASE("dout with d columns") {
    auto b = fx.backward();
    b.dout.dim = Inference::d;
    reject(fx, b, {"dout shape [2, 2, 4, 8] must equal out shape [2, 2, 4, 6]"});
  }
  SUBCASE("negative num_splits") {
    auto a = fx.paged();
    a.num_splits = -1;
    reject(fx, a, {"num_splits (-1) must be >= 0"});
  }
}

#ifdef FLASHATTN_UNIT_HAS_CPU
TEST_CASE("validate inference: a bad cpu::Config is rejected before the append writes the caches") {
  Inference fx;
  const auto before = fx.snapshot();
  flashattn::cpu::Config c;
  c.block_q = -1;
  check_words(error_of([&] { flashattn::cpu::forward(fx.append(), c); }), {"cpu::Config.block_q (-1) must be >= 0"});
  CHECK_MESSAGE(fx.snapshot() == before, "a rejected append call wrote to memory");
}
#endif
