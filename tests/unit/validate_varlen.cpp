// Bad variable-length (cu_seqlens) and key-length arguments are rejected with flashattn::Error
// naming the array, the index and the values, before anything is written.
#include <cstdint>

#include "fixture.hpp"

using unit::Fixture;
using unit::reject;

namespace {

// A packed batch of two sequences: q rows [0, 2) and [2, 6), k rows [0, 3) and [3, 7).
struct Varlen : Fixture {
  Varlen() : Fixture(unit::Shape{1, 6, 7, 4, 2, 8}) {
    cu_q = {0, 2, 6};
    cu_k = {0, 3, 7};
    fwd.cu_seqlens_q = cu_q.data();
    fwd.cu_seqlens_k = cu_k.data();
    fwd.varlen_batch = 2;
    static_cast<flashattn::AttentionArgs&>(bwd) = fwd;
  }
};

}  // namespace

TEST_CASE("validate varlen: the packed call is valid forward and backward") {
  Varlen fx;
  CHECK_NOTHROW(flashattn::validate(fx.forward()));
  CHECK_NOTHROW(flashattn::validate(fx.bwd));
}

TEST_CASE("validate varlen: inconsistent cu_seqlens") {
  Varlen fx;
  auto a = fx.forward();
  SUBCASE("q not starting at 0") { fx.cu_q[0] = 1; reject(fx, a, {"cu_seqlens_q[0] (1) must be 0"}); }
  SUBCASE("k not starting at 0") { fx.cu_k[0] = -3; reject(fx, a, {"cu_seqlens_k[0] (-3) must be 0"}); }
  SUBCASE("q decreasing") {
    fx.cu_q = {0, 3, 2};
    reject(fx, a, {"cu_seqlens_q must be non-decreasing", "cu_seqlens_q[2] (2) < cu_seqlens_q[1] (3)"});
  }
  SUBCASE("k decreasing") {
    fx.cu_k = {0, 4, 1};
    reject(fx, a, {"cu_seqlens_k must be non-decreasing", "cu_seqlens_k[2] (1) < cu_seqlens_k[1] (4)"});
  }
  SUBCASE("k exceeding total") { fx.cu_k[2] = 9; reject(fx, a, {"cu_seqlens_k[2] (9) exceeds k.seq (7)"}); }
  SUBCASE("q exceeding total") { fx.cu_q[2] = 7; reject(fx, a, {"cu_seqlens_q[2] (7) exceeds q.seq (6)"}); }
  SUBCASE("q longer than max_seqlen_q") {
    a.max_seqlen_q = 3;
    reject(fx, a, {"cu_seqlens_q: sequence 1 has length 4 > max_seqlen_q (3)"});
  }
  SUBCASE("k longer than max_seqlen_k") {
    a.max_seqlen_k = 2;
    reject(fx, a, {"cu_seqlens_k: sequence 0 has length 3 > max_seqlen_k (2)"});
  }
  SUBCASE("negative max_seqlen") { a.max_seqlen_k = -1; reject(fx, a, {"max_seqlen_k (-1) must not be negative"}); }
}

TEST_CASE("validate varlen: inconsistent options") {
  Varlen fx;
  auto a = fx.forward();
  SUBCASE("only cu_seqlens_q") {
    a.cu_seqlens_k = nullptr;
    reject(fx, a, {"cu_seqlens_q and cu_seqlens_k must be given together (got cu_seqlens_q only)"});
  }
  SUBCASE("only cu_seqlens_k") {
    a.cu_seqlens_q = nullptr;
    reject(fx, a, {"must be given together (got cu_seqlens_k only)"});
  }
  SUBCASE("negative varlen_batch") { a.varlen_batch = -1; reject(fx, a, {"varlen_batch (-1) must be in [0, 2^31)"}); }
  SUBCASE("varlen_batch without cu_seqlens") {
    a.cu_seqlens_q = a.cu_seqlens_k = nullptr;
    reject(fx, a, {"varlen_batch (2) is set but cu_seqlens_q is null"});
  }
  SUBCASE("seqlens_k beyond the sequence's keys") {
    fx.seqlens_k = {3, 5};  // sequence 1 has 4 keys
    a.seqlens_k = fx.seqlens_k.data();
    reject(fx, a, {"seqlens_k[1] (5) must be in [0, 4]"});
  }
}

TEST_CASE("validate varlen: batch must be 1") {
  Fixture fx;  // batch 2
  fx.cu_q = {0, 2, 4};
  fx.cu_k = {0, 2, 5};
  auto a = fx.forward();
  a.cu_seqlens_q = fx.cu_q.data();
  a.cu_seqlens_k = fx.cu_k.data();
  a.varlen_batch = 2;
  reject(fx, a, {"varlen (cu_seqlens_q set) needs q.batch and k.batch 1 (got 2, 2)"});
}
