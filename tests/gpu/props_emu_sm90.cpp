// The sm_90a forward kernel (gpu/forward_sm90_kernel.cuh) under the host emulator, against the fp64
// oracle by the tolerance rule: random calls of the kind it takes (f16/bf16, d = 64 and 128, GQA,
// causal, windows, diagonal offsets, softcap, ALiBi, sinks, LSE, varlen, key lengths, additive bias,
// split-KV, scales the plain variant cannot take, every layout and value distribution, from
// one key tile to several, with partial query and key blocks), each checked to have run that kernel;
// calls it does not take run the mma.sync kernel.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "emu/check.hpp"
#include "emu/emu_api.hpp"
#include "emu/props_calls.hpp"
#include "props/case.hpp"
#include "props/instance.hpp"
#include "tolerance/judge.hpp"

namespace {

using flashattn::gpu_emu::sm90_forward_calls;

// A random call the sm_90a forward takes, drawn from rng.
props::Case draw(std::mt19937_64& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  props::Case c;
  c.batch = 1 + pick(2);
  c.heads_k = 1 + pick(2);
  c.group = 1 + pick(3);
  c.dim = pick(2) ? 128 : 64;
  c.dtype = pick(2) ? flashattn::DType::bf16 : flashattn::DType::f16;
  const int sizes[] = {1, 7, 64, 127, 128, 129, 200, 300, 390};
  c.seqlen_q = sizes[pick(9)];
  c.seqlen_k = sizes[pick(9)];
  if (pick(4) == 0) {  // varlen: packed sequences (their own maps: zeros past each one's rows)
    c.seqlen_q = c.seqlen_k = 0;
    for (int64_t i = 0; i < c.batch; ++i) {
      c.varlen_q.push_back(sizes[pick(9)] - (i == 1 ? 1 : 0));
      c.varlen_k.push_back(sizes[pick(9)]);
      c.seqlen_q += c.varlen_q.back();
      c.seqlen_k += c.varlen_k.back();
    }
  }
  if (pick(4) == 0)  // key lengths: each sequence sees a prefix of its keys
    for (int64_t i = 0; i < c.batch; ++i) {
      const int64_t keys = c.varlen() ? c.varlen_k[static_cast<size_t>(i)] : c.seqlen_k;
      c.key_lengths.push_back(static_cast<int32_t>(pick(static_cast<int>(keys) + 1)));
    }
  c.causal = pick(3) == 0;
  if (pick(4) == 0) c.window_left = pick(150);
  if (pick(4) == 0) c.window_right = pick(150);
  if (pick(5) == 0) c.diagonal_offset = pick(200) - 100;
  if (pick(4) == 0) c.softcap = pick(2) ? 2.0f : 30.0f;
  if (pick(4) == 0) c.alibi = pick(2) ? props::Alibi::shared : props::Alibi::per_batch;
  if (pick(6) == 0) c.scale = pick(2) ? -0.2f : 0.0f;
  if (pick(5) == 0) {
    const props::BiasKind kinds[] = {props::BiasKind::full, props::BiasKind::rows_keys, props::BiasKind::head_keys,
                                     props::BiasKind::stride0};
    c.bias = kinds[pick(4)];
    c.bias_dtype = pick(2) ? flashattn::DType::bf16 : flashattn::DType::f32;
    c.bias_inf = pick(3) == 0;
  }
  const props::Layout layouts[] = {props::Layout::bshd, props::Layout::bhsd, props::Layout::padded};
  c.layout = layouts[pick(3)];
  const props::Values values[] = {props::Values::normal, props::Values::large, props::Values::ties,
                                  props::Values::zero_v, props::Values::heavy};
  c.values = values[pick(5)];
  c.seed = rng();
  return c;
}

// Runs the forward of c with the sm_90a kernels enabled (sinks when `sinks`, cut into `splits` key
// splits: 0 chooses) and checks it against the oracle; returns how many sm_90a launches it made.
int64_t check(const props::Case& c, bool sinks, int splits = 1) {
  CAPTURE(props::to_string(c));
  CAPTURE(sinks);
  CAPTURE(splits);
  props::Instance inst(c);
  flashattn::ForwardArgs a = inst.forward_args();
  a.num_splits = splits;
  std::vector<float> sink_logits(static_cast<size_t>(c.heads_q()));
  for (size_t h = 0; h < sink_logits.size(); ++h) sink_logits[h] = 0.5f * static_cast<float>(h) - 1.0f;
  if (sinks) a.sinks = sink_logits.data();
  const int64_t before = sm90_forward_calls;
  emu::set_schedule_seed(c.seed);  // a schedule per case: producer and consumers interleave differently
  flashattn::gpu_emu::forward_in_gpu_layout(a, true);
  const flashattn::tolerance::Judgement j = flashattn::tolerance::judge_forward(a);
  CHECK_MESSAGE(j.passed(), j.first_failure());
  const std::string intact = inst.check();
  CHECK_MESSAGE(intact.empty(), intact);
  return sm90_forward_calls - before;
}

TEST_CASE("sm90 forward: random calls it takes agree with the oracle, and run the sm_90a kernel") {
  const char* env = std::getenv("FLASHATTN_PROPS_CASES");
  const int cases = env && *env ? std::max(1, std::atoi(env)) : 24;
  std::mt19937_64 rng(20261127);
  for (int i = 0; i < cases; ++i) {
    const props::Case c = draw(rng);
    CHECK(check(c, i % 4 == 3, i % 3 == 2 ? static_cast<int>(rng() % 4) : 1) == 1);
  }
}

// Fills value rows [first, last) of batch b (every head) with NaN before the call.
void nan_value_rows(const props::Instance& inst, int64_t b, int64_t first, int64_t last) {
  const flashattn::Tensor& v = inst.v();
  auto* data = static_cast<uint16_t*>(v.data);
  for (int64_t r = first; r < last; ++r)
    for (int64_t h = 0; h < v.heads; ++h)
      for (int64_t x = 0; x < v.dim; ++x) data[v.offset(b, r, h) + x] = 0x7FC0;  // NaN in f16 and bf16
}

// Runs c through the sm_90a forward, with NaN in value rows [nan_first, nan_last) of batch 0 when
// nan_last > nan_first, and returns the bits of output rows [0, rows) of batch 0.
std::vector<uint16_t> first_rows(const props::Case& c, int64_t rows, int64_t nan_first, int64_t nan_last) {
  props::Instance inst(c);
  if (nan_last > nan_first) nan_value_rows(inst, 0, nan_first, nan_last);
  const flashattn::ForwardArgs a = inst.forward_args();
  const int64_t before = sm90_forward_calls;
  flashattn::gpu_emu::forward_in_gpu_layout(a, true);
  CHECK(sm90_forward_calls - before == 1);
  std::vector<uint16_t> bits;
  const auto* out = static_cast<const uint16_t*>(a.out.data);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < a.out.heads; ++h)
      for (int64_t x = 0; x < a.out.dim; ++x) bits.push_back(out[a.out.offset(0, r, h) + x]);
  return bits;
}

TEST_CASE("sm90 forward: NaN in the values of another sequence, or past a sequence's key length, reaches no row") {
  for (int dim : {64, 128}) {
    CAPTURE(dim);
    props::Case c;
    c.dim = dim;
    c.dtype = flashattn::DType::bf16;
    c.heads_k = 2;
    c.seed = 11;
    c.batch = 2;  // varlen: sequence 1's keys follow sequence 0's 150 in the packed tensor
    c.varlen_q = {100, 60};
    c.varlen_k = {150, 90};
    c.seqlen_q = 160, c.seqlen_k = 240;
    const std::vector<uint16_t> clean = first_rows(c, 100, 0, 0);
    CHECK(first_rows(c, 100, 150, 240) == clean);  // sequence 0's rows: the same bits
    c.varlen_q.clear(), c.varlen_k.clear();
    c.seqlen_q = 70, c.seqlen_k = 200;
    c.key_lengths = {33, 200};  // batch 0 sees 33 keys: rows 33-199 of its cache hold NaN
    CHECK(first_rows(c, 70, 33, 200) == first_rows(c, 70, 0, 0));
  }
}

TEST_CASE("sm90 forward: calls it does not take (block masks, dropout, other head dims) run the mma.sync kernel") {
  std::mt19937_64 rng(7);
  props::Case c = draw(rng);
  c.varlen_q.clear(), c.varlen_k.clear(), c.key_lengths.clear();
  c.seqlen_q = 70, c.seqlen_k = 150, c.batch = 2;
  c.blocks = props::BlockSparse::lists;
  c.block_q = 16, c.block_k = 32;
  CHECK(check(c, false) == 0);
  c.blocks = props::BlockSparse::off;
  c.dropout_p = 0.25f;
  CHECK(check(c, false) == 0);
  c.dropout_p = 0;
  c.dim = 96;
  CHECK(check(c, false) == 0);
}

}  // namespace
