// CPU-specific properties: results are bitwise identical for any thread count (oversubscribed
// included) and across calls, and the scratch memory a call needs has no seqlen_q·seqlen_k term.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "flashattn/cpu.hpp"
#include "props/case.hpp"
#include "props/check.hpp"
#include "props/crosscheck.hpp"
#include "props/instance.hpp"
#include "props.hpp"

namespace {

using flashattn::cpu::Config;

// Thread counts compared with one thread: 2 cores in CI, so 3 and 5 oversubscribe.
const int kThreadCounts[] = {2, 3, 5};
constexpr int kDeterminismCases = 25;

// Bits of everything a forward call writes.
struct ForwardBits {
  std::vector<uint32_t> out, lse;
  bool operator==(const ForwardBits& o) const { return out == o.out && lse == o.lse; }
};
struct BackwardBits {
  std::vector<uint32_t> dq, dk, dv;
  bool operator==(const BackwardBits& o) const { return dq == o.dq && dk == o.dk && dv == o.dv; }
};

ForwardBits run_forward(props::Instance& inst, const Config& c) {
  const flashattn::ForwardArgs a = inst.forward_args();
  flashattn::cpu::forward(a, c);
  ForwardBits r{props_cpu::view_bits(inst.out()), {}};
  const auto* l = reinterpret_cast<const uint32_t*>(inst.lse());
  r.lse.assign(l, l + inst.lse_count());
  return r;
}

BackwardBits run_backward(props::Instance& inst, const Config& c) {
  const flashattn::BackwardArgs a = inst.backward_args();
  flashattn::cpu::backward(a, c);
  return {props_cpu::view_bits(inst.dq()), props_cpu::view_bits(inst.dk()), props_cpu::view_bits(inst.dv())};
}

}  // namespace

TEST_CASE("cpu: results are bitwise identical for 1, 2, 3 and 5 threads and across calls") {
  // Tiny tiles make many work items (and many dQ contributions per row) even on small cases.
  for (const props_cpu::Tiles& tiles : {props_cpu::Tiles{0, 0, "default"}, props_cpu::Tiles{3, 5, "3x5"}}) {
    props::check(std::string("cpu-threads-") + tiles.name, [tiles] {
      const props::Case c = *props::gen_case();
      props::Instance inst(c);
      Config one;
      one.block_q = tiles.block_q;
      one.block_k = tiles.block_k;
      one.threads = 1;
      const ForwardBits f1 = run_forward(inst, one);
      const BackwardBits b1 = run_backward(inst, one);
      for (int threads : kThreadCounts) {
        Config many = one;
        many.threads = threads;
        RC_ASSERT(run_forward(inst, many) == f1);
        RC_ASSERT(run_backward(inst, many) == b1);
      }
      RC_ASSERT(run_forward(inst, one) == f1);  // and again after other calls reused the scratch
      RC_ASSERT(run_backward(inst, one) == b1);
    }, kDeterminismCases);
  }
}

TEST_CASE("cpu: backward results do not depend on how many query blocks share a pass over the keys") {
  // Config::backward_blocks only reorders the loops: every sum keeps its order. 3x5 tiles give
  // passes of 2, 3 and 16 blocks with a short last pass; 16x16 tiles passes over whole sequences.
  for (const props_cpu::Tiles& tiles : {props_cpu::Tiles{3, 5, "3x5"}, props_cpu::Tiles{16, 16, "16x16"}}) {
    props::check(std::string("cpu-backward-blocks-") + tiles.name, [tiles] {
      const props::Case c = *props::gen_case();
      props::Instance inst(c);
      Config one;
      one.block_q = tiles.block_q;
      one.block_k = tiles.block_k;
      one.backward_blocks = 1;
      const BackwardBits b1 = run_backward(inst, one);
      for (int blocks : {2, 3, 16}) {
        Config many = one;
        many.backward_blocks = blocks;
        RC_ASSERT(run_backward(inst, many) == b1);
      }
    }, kDeterminismCases);
  }
}

namespace {

// Arguments for a size-only query (workspace_bytes reads no tensor element): distinct, far apart
// fake addresses so validation sees non-overlapping, aligned views. Never dereferenced.
void* size_query_address(uintptr_t i) { return reinterpret_cast<void*>((uintptr_t{1} << 40) + (i << 36)); }

flashattn::ForwardArgs forward_size_query(int64_t nq, int64_t nk, int64_t heads_q, int64_t heads_k, int64_t d,
                                          flashattn::DType t) {
  auto addr = size_query_address;
  flashattn::ForwardArgs f;
  f.q = flashattn::bshd(addr(0), t, 1, nq, heads_q, d);
  f.k = flashattn::bshd(addr(1), t, 1, nk, heads_k, d);
  f.v = flashattn::bshd(addr(2), t, 1, nk, heads_k, d);
  f.out = flashattn::bshd(addr(3), t, 1, nq, heads_q, d);
  f.lse = static_cast<float*>(addr(8));
  return f;
}

flashattn::BackwardArgs size_query(int64_t nq, int64_t nk, int64_t heads_q, int64_t heads_k, int64_t d,
                                   flashattn::DType t) {
  auto addr = size_query_address;
  flashattn::BackwardArgs a = flashattn::backward_args(forward_size_query(nq, nk, heads_q, heads_k, d, t));
  a.dout = flashattn::bshd(addr(4), t, 1, nq, heads_q, d);
  a.dq = flashattn::bshd(addr(5), t, 1, nq, heads_q, d);
  a.dk = flashattn::bshd(addr(6), t, 1, nk, heads_k, d);
  a.dv = flashattn::bshd(addr(7), t, 1, nk, heads_k, d);
  return a;
}

}  // namespace

TEST_CASE("cpu: workspace_bytes has no seqlen_q x seqlen_k term and stays small at N = 16384") {
  // ws(N, K) + ws(n, k) == ws(N, k) + ws(n, K) holds for any a + f(seqlen_q) + g(seqlen_k), and
  // fails as soon as a term grows with the product. (Past kAccumulateGroupRows = 16384 query rows,
  // above these sizes, the backward adds two seqlen_k·d accumulators per thread: a step in
  // seqlen_q times a term linear in seqlen_k, bounded, not a product.)
  // n_small = 512 holds 8 default query blocks: at least the default query blocks per backward pass
  // (a long head's scratch holds a P cache per block of a pass, up to the blocks it has).
  const int64_t n_small = 512, n_large = 4096;
  for (flashattn::DType t : {flashattn::DType::f32, flashattn::DType::bf16}) {
    for (int64_t d : {64, 128, 37}) {
      for (int group : {1, 4}) {
        for (const props_cpu::Tiles& tiles : props_cpu::tiny_tiles()) {
          Config c;
          c.threads = 2;
          c.block_q = tiles.block_q;
          c.block_k = tiles.block_k;
          auto fwd = [&](int64_t nq, int64_t nk) {
            return flashattn::cpu::workspace_bytes(forward_size_query(nq, nk, 2 * group, 2, d, t), c);
          };
          auto bwd = [&](int64_t nq, int64_t nk) {
            return flashattn::cpu::workspace_bytes(size_query(nq, nk, 2 * group, 2, d, t), c);
          };
          INFO("dtype " << flashattn::dtype_name(t) << " d " << d << " group " << group << " tiles " << tiles.name);
          CHECK(fwd(n_large, n_large) + fwd(n_small, n_small) == fwd(n_large, n_small) + fwd(n_small, n_large));
          CHECK(bwd(n_large, n_large) + bwd(n_small, n_small) == bwd(n_large, n_small) + bwd(n_small, n_large));
        }
      }
    }
  }
  // At N = 16384, d = 128 (one f32 head, two threads, default config) the scratch is a small
  // fraction of one N x N fp32 matrix (1 GiB): with one head the bshd rows are contiguous, so K and
  // V are read in place and the forward holds only its tiles (~0.05 %); the backward holds per
  // thread the P caches of one pass (4 query blocks) and the head's dK, dV accumulators (~6.4 %).
  // Strided or 16-bit K/V add an fp32 head copy per thread (docs/cpu-design.md, "Memory").
  const int64_t n = 16384;
  const double matrix = static_cast<double>(n) * n * sizeof(float);
  Config c;
  c.threads = 2;
  const auto a = size_query(n, n, 1, 1, 128, flashattn::DType::f32);
  const double fwd =
      static_cast<double>(flashattn::cpu::workspace_bytes(forward_size_query(n, n, 1, 1, 128, flashattn::DType::f32), c));
  const double bwd = static_cast<double>(flashattn::cpu::workspace_bytes(a, c));
  MESSAGE("N=16384 d=128: forward scratch " << fwd / matrix << ", backward " << bwd / matrix << " of an N x N matrix");
  CHECK(fwd < matrix / 20);
  CHECK(bwd < matrix / 10);
}
