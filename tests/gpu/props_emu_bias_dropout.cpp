// The GPU kernels with an additive bias and dropout (docs/semantics.md, "Additive bias and
// dropout"), run by the host emulator (gpu/emu) on host memory and judged against the fp64 oracle:
//   forward (out, lse) and the keep-mask output (bitwise against flashattn::write_dropout_mask),
//   the backward in both dQ modes (dq, dk, dv and dbias by the tolerance rule), over fixed cases
//   that cover every bias shape (full, [1, Nq, 1, Nk], [1, 1, Hq, Nk], stride 0), −∞ entries with
//   rows hidden wholly by the bias, GQA, causal, windows, softcap, ALiBi, seqlens_k, varlen;
//   dropout p = 0 gives the bits of the call without dropout; paged K/V with split-KV and sinks.
// The cases are small: emulation is slow and CI runs this within the emulator's time budget.
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "emu/emu_api.hpp"
#include "emu/props_calls.hpp"
#include "flashattn/convert.hpp"
#include "flashattn/dropout.hpp"
#include "flashattn/problem.hpp"
#include "props/inference.hpp"
#include "props/instance.hpp"
#include "props/rng.hpp"
#include "tolerance/judge.hpp"

namespace {

using flashattn::DType;
using props::BiasKind;
using props::Case;

Case base_case(DType dtype, int64_t dim, uint64_t seed) {
  Case c;
  c.batch = 2;
  c.heads_k = 1;
  c.group = 2;
  c.seqlen_q = 37;
  c.seqlen_k = 45;
  c.dim = dim;
  c.dtype = dtype;
  c.seed = seed;
  return c;
}

// The fixed cases: each bias shape and dtype, −∞ entries, dropout, with the masks and options.
std::vector<Case> cases() {
  std::vector<Case> r;
  Case c = base_case(DType::f16, 64, 11);  // full bias, fp32 entries, dropout
  c.bias = BiasKind::full;
  c.dropout_p = 0.2f;
  r.push_back(c);
  c = base_case(DType::bf16, 32, 12);  // one table for every sequence and head, causal, −∞ entries
  c.bias = BiasKind::rows_keys;
  c.bias_dtype = DType::bf16;
  c.bias_inf = true;
  c.causal = true;
  r.push_back(c);
  c = base_case(DType::f16, 128, 13);  // per-head key bias (f16), window, softcap, ALiBi, dropout
  c.bias = BiasKind::head_keys;
  c.bias_dtype = DType::f16;
  c.window_left = 9;
  c.window_right = 4;
  c.softcap = 5;
  c.alibi = props::Alibi::per_batch;
  c.dropout_p = 0.2f;
  r.push_back(c);
  c = base_case(DType::bf16, 64, 14);  // stride-0 broadcast, seqlens_k, −∞ entries, dropout
  c.bias = BiasKind::stride0;
  c.bias_inf = true;
  c.key_lengths = {30, 1};
  c.dropout_p = 0.2f;
  r.push_back(c);
  c = base_case(DType::f16, 96, 15);  // varlen, full bias, causal, dropout
  c.batch = 2;
  c.varlen_q = {20, 9};
  c.varlen_k = {33, 17};
  c.seqlen_q = 29;
  c.seqlen_k = 50;
  c.bias = BiasKind::full;
  c.bias_dtype = DType::bf16;
  c.causal = true;
  c.dropout_p = 0.2f;
  r.push_back(c);
  c = base_case(DType::bf16, 256, 16);  // d = 256 (other tile shapes), dropout only
  c.seqlen_q = 20;
  c.seqlen_k = 40;
  c.dropout_p = 0.2f;
  r.push_back(c);
  return r;
}

// Returns "" if the keep mask the call wrote is the one flashattn::write_dropout_mask writes.
std::string check_mask(const flashattn::ForwardArgs& a, const props::Instance& inst) {
  if (!a.dropout_mask) return "";
  std::vector<uint8_t> expected(static_cast<size_t>(inst.dropout_mask_bytes()), 0xA5);
  flashattn::ForwardArgs e = a;
  e.dropout_mask = expected.data();
  flashattn::write_dropout_mask(e);
  return std::memcmp(expected.data(), a.dropout_mask, expected.size()) == 0 ? "" : "dropout_mask differs";
}

TEST_CASE("gpu-emulated forward with bias and dropout agrees with the oracle; the keep mask is exact") {
  for (const Case& c : cases()) {
    CAPTURE(props::to_string(c));
    props::Instance inst(c);
    const flashattn::ForwardArgs a = inst.forward_args();
    flashattn::gpu_emu::forward_in_gpu_layout(a);
    CHECK(flashattn::tolerance::judge_forward(a).first_failure() == "");
    CHECK(check_mask(a, inst) == "");
    CHECK(inst.check() == "");
  }
}

TEST_CASE("gpu-emulated backward with bias and dropout (dbias, both dQ modes) agrees with the oracle") {
  for (const Case& c : cases()) {
    CAPTURE(props::to_string(c));
    props::Instance inst(c);
    for (const bool deterministic : {true, false}) {
      CAPTURE(deterministic);
      const flashattn::BackwardArgs a = inst.backward_args();
      flashattn::gpu_emu::backward_in_gpu_layout(a, deterministic);
      const flashattn::tolerance::Judgement j = flashattn::tolerance::judge_backward(a);
      CHECK(j.first_failure() == "");
      if (c.bias != BiasKind::off) CHECK(j.find("dbias") != nullptr);
      CHECK(inst.check() == "");
    }
  }
}

TEST_CASE("gpu-emulated dropout with p = 0 gives the bits of the call without dropout") {
  Case c = base_case(DType::bf16, 64, 21);
  c.bias = BiasKind::full;
  c.causal = true;
  props::Instance inst(c);
  auto bytes = [](const flashattn::Tensor& t) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    return std::vector<unsigned char>(p, p + (t.batch * t.stride_batch) * flashattn::dtype_size(t.dtype));
  };
  flashattn::ForwardArgs plain = inst.forward_args();
  flashattn::gpu_emu::forward_in_gpu_layout(plain);
  const auto out = bytes(plain.out);
  const std::vector<float> lse(inst.lse(), inst.lse() + inst.lse_count());
  flashattn::ForwardArgs zero = inst.forward_args();
  zero.dropout_seed = 0x123456789ull;
  zero.dropout_offset = 77;
  flashattn::gpu_emu::forward_in_gpu_layout(zero);
  CHECK(bytes(zero.out) == out);
  CHECK(std::memcmp(lse.data(), inst.lse(), lse.size() * sizeof(float)) == 0);
  flashattn::BackwardArgs b = inst.backward_args();
  flashattn::gpu_emu::backward_in_gpu_layout(b, true);
  const auto dq = bytes(b.dq), dk = bytes(b.dk), dv = bytes(b.dv), dbias = bytes(b.dbias);
  b = inst.backward_args();
  b.dropout_seed = 0x123456789ull;
  b.dropout_offset = 77;
  flashattn::gpu_emu::backward_in_gpu_layout(b, true);
  CHECK(bytes(b.dq) == dq);
  CHECK(bytes(b.dk) == dk);
  CHECK(bytes(b.dv) == dv);
  CHECK(bytes(b.dbias) == dbias);
}

TEST_CASE("gpu-emulated paged K/V with split-KV, sinks, bias and dropout agrees with the oracle") {
  for (const int64_t splits : {1, 3}) {
    props::InferenceSpec s;
    s.batch = 2;
    s.heads_k = 1;
    s.group = 2;
    s.seqlen_q = 5;
    s.dim = s.dim_v = 64;
    s.dtype = DType::f16;
    s.sinks = true;
    s.page_size = 16;
    s.lengths = {150, 70};
    s.num_splits = splits;
    s.seed = 31 + static_cast<uint64_t>(splits);
    CAPTURE(s.describe());
    props::InferenceProblem p(s);
    flashattn::ForwardArgs a = p.call();
    flashattn::ForwardArgs plain = p.plain();
    // A full f32 bias over the paged call's key columns; the plain call reads the same entries
    // (key j of a sequence is column j in both) through a view of its own key count.
    const int64_t nseq = a.q.batch, nq = a.q.seq, hq = a.q.heads, cols = flashattn::key_columns(a);
    std::vector<float> bias(static_cast<size_t>(nseq * hq * nq * cols));
    props::Rng rng(s.seed);
    for (float& x : bias) x = rng.below(5) == 0 ? -INFINITY : static_cast<float>(2 * rng.normal());
    a.bias = flashattn::bhsd(static_cast<const void*>(bias.data()), DType::f32, nseq, nq, hq, cols);
    plain.bias = a.bias;
    plain.bias.dim = flashattn::key_columns(plain);
    REQUIRE(plain.bias.dim <= cols);
    for (flashattn::ForwardArgs* x : {&a, &plain}) {
      x->dropout_p = 0.25f;
      x->dropout_seed = 99;
      x->dropout_offset = 5;
    }
    std::vector<uint8_t> mask(static_cast<size_t>(flashattn::lse_count(a) * flashattn::dropout_mask_row_bytes(a)), 0xA5);
    a.dropout_mask = mask.data();
    flashattn::gpu_emu::forward_in_gpu_layout(a);
    plain.out = a.out;
    plain.lse = a.lse;
    CHECK(flashattn::tolerance::judge_forward(plain).first_failure() == "");
    std::vector<uint8_t> expected(mask.size(), 0xA5);
    flashattn::ForwardArgs e = a;
    e.dropout_mask = expected.data();
    flashattn::write_dropout_mask(e);
    CHECK(mask == expected);
  }
}

}  // namespace
