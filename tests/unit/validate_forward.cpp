// Every class of bad forward argument is rejected with flashattn::Error naming the argument and its
// values, before anything is written (checked through validate and every built backend).
#include <cmath>
#include <cstdint>
#include <limits>

#include "fixture.hpp"

using flashattn::DType;
using unit::Fixture;
using unit::reject;

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t k2To31 = int64_t{1} << 31;
}  // namespace

TEST_CASE("validate forward: the fixture's call is valid") {
  Fixture fx;
  CHECK_NOTHROW(flashattn::validate(fx.forward()));
}

TEST_CASE("validate forward: mismatched shapes") {
  Fixture fx;
  auto a = fx.forward();
  SUBCASE("k.dim") { a.k.dim = 4; reject(fx, a, {"k.dim (4) must equal q.dim (8)"}); }
  SUBCASE("v.dim without out.dim") { a.v.dim = 6; reject(fx, a, {"out shape [2, 4, 4, 8] must be [B, Nq, Hq, v.dim] = [2, 4, 4, 6]"}); }
  SUBCASE("k.batch") { a.k.batch = 1; a.v.batch = 1; reject(fx, a, {"k.batch (1) must equal q.batch (2)"}); }
  SUBCASE("v.seq") { a.v.seq = 3; reject(fx, a, {"v shape [2, 3, 2, 8] must equal k shape [2, 5, 2, 8]"}); }
  SUBCASE("v.heads") { a.v.heads = 1; reject(fx, a, {"v shape [2, 5, 1, 8]", "k shape [2, 5, 2, 8]"}); }
  SUBCASE("out.seq") { a.out.seq = 3; reject(fx, a, {"out shape [2, 3, 4, 8] must be [B, Nq, Hq, v.dim] = [2, 4, 4, 8]"}); }
  SUBCASE("out.heads") { a.out.heads = 2; reject(fx, a, {"out shape [2, 4, 2, 8]", "[2, 4, 4, 8]"}); }
  SUBCASE("out.batch") { a.out.batch = 1; reject(fx, a, {"out shape [1, 4, 4, 8]"}); }
}

TEST_CASE("validate forward: mismatched dtypes and invalid dtype values") {
  Fixture fx;
  auto a = fx.forward();
  SUBCASE("k") { a.k.dtype = DType::f16; reject(fx, a, {"k.dtype (f16) must equal q.dtype (f32)"}); }
  SUBCASE("v") { a.v.dtype = DType::bf16; reject(fx, a, {"v.dtype (bf16) must equal q.dtype (f32)"}); }
  SUBCASE("out") { a.out.dtype = DType::bf16; reject(fx, a, {"out.dtype (bf16) must equal q.dtype (f32)"}); }
  SUBCASE("q enum value") { a.q.dtype = static_cast<DType>(7); reject(fx, a, {"q.dtype (7) is not a DType"}); }
  SUBCASE("out enum value") { a.out.dtype = static_cast<DType>(6); reject(fx, a, {"out.dtype (6) is not a DType"}); }
}

TEST_CASE("validate forward: heads_q % heads_k != 0") {
  Fixture fx({1, 2, 2, 8, 3, 4});
  reject(fx, fx.forward(), {"k.heads (3) must divide q.heads (8)"});
}

TEST_CASE("validate forward: null pointers") {
  Fixture fx;
  auto a = fx.forward();
  SUBCASE("q") { a.q.data = nullptr; reject(fx, a, {"q.data is null"}); }
  SUBCASE("k") { a.k.data = nullptr; reject(fx, a, {"k.data is null"}); }
  SUBCASE("v") { a.v.data = nullptr; reject(fx, a, {"v.data is null"}); }
  SUBCASE("out") { a.out.data = nullptr; reject(fx, a, {"out.data is null"}); }
}

TEST_CASE("validate forward: misaligned pointers") {
  Fixture fx;
  auto a = fx.forward();
  // Moves a pointer (const or not) by `bytes`.
  auto shift = [](auto p, int bytes) { return reinterpret_cast<decltype(p)>(reinterpret_cast<uintptr_t>(p) + bytes); };
  SUBCASE("q f32 by 2 bytes") { a.q.data = shift(a.q.data, 2); reject(fx, a, {"q.data", "not aligned", "4 bytes"}); }
  SUBCASE("out f32 by 1 byte") { a.out.data = shift(a.out.data, 1); reject(fx, a, {"out.data", "not aligned"}); }
  SUBCASE("lse by 2 bytes") {
    a.lse = shift(a.lse, 2);
    reject(fx, a, {"lse", "not 4-byte aligned"});
  }
  SUBCASE("k f16 by 1 byte") {
    Fixture h({2, 4, 5, 4, 2, 8, DType::f16});
    auto b = h.forward();
    b.k.data = shift(b.k.data, 1);
    reject(h, b, {"k.data", "not aligned", "2 bytes"});
  }
}

TEST_CASE("validate forward: negative sizes and strides") {
  Fixture fx;
  auto a = fx.forward();
  SUBCASE("q.seq") { a.q.seq = -1; reject(fx, a, {"q.seq (-1) must not be negative"}); }
  SUBCASE("k.batch") { a.k.batch = -2; reject(fx, a, {"k.batch (-2) must not be negative"}); }
  SUBCASE("v.dim") { a.v.dim = -8; reject(fx, a, {"v.dim (-8) must not be negative"}); }
  SUBCASE("out.heads") { a.out.heads = -4; reject(fx, a, {"out.heads (-4) must not be negative"}); }
  SUBCASE("q.stride_seq") { a.q.stride_seq = -32; reject(fx, a, {"q.stride_seq (-32) must not be negative"}); }
  SUBCASE("k.stride_batch") { a.k.stride_batch = -1; reject(fx, a, {"k.stride_batch (-1) must not be negative"}); }
  SUBCASE("out.stride_head") { a.out.stride_head = -8; reject(fx, a, {"out.stride_head (-8) must not be negative"}); }
  SUBCASE("zero heads") { a.k.heads = 0; a.v.heads = 0; reject(fx, a, {"k.heads (0) must be at least 1"}); }
  SUBCASE("zero dim") { a.q.dim = 0; reject(fx, a, {"q.dim (0) must be at least 1"}); }
}

TEST_CASE("validate forward: sizes of 2^31 and more") {
  Fixture fx;
  auto a = fx.forward();
  SUBCASE("q.seq") { a.q.seq = k2To31; reject(fx, a, {"q.seq (2147483648) must be below 2^31"}); }
  SUBCASE("k.seq") { a.k.seq = k2To31 + 5; reject(fx, a, {"k.seq (2147483653) must be below 2^31"}); }
  SUBCASE("q.dim") { a.q.dim = k2To31; reject(fx, a, {"q.dim (2147483648) must be below 2^31"}); }
  SUBCASE("v.batch") { a.v.batch = std::numeric_limits<int64_t>::max(); reject(fx, a, {"v.batch", "must be below 2^31"}); }
}

TEST_CASE("validate forward: overflowing stride products") {
  Fixture fx;
  auto a = fx.forward();
  const int64_t huge = int64_t{1} << 62;
  SUBCASE("stride_batch x batch") {
    a.q.batch = a.k.batch = a.v.batch = a.out.batch = 3;
    a.q.stride_batch = huge;
    reject(fx, a, {"q.stride_batch", "overflows int64"});
  }
  SUBCASE("sum of offsets") {
    a.k.stride_seq = huge;  // 4 * 2^62 overflows: (seq - 1) = 4
    reject(fx, a, {"k.stride_seq", "overflows int64"});
  }
  SUBCASE("byte size") {
    a.v.stride_batch = (int64_t{1} << 61) + 1;  // element offset fits, bytes (x4) do not
    reject(fx, a, {"v", "overflows int64"});
  }
  SUBCASE("largest offset exactly INT64_MAX") {  // found by the fuzzer: offset + 1 overflowed (UBSan)
    a.q.batch = a.k.batch = a.v.batch = a.out.batch = 2;
    const int64_t rest = (a.q.seq - 1) * a.q.stride_seq + (a.q.heads - 1) * a.q.stride_head + a.q.dim - 1;
    a.q.stride_batch = std::numeric_limits<int64_t>::max() - rest;
    reject(fx, a, {"q", "overflows int64"});
  }
}

TEST_CASE("validate forward: self-overlapping output strides") {
  Fixture fx;
  auto a = fx.forward();
  SUBCASE("stride_seq 0") { a.out.stride_seq = 0; reject(fx, a, {"out.stride_seq (0) makes the output overlap itself"}); }
  SUBCASE("stride_head below dim") { a.out.stride_head = 4; reject(fx, a, {"out.stride_head (4) makes the output overlap itself", "needs >= 8"}); }
  SUBCASE("rows overlapping heads") {
    a.out.stride_seq = 16;  // heads span 4 x 8 = 32 elements
    reject(fx, a, {"out.stride_seq (16) makes the output overlap itself", "needs >= 32"});
  }
  SUBCASE("batch stride 0") { a.out.stride_batch = 0; reject(fx, a, {"out.stride_batch (0) makes the output overlap itself"}); }
}

TEST_CASE("validate forward: outputs overlapping inputs") {
  Fixture fx;
  auto a = fx.forward();
  SUBCASE("out is q") { a.out.data = fx.q.data(); reject(fx, a, {"out overlaps input q"}); }
  SUBCASE("k inside out") {
    a.k.data = fx.out.data() + 16;  // k (160 elements) lies within out's 256
    reject(fx, a, {"out overlaps input k"});
  }
  SUBCASE("lse inside v") { a.lse = fx.v.data() + 3; reject(fx, a, {"lse overlaps input v"}); }
  SUBCASE("lse inside out") { a.lse = fx.out.data() + 10; reject(fx, a, {"lse overlaps out"}); }
}

TEST_CASE("validate forward: scale and softcap and window values") {
  Fixture fx;
  auto a = fx.forward();
  SUBCASE("scale NaN") { a.scale = kNaN; reject(fx, a, {"scale (nan) must be finite"}); }
  SUBCASE("scale inf") { a.scale = -kInf; reject(fx, a, {"scale (-inf) must be finite"}); }
  SUBCASE("softcap negative") { a.softcap = -1.5f; reject(fx, a, {"softcap (-1.5) must be finite and >= 0"}); }
  SUBCASE("softcap inf") { a.softcap = kInf; reject(fx, a, {"softcap (inf) must be finite"}); }
  SUBCASE("softcap NaN") { a.softcap = kNaN; reject(fx, a, {"softcap (nan)"}); }
  SUBCASE("window_left") { a.window_left = -2; reject(fx, a, {"window_left (-2) must be >= -1"}); }
  SUBCASE("window_right") { a.window_right = -7; a.causal = true; reject(fx, a, {"window_right (-7) must be >= -1"}); }
  SUBCASE("diagonal_offset") {
    a.diagonal_offset = int64_t{1} << 31;
    reject(fx, a, {"diagonal_offset (2147483648) must lie in (-2^31, 2^31)"});
  }
}

TEST_CASE("validate forward: ALiBi slopes") {
  Fixture fx;
  auto a = fx.forward();
  fx.alibi = {0.5f, 0.25f, 0.125f, 0.0625f, 1.0f, 2.0f, 3.0f, 4.0f};
  a.alibi_slopes = fx.alibi.data();
  CHECK_NOTHROW(flashattn::validate(a));
  SUBCASE("NaN slope") { fx.alibi[2] = kNaN; reject(fx, a, {"alibi_slopes[2] (nan) must be finite"}); }
  SUBCASE("inf slope") { fx.alibi[3] = kInf; reject(fx, a, {"alibi_slopes[3] (inf) must be finite"}); }
  SUBCASE("per-batch slope of batch 1") {
    a.alibi_batch_stride = 4;
    fx.alibi[5] = -kInf;
    reject(fx, a, {"alibi_slopes[5] (-inf) must be finite"});
  }
  SUBCASE("batch stride below heads") { a.alibi_batch_stride = 3; reject(fx, a, {"alibi_batch_stride (3) must be 0 or >= q.heads (4)"}); }
  SUBCASE("negative batch stride") { a.alibi_batch_stride = -4; reject(fx, a, {"alibi_batch_stride (-4) must not be negative"}); }
  SUBCASE("batch stride without slopes") {
    a.alibi_slopes = nullptr;
    a.alibi_batch_stride = 4;
    reject(fx, a, {"alibi_batch_stride (4) is set but alibi_slopes is null"});
  }
}

TEST_CASE("validate forward: seqlens_k out of range") {
  Fixture fx;
  auto a = fx.forward();
  a.seqlens_k = nullptr;
  SUBCASE("above the keys") {
    fx.seqlens_k = {5, 6};
    a.seqlens_k = fx.seqlens_k.data();
    reject(fx, a, {"seqlens_k[1] (6) must be in [0, 5]"});
  }
  SUBCASE("negative") {
    fx.seqlens_k = {-1, 2};
    a.seqlens_k = fx.seqlens_k.data();
    reject(fx, a, {"seqlens_k[0] (-1) must be in [0, 5]"});
  }
}
