// CPU edge cases on every compiled target and every tile size: rows that see no key, |S| ~ 1e3,
// a single query or key, odd head dims, tile-boundary lengths, empty varlen sequences — each
// cross-checked against the oracle (which also requires out = 0, lse = −∞ and zero gradients for
// rows and keys outside every mask). Plus the config errors and the target list.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "flashattn/cpu.hpp"
#include "flashattn/error.hpp"
#include "props/case.hpp"
#include "props/crosscheck.hpp"
#include "props/instance.hpp"
#include "props/registry.hpp"
#include "props.hpp"
#include "hwy/targets.h"

namespace {

using flashattn::DType;
using props::Case;

// Returns one CPU implementation with a forced target and tiles (and query blocks per backward pass;
// `decode` false: every forward takes the general tiled path).
props::Implementation cpu_with(const flashattn::cpu::Target& t, const props_cpu::Tiles& tiles, int backward_blocks = 0,
                               bool decode = true) {
  flashattn::cpu::Config c;
  c.target = t.bit;
  c.block_q = tiles.block_q;
  c.block_k = tiles.block_k;
  c.threads = 2;
  c.backward_blocks = backward_blocks;
  c.decode = decode;
  return {"cpu-" + t.name + "-" + tiles.name + (backward_blocks ? "-passes-of-" + std::to_string(backward_blocks) : "") +
              (decode ? "" : "-general"),
          [c](const flashattn::ForwardArgs& a) { flashattn::cpu::forward(a, c); },
          [c](const flashattn::BackwardArgs& a) { flashattn::cpu::backward(a, c); }, {}};
}

Case base(int64_t nq, int64_t nk, int64_t d, DType t) {
  Case c;
  c.seqlen_q = nq;
  c.seqlen_k = nk;
  c.dim = d;
  c.dtype = t;
  c.seed = static_cast<uint64_t>(nq * 1000003 + nk * 1009 + d);
  return c;
}

// The directed cases.
std::vector<Case> edge_cases() {
  std::vector<Case> r;
  r.push_back(base(1, 1, 1, DType::f32));  // N = 1, d = 1
  {
    Case c = base(1, 300, 67, DType::bf16);  // decode step: one query sees the whole cache, odd d
    c.causal = true;
    r.push_back(c);
  }
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {  // |S| ~ 1e3
    Case c = base(40, 40, 64, t);
    c.values = props::Values::large;
    c.causal = true;
    r.push_back(c);
  }
  {
    Case c = base(9, 11, 5, DType::f32);  // sequence 0 has no keys at all: every row empty
    c.batch = 2;
    c.key_lengths = {0, 7};
    r.push_back(c);
  }
  {
    Case c = base(20, 8, 3, DType::f16);  // window (0, 0) with more queries than keys: empty rows
    c.window_left = 0;
    c.window_right = 0;
    c.group = 3;
    r.push_back(c);
  }
  {
    Case c = base(0, 0, 33, DType::f32);  // varlen with empty sequences on either side
    c.batch = 3;
    c.varlen_q = {0, 13, 6};
    c.varlen_k = {4, 0, 17};
    c.seqlen_q = 19;
    c.seqlen_k = 21;
    r.push_back(c);
  }
  {
    Case c = base(65, 129, 128, DType::f32);  // one past the default tiles, causal + softcap + ALiBi
    c.causal = true;
    c.softcap = 2.0f;
    c.alibi = props::Alibi::shared;
    r.push_back(c);
  }
  {
    Case c = base(63, 127, 17, DType::bf16);  // one short of the default tiles, sliding window, GQA
    c.window_left = 10;
    c.window_right = 3;
    c.heads_k = 2;
    c.group = 2;
    c.layout = props::Layout::padded;
    c.offset = true;
    r.push_back(c);
  }
  // fp32 scores of ~30 (scale 1.5), causal + per-batch ALiBi: every fp32-score target erred 3.2e-6
  // in out where both naive orders drew 9.6e-7 (1.29x the bound before the rule counted one fp32
  // rounding of every score at its term size; docs/reliability.md).
  r.push_back(props::parse_case(
      "b=2 hk=2 g=2 nq=28 nk=75 d=32 dtype=f32 causal=1 wl=-1 wr=-1 softcap=0 alibi=per_batch seqlens_k=2,27 "
      "varlen_q=27,1 varlen_k=7,68 layout=padded offset=0 values=normal scale=1.5 seed=713529462"));
  // scale 0: every visible score is 0, so the naive P is 1/30 rounded once and its dv nearly exact;
  // the backward's fp32 sum of the 30 equal P that renormalises them erred in one direction, dv 6.5
  // units off, 1.01x the bound, until that sum was taken in fp64 (docs/reliability.md).
  r.push_back(props::parse_case(
      "b=1 hk=4 g=1 nq=2 nk=30 d=1 dtype=f32 causal=0 wl=-1 wr=1 softcap=0 alibi=off seqlens_k=- varlen_q=- "
      "varlen_k=- layout=bhsd offset=0 values=large scale=0 seed=294574116"));
  // Soft-capped fp32 scores with the fp32 tanh (several roundings of the capped score where the
  // naive one has one each): dq 1.84x and out 1.12x the bound, until soft-capped fp32 tiles took the
  // fp64 score path (plan.h exact_tile).
  r.push_back(props::parse_case(
      "b=1 hk=1 g=1 nq=47 nk=46 d=2 dtype=f32 causal=0 wl=-1 wr=45 softcap=30 alibi=off seqlens_k=- varlen_q=- "
      "varlen_k=- layout=bhsd offset=0 values=zero_v scale=default seed=1602705937"));
  r.push_back(props::parse_case(
      "b=3 hk=1 g=3 nq=16 nk=16 d=7 dtype=f32 causal=0 wl=-1 wr=-1 softcap=50 alibi=off seqlens_k=1,1,16 "
      "varlen_q=- varlen_k=- layout=padded offset=0 values=normal scale=0.5 seed=2956383947"));
  // d = 256: dq 4.2e-6 off where both naive orders drew 1e-6 (1.01x the bound, 1.07x on the targets
  // without FMA); the rule now takes the worst of three naive orders (+ alternating), which passes it.
  r.push_back(props::parse_case(
      "b=2 hk=1 g=1 nq=15 nk=15 d=256 dtype=f32 causal=0 wl=-1 wr=-1 softcap=0 alibi=off seqlens_k=- varlen_q=- "
      "varlen_k=- layout=bshd offset=0 values=normal scale=default seed=1418383231"));
  // d = 128, heavy-tailed values, causal: the AVX2 fp32 backward's dq erred 4.56e-5, 1.06x three
  // times the naive orders' draws, until the rule's fp32 lower bound for dq and dk counted one
  // rounding of every score at its term size (R in docs/semantics.md; docs/reliability.md).
  r.push_back(props::parse_case(
      "b=1 hk=2 g=1 nq=7 nk=64 d=128 dtype=f32 causal=1 window_left=-1 window_right=-1 diagonal_offset=0 "
      "scale=default softcap=0 alibi=off seqlens_k=- varlen_q=7 varlen_k=64 layout=padded offset=0 values=heavy "
      "seed=511410790"));
  // d = 100, heavy-tailed values, few rows (the decode path's shape, so run with decode off too): the
  // general tiled forward's scores, FMA chains over the 100 products, erred 5.4 u32·T and out
  // 1.5e-5 where the naive orders drew at most 3.1e-6 (1.39x the bound while the rule's lower bound
  // for out counted two roundings of every score; it counts max(2, √(d/3)) now, docs/semantics.md).
  r.push_back(props::parse_case(
      "b=2 hk=1 g=2 nq=8 nk=16 d=100 dtype=f32 causal=0 window_left=0 window_right=-1 diagonal_offset=0 "
      "scale=default softcap=0 alibi=off seqlens_k=14,1 varlen_q=- varlen_k=- layout=bhsd offset=0 values=heavy "
      "seed=1814976096"));
  return r;
}

}  // namespace

TEST_CASE("cpu: edge cases agree with the oracle on every target and tile size, and on the general path") {
  std::vector<props_cpu::Tiles> tiles = props_cpu::tiny_tiles();
  tiles.push_back({0, 0, "default"});
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    std::vector<props::Implementation> impls;
    for (const props_cpu::Tiles& tl : tiles) impls.push_back(cpu_with(t, tl));
    impls.push_back(cpu_with(t, {0, 0, "default"}, 0, false));
    for (const props::Implementation& impl : impls) {
      for (const Case& c : edge_cases()) {
        INFO(impl.name << ": " << c);
        const std::string f = props::crosscheck_forward(impl, c);
        CHECK_MESSAGE(f.empty(), f);
        const std::string b = props::crosscheck_backward(impl, c);
        CHECK_MESSAGE(b.empty(), b);
      }
    }
  }
}

TEST_CASE("cpu: a backward over more than one accumulation group of query rows agrees with the oracle") {
  // Past kAccumulateGroupRows (16384) query rows the backward sums dK, dV per group of rows before
  // adding them to the head's accumulators (plan.h); few keys and a small head dim keep it cheap.
  std::vector<Case> cases;
  {
    Case c = base(16384 + 200, 3, 2, DType::f32);
    c.heads_k = 1;
    cases.push_back(c);
  }
  {
    Case c = base(16384 + 77, 5, 3, DType::bf16);  // causal with Nq > Nk: the first rows are empty
    c.causal = true;
    c.group = 2;
    cases.push_back(c);
  }
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    // Passes of 7 blocks of 3 rows do not divide a group (5461 blocks): a pass stops at its end.
    for (const props::Implementation& impl : {cpu_with(t, {0, 0, "default"}), cpu_with(t, {3, 5, "3x5"}),
                                              cpu_with(t, {3, 5, "3x5"}, 7)}) {
      for (const Case& c : cases) {
        INFO(impl.name << ": " << c);
        const std::string b = props::crosscheck_backward(impl, c);
        CHECK_MESSAGE(b.empty(), b);
      }
    }
  }
}

TEST_CASE("cpu: targets() lists the compiled targets this CPU supports, best first") {
  const std::vector<flashattn::cpu::Target> ts = flashattn::cpu::targets();
  REQUIRE(!ts.empty());
  for (size_t i = 1; i < ts.size(); ++i) CHECK(ts[i - 1].bit < ts[i].bit);  // lower bit: better target
  for (const auto& t : ts) MESSAGE("target " << t.name);
  // The baseline (static) target is always compiled and always runs: on x86-64 the portable
  // fallback (SSE2 is no Highway target), SSE4 in a FLASHATTN_SIMD_TARGETS=host build (x86-64-v2
  // baseline); on aarch64 NEON, which every A64 CPU has, and Highway's default policy compiles no
  // target below the baseline (so no fallback).
  CHECK(ts.back().bit == int64_t{HWY_STATIC_TARGET});
  CHECK(ts.back().name == std::string(hwy::TargetName(HWY_STATIC_TARGET)));
#if defined(__aarch64__)
  CHECK(ts.back().name == "NEON");
#elif !defined(__SSE4_2__)
  CHECK((ts.back().name == "SCALAR" || ts.back().name == "EMU128"));
#endif
}

TEST_CASE("cpu: bad configs throw flashattn::Error before writing anything") {
  Case c = base(5, 6, 8, DType::f32);
  props::Instance inst(c);
  const flashattn::ForwardArgs a = inst.forward_args();
  const std::vector<uint32_t> before = props_cpu::view_bits(inst.out());
  auto error_of = [&](const flashattn::cpu::Config& cfg) -> std::string {
    try {
      flashattn::cpu::forward(a, cfg);
    } catch (const flashattn::Error& e) {
      return e.what();
    }
    return "";
  };
  flashattn::cpu::Config bad_target;
  bad_target.target = 3;  // two bits: not one Highway target
  CHECK(error_of(bad_target).find("cpu::Config.target") != std::string::npos);
  flashattn::cpu::Config bad_block;
  bad_block.block_q = -2;
  CHECK(error_of(bad_block).find("cpu::Config.block_q (-2)") != std::string::npos);
  flashattn::cpu::Config bad_passes;
  bad_passes.backward_blocks = 17;
  CHECK(error_of(bad_passes).find("cpu::Config.backward_blocks (17) must be in [0, 16]") != std::string::npos);
  bad_passes.backward_blocks = -1;
  CHECK(error_of(bad_passes).find("cpu::Config.backward_blocks (-1)") != std::string::npos);
  flashattn::cpu::Config bad_threads;
  bad_threads.threads = -1;
  CHECK(error_of(bad_threads).find("cpu::Config.threads (-1)") != std::string::npos);
  flashattn::cpu::Config bad_heads;
  bad_heads.decode_heads = 17;
  CHECK(error_of(bad_heads).find("cpu::Config.decode_heads (17) must be in [0, 16]") != std::string::npos);
  flashattn::cpu::Config bad_scores;
  bad_scores.scores = static_cast<flashattn::cpu::ScorePrecision>(7);
  CHECK(error_of(bad_scores).find("cpu::Config.scores (7)") != std::string::npos);
  CHECK(props_cpu::view_bits(inst.out()) == before);
}

// Runs the CPU forward and backward of case c with `scores` and returns the bits of out, dq, dk, dv.
std::vector<uint32_t> result_bits(const Case& c, flashattn::cpu::ScorePrecision scores) {
  props::Instance inst(c);
  flashattn::cpu::Config cfg;
  cfg.scores = scores;
  flashattn::cpu::forward(inst.forward_args(), cfg);
  std::vector<uint32_t> r = props_cpu::view_bits(inst.out());
  flashattn::cpu::backward(inst.backward_args(), cfg);
  for (const flashattn::Tensor* t : {&inst.dq(), &inst.dk(), &inst.dv()}) {
    const std::vector<uint32_t> b = props_cpu::view_bits(*t);
    r.insert(r.end(), b.begin(), b.end());
  }
  return r;
}

TEST_CASE("cpu: adaptive scores take the fp64 path exactly where the score bound is large") {
  using flashattn::cpu::ScorePrecision;
  // |S| ~ 1e3: every tile's bound is far above kExactScoreBound, so adaptive = fp64, bit for bit.
  Case large = base(70, 150, 64, DType::f32);
  large.values = props::Values::large;
  CHECK(result_bits(large, ScorePrecision::adaptive) == result_bits(large, ScorePrecision::fp64));
  CHECK(result_bits(large, ScorePrecision::adaptive) != result_bits(large, ScorePrecision::fp32));
  // Unit-variance q, k with the default scale 1/sqrt(d): bound ~ 10, far below it, so adaptive's
  // forward equals fp32's (its backward still self-normalises, so only out is compared).
  Case normal = base(70, 150, 64, DType::f32);
  const size_t out_elems = static_cast<size_t>(70 * 64);
  const std::vector<uint32_t> a = result_bits(normal, ScorePrecision::adaptive);
  const std::vector<uint32_t> f = result_bits(normal, ScorePrecision::fp32);
  const std::vector<uint32_t> e = result_bits(normal, ScorePrecision::fp64);
  CHECK(std::vector<uint32_t>(a.begin(), a.begin() + out_elems) == std::vector<uint32_t>(f.begin(), f.begin() + out_elems));
  CHECK(std::vector<uint32_t>(a.begin(), a.begin() + out_elems) != std::vector<uint32_t>(e.begin(), e.begin() + out_elems));
  // Soft-capped calls take fp64 scores whatever their bound (docs/usage.md, `scores`): Highway's
  // fp32 tanh errs by a few units where the naive one rounds once; with fp32 scores a soft-capped
  // f32 forward reached 0.99 of the bound in 20,000 generated cases (docs/reliability.md).
  Case capped = normal;
  capped.softcap = 5.0f;
  CHECK(result_bits(capped, ScorePrecision::adaptive) == result_bits(capped, ScorePrecision::fp64));
  CHECK(result_bits(capped, ScorePrecision::adaptive) != result_bits(capped, ScorePrecision::fp32));
}
