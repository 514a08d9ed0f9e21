// Additive bias and dropout (docs/semantics.md, "Additive bias and dropout"): Philox4x32-10 against
// Random123's published known-answer vectors, the documented stream layout of the keep decision,
// and every bad bias, dbias and dropout argument rejected with flashattn::Error naming it, before
// anything is written, by validate, the oracle and the CPU backend.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "flashattn/philox.hpp"
#include "flashattn/problem.hpp"
#include "fixture.hpp"

using flashattn::DType;
using unit::error_of;
using unit::Fixture;
using unit::reject;

TEST_CASE("philox: Philox4x32-10 equals Random123's known-answer vectors") {
  struct Kat {
    flashattn::Philox4 ctr;
    uint32_t k0, k1;
    flashattn::Philox4 out;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const flashattn::Philox4 r = flashattn::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int w = 0; w < 4; ++w) CHECK(r.x[w] == k.out.x[w]);
  }
}

TEST_CASE("philox: the keep decision follows the documented stream layout") {
  // t = floor(65536 p): p = 0 keeps everything; 0.5 -> 32768; the largest float below 1 -> 65535.
  CHECK(flashattn::dropout_threshold(0.0f) == 0);
  CHECK(flashattn::dropout_threshold(0.5f) == 32768);
  CHECK(flashattn::dropout_threshold(std::nextafter(1.0f, 0.0f)) == 65535);
  CHECK(flashattn::dropout_threshold(1e-6f) == 0);
  // Stream offset + s·Hq + h, modulo 2^64.
  CHECK(flashattn::dropout_stream(10, 2, 8, 3) == 10 + 2 * 8 + 3);
  CHECK(flashattn::dropout_stream(~uint64_t{0}, 0, 8, 1) == 0);
  // Key j of row i on stream n: word j % 8 of Philox((j / 8, i, n lo, n hi), seed lo/hi).
  const uint64_t seed = 0x0123456789abcdefull, stream = 0x1122334455667788ull;
  const int64_t i = 77, j = 8 * 5 + 3;
  const flashattn::Philox4 r = flashattn::philox4x32_10(
      {{5u, static_cast<uint32_t>(i), 0x55667788u, 0x11223344u}}, 0x89abcdefu, 0x01234567u);
  const uint32_t word = (r.x[1] >> 16) & 0xFFFFu;  // word 3: high half of x1
  for (const uint32_t t : {0u, word, word + 1, 65535u})
    CHECK(flashattn::dropout_keep(seed, stream, i, j, t) == (word >= t));
  CHECK(flashattn::dropout_keep_bits(seed, stream, i, 5, 0) == 0xFFu);
}

namespace {

// A full f32 bias [B, Nq, Hq, Nk] for the fixture's call (bhsd storage) and its gradient.
struct BiasFixture : Fixture {
  std::vector<float> bias, dbias;
  std::vector<uint8_t> mask;
  BiasFixture() {
    const int64_t n = shape.batch * shape.hq * shape.nq * shape.nk;
    bias.assign(static_cast<size_t>(n) + unit::kSlack, 0.25f);
    dbias.assign(static_cast<size_t>(n) + unit::kSlack, 0.0f);
    mask.assign(static_cast<size_t>(shape.batch * shape.hq * shape.nq), 0);
    fwd.bias = flashattn::bhsd(bias.data(), DType::f32, shape.batch, shape.nq, shape.hq, shape.nk);
    bwd.bias = fwd.bias;
    bwd.dbias = flashattn::bhsd(dbias.data(), DType::f32, shape.batch, shape.nq, shape.hq, shape.nk);
  }
};

}  // namespace

TEST_CASE("validate: bias, dbias and dropout are accepted as documented") {
  BiasFixture fx;
  CHECK_NOTHROW(flashattn::validate(fx.forward()));
  CHECK_NOTHROW(flashattn::validate(fx.bwd));
  flashattn::ForwardArgs a = fx.forward();
  a.bias.batch = a.bias.seq = 1;  // [1, 1, Hq, Nk]
  CHECK_NOTHROW(flashattn::validate(a));
  a.bias.heads = 1;
  a.bias.seq = fx.shape.nq;  // [1, Nq, 1, Nk]
  CHECK_NOTHROW(flashattn::validate(a));
  a = fx.forward();
  a.bias.stride_batch = a.bias.stride_head = 0;  // broadcast by stride
  a.bias.dtype = DType::bf16;
  a.dropout_p = 0.5f;
  a.dropout_mask = fx.mask.data();
  CHECK_NOTHROW(flashattn::validate(a));
}

TEST_CASE("validate: bad bias and dbias are rejected naming the field") {
  BiasFixture fx;
  flashattn::ForwardArgs a = fx.forward();
  a.bias.batch = 3;
  reject(fx, a, {"bias.batch (3)", "number of sequences (2)"});
  a = fx.forward();
  a.bias.heads = 2;
  reject(fx, a, {"bias.heads (2)", "q.heads (4)"});
  a = fx.forward();
  a.bias.seq = 3;
  reject(fx, a, {"bias.seq (3)", "q.seq (4)"});
  a = fx.forward();
  a.bias.dim = 4;
  reject(fx, a, {"bias.dim (4)", "keys of a sequence (5)"});
  a = fx.forward();
  a.bias.stride_seq = -1;
  reject(fx, a, {"bias.stride_seq (-1)"});
  a = fx.forward();
  a.bias.dtype = static_cast<DType>(7);
  reject(fx, a, {"bias.dtype (7)"});
  a = fx.forward();
  a.bias.data = nullptr;
  reject(fx, a, {"bias.data is null"});
  a = fx.forward();
  a.bias.data = reinterpret_cast<const char*>(fx.bias.data()) + 1;
  reject(fx, a, {"bias.data", "not aligned"});
  a = fx.forward();
  a.bias.data = fx.out.data();
  a.bias.dtype = DType::f32;
  reject(fx, a, {"out overlaps input bias"});

  flashattn::BackwardArgs b = fx.bwd;
  b.bias = flashattn::ConstTensor{};
  reject(fx, b, {"dbias is set but bias is not"});
  b = fx.bwd;
  b.dbias.seq = 1;
  reject(fx, b, {"dbias shape", "must equal bias shape"});
  b = fx.bwd;
  b.dbias.stride_head = 0;
  reject(fx, b, {"dbias.stride_head (0)", "overlap itself"});
  b = fx.bwd;
  b.dbias.data = fx.dq.data();
  reject(fx, b, {"dbias overlaps dq"});
  b = fx.bwd;
  b.dbias.data = fx.bias.data();
  reject(fx, b, {"dbias overlaps input bias"});
}

TEST_CASE("validate: bad dropout arguments are rejected naming the field") {
  BiasFixture fx;
  for (const float p : {-0.1f, 1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()}) {
    flashattn::ForwardArgs a = fx.forward();
    a.dropout_p = p;
    reject(fx, a, {"dropout_p", "must be in [0, 1)"});
    flashattn::BackwardArgs b = fx.bwd;
    b.dropout_p = p;
    reject(fx, b, {"dropout_p", "must be in [0, 1)"});
  }
  flashattn::ForwardArgs a = fx.forward();
  a.dropout_p = 0.25f;
  a.dropout_mask = reinterpret_cast<uint8_t*>(fx.q.data());
  reject(fx, a, {"dropout_mask overlaps input q"});
  a.dropout_mask = reinterpret_cast<uint8_t*>(fx.lse.data());
  reject(fx, a, {"dropout_mask overlaps lse"});
}
