// Every class of bad backward argument is rejected with flashattn::Error naming the argument and
// its values, before dq, dk or dv is written.
#include <cmath>
#include <limits>

#include "fixture.hpp"

using flashattn::DType;
using unit::Fixture;
using unit::reject;

TEST_CASE("validate backward: the fixture's call is valid") {
  Fixture fx;
  CHECK_NOTHROW(flashattn::validate(fx.bwd));
}

TEST_CASE("validate backward: forward checks apply") {
  Fixture fx;
  auto a = fx.bwd;
  SUBCASE("scale") { a.scale = std::numeric_limits<float>::quiet_NaN(); reject(fx, a, {"scale (nan) must be finite"}); }
  SUBCASE("out shape") { a.out.dim = 4; reject(fx, a, {"out shape [2, 4, 4, 4] must be [B, Nq, Hq, v.dim] = [2, 4, 4, 8]"}); }
  SUBCASE("heads") { a.q.heads = a.out.heads = 3; reject(fx, a, {"k.heads (2) must divide q.heads (3)"}); }
}

TEST_CASE("validate backward: lse is required") {
  Fixture fx;
  auto a = fx.bwd;
  a.lse = nullptr;
  reject(fx, a, {"lse is null", "backward needs the forward's log-sum-exp"});
}

TEST_CASE("validate backward: gradient shapes and dtypes") {
  Fixture fx;
  auto a = fx.bwd;
  SUBCASE("dout") { a.dout.seq = 2; reject(fx, a, {"dout shape [2, 2, 4, 8] must equal out shape [2, 4, 4, 8]"}); }
  SUBCASE("dq") { a.dq.heads = 2; reject(fx, a, {"dq shape [2, 4, 2, 8] must equal q shape [2, 4, 4, 8]"}); }
  SUBCASE("dk") { a.dk.heads = 4; reject(fx, a, {"dk shape [2, 5, 4, 8] must equal k shape [2, 5, 2, 8]"}); }
  SUBCASE("dv") { a.dv.batch = 1; reject(fx, a, {"dv shape [1, 5, 2, 8] must equal v shape [2, 5, 2, 8]"}); }
  SUBCASE("dq dtype") { a.dq.dtype = DType::f16; reject(fx, a, {"dq.dtype (f16) must equal q.dtype (f32)"}); }
  SUBCASE("dout dtype") { a.dout.dtype = DType::bf16; reject(fx, a, {"dout.dtype (bf16) must equal out.dtype (f32)"}); }
  SUBCASE("dk enum") { a.dk.dtype = static_cast<DType>(9); reject(fx, a, {"dk.dtype (9) is not a DType"}); }
}

TEST_CASE("validate backward: null and misaligned and negative") {
  Fixture fx;
  auto a = fx.bwd;
  SUBCASE("dout null") { a.dout.data = nullptr; reject(fx, a, {"dout.data is null"}); }
  SUBCASE("dq null") { a.dq.data = nullptr; reject(fx, a, {"dq.data is null"}); }
  SUBCASE("dk null") { a.dk.data = nullptr; reject(fx, a, {"dk.data is null"}); }
  SUBCASE("dv null") { a.dv.data = nullptr; reject(fx, a, {"dv.data is null"}); }
  SUBCASE("dk misaligned") {
    a.dk.data = static_cast<char*>(a.dk.data) + 2;
    reject(fx, a, {"dk.data", "not aligned"});
  }
  SUBCASE("dv negative stride") { a.dv.stride_seq = -16; reject(fx, a, {"dv.stride_seq (-16) must not be negative"}); }
  SUBCASE("dq size") { a.q.seq = a.out.seq = a.dout.seq = a.dq.seq = int64_t{1} << 31; reject(fx, a, {"q.seq (2147483648) must be below 2^31"}); }
}

TEST_CASE("validate backward: overlapping gradients") {
  Fixture fx;
  auto a = fx.bwd;
  SUBCASE("dq overlaps itself") { a.dq.stride_head = 0; reject(fx, a, {"dq.stride_head (0) makes the output overlap itself"}); }
  SUBCASE("dk overlaps itself") { a.dk.stride_seq = 12; reject(fx, a, {"dk.stride_seq (12) makes the output overlap itself", "needs >= 16"}); }
  SUBCASE("dq over q") { a.dq.data = fx.q.data(); reject(fx, a, {"dq overlaps input q"}); }
  SUBCASE("dk over out") { a.dk.data = fx.out.data() + 8; reject(fx, a, {"dk overlaps input out"}); }
  SUBCASE("dv over dout") { a.dv.data = fx.dout.data(); reject(fx, a, {"dv overlaps input dout"}); }
  SUBCASE("dv over v") { a.dv.data = fx.v.data() + 1; reject(fx, a, {"dv overlaps input v"}); }
  SUBCASE("lse inside dq") { a.lse = fx.dq.data() + 4; reject(fx, a, {"dq overlaps input lse"}); }
  SUBCASE("dk and dv at one address") { a.dv.data = a.dk.data; reject(fx, a, {"dk and dv overlap in memory"}); }
  SUBCASE("dk and dv overlapping") { a.dv.data = fx.dk.data() + 8; reject(fx, a, {"dk and dv overlap in memory"}); }
  SUBCASE("dq and dk at one address") { a.dk.data = a.dq.data; reject(fx, a, {"dq and dk overlap in memory"}); }
}
