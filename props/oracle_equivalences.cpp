// Properties of the oracle: calls that must mean the same thing give the same results.
//   permuting keys with their values (no mask, no ALiBi) changes nothing;
//   GQA equals MHA with repeated K/V heads (dK, dV summed over the group);
//   a varlen call equals one call per sequence;  seqlens_k equals truncating K/V;
//   causal equals the window (left, 0);  splitting the keys and merging equals the whole.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <doctest/doctest.h>

#include "flashattn/merge.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/buffers.hpp"
#include "props/check.hpp"
#include "props/instance.hpp"
#include "props/oracle_support.hpp"
#include "props/rng.hpp"
#include "tolerance/compare.hpp"

namespace props {

using namespace ::flashattn::tolerance;  // NOLINT: the suite speaks the tolerance rule's vocabulary
namespace {

using flashattn::DType;
using flashattn::reference::Precision;

constexpr int kCases = 100;
// Relative difference allowed where only the fp64 summation order changes.
constexpr double kReorderTolerance = 1e-12;
// Relative difference allowed after flashattn::merge, which computes in fp32 from fp32 LSEs: an
// LSE rounded at magnitude L moves the weights exp(LSE - max) by ~L·2^-24, so out's allowance
// scales with max(1, max|LSE|) too.
constexpr double kMergeTolerance = 16 * 0x1p-24;

// Cases without position-dependent masks (no causal, window, ALiBi, seqlens_k, varlen).
CaseSpace unmasked() {
  CaseSpace s;
  s.masks = false;
  s.varlen = 0;
  s.key_lengths = 0;
  return s;
}

// Returns rows [begin, begin + count) of batch b of t as a batch-1 tensor.
Dense rows(const Dense& t, int64_t b, int64_t begin, int64_t count) {
  Dense r(1, count, t.heads, t.dim);
  for (int64_t s = 0; s < count; ++s)
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t x = 0; x < t.dim; ++x) r.at(0, s, h, x) = t.at(b, begin + s, h, x);
  return r;
}

// Returns the dense values `v` ([B, N, H, d] with t's sizes) as a Dense.
Dense shaped(const Dense& like, std::vector<double> v) {
  Dense r = like;
  r.data = std::move(v);
  return r;
}

// Returns LSE entries [b, h, begin .. begin + count) of lse [B, H, N] as [1, H, count].
std::vector<double> lse_rows(const std::vector<double>& lse, int64_t heads, int64_t n, int64_t b, int64_t begin,
                             int64_t count) {
  std::vector<double> r;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < count; ++i) r.push_back(lse[size_t((b * heads + h) * n + begin + i)]);
  return r;
}

// Options of sequence s of a call, as a batch-1 call of its own (no varlen).
Options sequence_options(const Options& all, int64_t s, int64_t heads_q) {
  Options o = all;
  o.cu_seqlens_q.clear();
  o.cu_seqlens_k.clear();
  o.varlen_batch = 0;
  if (!o.seqlens_k.empty()) o.seqlens_k = {all.seqlens_k[size_t(s)]};
  if (!o.alibi_slopes.empty() && o.alibi_batch_stride != 0) {
    o.alibi_slopes.assign(all.alibi_slopes.begin() + s * all.alibi_batch_stride,
                          all.alibi_slopes.begin() + s * all.alibi_batch_stride + heads_q);
    o.alibi_batch_stride = 0;
  }
  return o;
}

// The dense inputs of an instance.
struct Inputs {
  Dense q, k, v, dout;
  explicit Inputs(const Instance& i) : q(dense_of(i.q())), k(dense_of(i.k())), v(dense_of(i.v())), dout(dense_of(i.dout())) {}
};

}  // namespace

TEST_CASE("oracle: permuting keys with their values changes nothing (no mask)") {
  check("oracle/permutation", [] {
    const Case c = *gen_case(unmasked());
    const uint64_t perm_seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    const Inputs in(inst);
    std::vector<int64_t> perm(static_cast<size_t>(c.seqlen_k));
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(perm_seed);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[size_t(rng.below(int64_t(i)))]);
    Dense k = in.k, v = in.v;
    for (int64_t b = 0; b < k.batch; ++b)
      for (int64_t j = 0; j < k.seq; ++j)
        for (int64_t h = 0; h < k.heads; ++h)
          for (int64_t x = 0; x < k.dim; ++x) {
            k.at(b, j, h, x) = in.k.at(b, perm[size_t(j)], h, x);
            v.at(b, j, h, x) = in.v.at(b, perm[size_t(j)], h, x);
          }
    Call permuted(options_of(a), c.dtype, in.q, k, v, in.dout);
    const auto f0 = flashattn::reference::forward_values(a), f1 = permuted.forward(Precision::fp64);
    require(close(f1.out, f0.out, kReorderTolerance, "out"));
    require(close(f1.lse, f0.lse, kReorderTolerance, "lse"));
    const auto b0 = flashattn::reference::backward_values(a), b1 = permuted.backward(Precision::fp64);
    require(close(b1.dq, b0.dq, kReorderTolerance, "dq"));
    Dense dk = shaped(in.k, b0.dk), dv = shaped(in.v, b0.dv);  // unpermuted gradients, permuted back
    Dense dk1 = shaped(in.k, b1.dk), dv1 = shaped(in.v, b1.dv);
    Dense dk_expected = dk1, dv_expected = dv1;
    for (int64_t b = 0; b < k.batch; ++b)
      for (int64_t j = 0; j < k.seq; ++j)
        for (int64_t h = 0; h < k.heads; ++h)
          for (int64_t x = 0; x < k.dim; ++x) {
            dk_expected.at(b, j, h, x) = dk.at(b, perm[size_t(j)], h, x);
            dv_expected.at(b, j, h, x) = dv.at(b, perm[size_t(j)], h, x);
          }
    require(close(dk1.data, dk_expected.data, kReorderTolerance, "dk"));
    require(close(dv1.data, dv_expected.data, kReorderTolerance, "dv"));
  }, kCases);
}

TEST_CASE("oracle: GQA equals MHA with repeated K/V heads") {
  CaseSpace space;
  space.min_group = 2;
  check("oracle/gqa", [space] {
    const Case c = *gen_case(space);
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    const Inputs in(inst);
    const int64_t hq = c.heads_q();
    Dense k(in.k.batch, in.k.seq, hq, in.k.dim), v = k;
    for (int64_t b = 0; b < k.batch; ++b)
      for (int64_t j = 0; j < k.seq; ++j)
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t x = 0; x < k.dim; ++x) {
            k.at(b, j, h, x) = in.k.at(b, j, flashattn::kv_head(h, hq, c.heads_k), x);
            v.at(b, j, h, x) = in.v.at(b, j, flashattn::kv_head(h, hq, c.heads_k), x);
          }
    Call mha(options_of(a), c.dtype, in.q, k, v, in.dout);
    const auto f0 = flashattn::reference::forward_values(a), f1 = mha.forward(Precision::fp64);
    require(close(f1.out, f0.out, 0, "out"));
    require(close(f1.lse, f0.lse, 0, "lse"));
    const auto b0 = flashattn::reference::backward_values(a), b1 = mha.backward(Precision::fp64);
    require(close(b1.dq, b0.dq, 0, "dq"));
    const Dense dk1 = shaped(k, b1.dk), dv1 = shaped(v, b1.dv);
    Dense dk_sum = in.k, dv_sum = in.v;
    std::fill(dk_sum.data.begin(), dk_sum.data.end(), 0.0);
    std::fill(dv_sum.data.begin(), dv_sum.data.end(), 0.0);
    for (int64_t b = 0; b < k.batch; ++b)
      for (int64_t j = 0; j < k.seq; ++j)
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t x = 0; x < k.dim; ++x) {
            dk_sum.at(b, j, flashattn::kv_head(h, hq, c.heads_k), x) += dk1.at(b, j, h, x);
            dv_sum.at(b, j, flashattn::kv_head(h, hq, c.heads_k), x) += dv1.at(b, j, h, x);
          }
    require(close(b0.dk, dk_sum.data, kReorderTolerance, "dk"));
    require(close(b0.dv, dv_sum.data, kReorderTolerance, "dv"));
  }, kCases);
}

TEST_CASE("oracle: a varlen call equals one call per sequence") {
  CaseSpace space;
  space.varlen = 1;
  check("oracle/varlen", [space] {
    const Case c = *gen_case(space);
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    const Inputs in(inst);
    const Options all = options_of(a);
    const auto f0 = flashattn::reference::forward_values(a);
    const auto b0 = flashattn::reference::backward_values(a);
    const Dense out0 = shaped(in.q, f0.out), dq0 = shaped(in.q, b0.dq), dk0 = shaped(in.k, b0.dk),
                dv0 = shaped(in.k, b0.dv);
    for (int64_t s = 0; s < c.batch; ++s) {
      const int64_t q0 = all.cu_seqlens_q[size_t(s)], nq = all.cu_seqlens_q[size_t(s) + 1] - q0;
      const int64_t k0 = all.cu_seqlens_k[size_t(s)], nk = all.cu_seqlens_k[size_t(s) + 1] - k0;
      Call one(sequence_options(all, s, c.heads_q()), c.dtype, rows(in.q, 0, q0, nq), rows(in.k, 0, k0, nk),
               rows(in.v, 0, k0, nk), rows(in.dout, 0, q0, nq));
      const auto f1 = one.forward(Precision::fp64);
      const auto b1 = one.backward(Precision::fp64);
      require(close(f1.out, rows(out0, 0, q0, nq).data, 0, "out"));
      require(close(f1.lse, lse_rows(f0.lse, c.heads_q(), c.seqlen_q, 0, q0, nq), 0, "lse"));
      require(close(b1.dq, rows(dq0, 0, q0, nq).data, 0, "dq"));
      require(close(b1.dk, rows(dk0, 0, k0, nk).data, 0, "dk"));
      require(close(b1.dv, rows(dv0, 0, k0, nk).data, 0, "dv"));
    }
  }, kCases);
}

TEST_CASE("oracle: seqlens_k equals truncating K and V") {
  CaseSpace space;
  space.varlen = 0;
  space.key_lengths = 1;
  check("oracle/seqlens_k", [space] {
    const Case c = *gen_case(space);
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    const Inputs in(inst);
    const Options all = options_of(a);
    const auto f0 = flashattn::reference::forward_values(a);
    const auto b0 = flashattn::reference::backward_values(a);
    const Dense out0 = shaped(in.q, f0.out), dq0 = shaped(in.q, b0.dq), dk0 = shaped(in.k, b0.dk),
                dv0 = shaped(in.k, b0.dv);
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t len = c.key_lengths[size_t(b)];
      Options o = sequence_options(all, b, c.heads_q());
      o.seqlens_k.clear();
      Call truncated(o, c.dtype, rows(in.q, b, 0, c.seqlen_q), rows(in.k, b, 0, len), rows(in.v, b, 0, len),
                     rows(in.dout, b, 0, c.seqlen_q));
      const auto f1 = truncated.forward(Precision::fp64);
      const auto b1 = truncated.backward(Precision::fp64);
      require(close(f1.out, rows(out0, b, 0, c.seqlen_q).data, 0, "out"));
      require(close(f1.lse, lse_rows(f0.lse, c.heads_q(), c.seqlen_q, b, 0, c.seqlen_q), 0, "lse"));
      require(close(b1.dq, rows(dq0, b, 0, c.seqlen_q).data, 0, "dq"));
      require(close(b1.dk, rows(dk0, b, 0, len).data, 0, "dk"));
      require(close(b1.dv, rows(dv0, b, 0, len).data, 0, "dv"));
      const Dense tail = rows(dk0, b, len, c.seqlen_k - len), tail_v = rows(dv0, b, len, c.seqlen_k - len);
      require(close(tail.data, std::vector<double>(tail.data.size(), 0.0), 0, "dk past seqlens_k"));
      require(close(tail_v.data, std::vector<double>(tail_v.data.size(), 0.0), 0, "dv past seqlens_k"));
    }
  }, kCases);
}

TEST_CASE("oracle: causal equals the window (left, 0)") {
  check("oracle/causal-window", [] {
    // Causal is set inside the generator so that the printed counterexample is the tested case.
    const Case c = *rc::gen::map(gen_case(), [](Case g) {
      g.causal = true;
      return g;
    });
    Case w = c;
    w.causal = false;
    w.window_right = 0;
    Instance ic(c), iw(w);
    const flashattn::BackwardArgs ac = ic.backward_args(), aw = iw.backward_args();
    const auto fc = flashattn::reference::forward_values(ac), fw = flashattn::reference::forward_values(aw);
    require(close(fw.out, fc.out, 0, "out"));
    require(close(fw.lse, fc.lse, 0, "lse"));
    const auto bc = flashattn::reference::backward_values(ac), bw = flashattn::reference::backward_values(aw);
    require(close(bw.dq, bc.dq, 0, "dq"));
    require(close(bw.dk, bc.dk, 0, "dk"));
    require(close(bw.dv, bc.dv, 0, "dv"));
  }, kCases);
}

TEST_CASE("oracle: splitting the keys and merging equals the whole") {
  check("oracle/split-merge", [] {
    const Case c = *gen_case(unmasked());
    const int64_t split = *rc::gen::inRange<int64_t>(0, c.seqlen_k + 1);
    Instance inst(c);
    const flashattn::ForwardArgs a = inst.forward_args();
    const Inputs in(inst);
    const Options o = options_of(a);
    // fp32 storage: the case's values are exact in it, and merge's fp32 rounding dominates.
    Dense k1(c.batch, split, c.heads_k, c.dim), v1 = k1, k2(c.batch, c.seqlen_k - split, c.heads_k, c.dim), v2 = k2;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t j = 0; j < c.seqlen_k; ++j)
        for (int64_t h = 0; h < c.heads_k; ++h)
          for (int64_t x = 0; x < c.dim; ++x) {
            (j < split ? k1 : k2).at(b, j < split ? j : j - split, h, x) = in.k.at(b, j, h, x);
            (j < split ? v1 : v2).at(b, j < split ? j : j - split, h, x) = in.v.at(b, j, h, x);
          }
    Call whole(o, DType::f32, in.q, in.k, in.v, in.dout), first(o, DType::f32, in.q, k1, v1, in.dout),
        second(o, DType::f32, in.q, k2, v2, in.dout);
    whole.run_forward();
    first.run_forward();
    second.run_forward();
    const int64_t lse_n = c.batch * c.heads_q() * c.seqlen_q;
    std::vector<float> merged(size_t(std::max<int64_t>(1, c.batch * c.seqlen_q * c.heads_q() * c.dim)));
    std::vector<float> merged_lse(size_t(std::max<int64_t>(1, lse_n)));
    const flashattn::Tensor out = flashattn::bshd(merged.data(), DType::f32, c.batch, c.seqlen_q, c.heads_q(), c.dim);
    flashattn::merge(first.args().out, first.args().lse, second.args().out, second.args().lse, out, merged_lse.data());
    const std::vector<double> lse(whole.args().lse, whole.args().lse + lse_n);
    require(close(read_dense(out), read_dense(whole.args().out), kMergeTolerance * std::max(1.0, max_abs_finite(lse)),
                  "out"));
    require(close(std::vector<double>(merged_lse.begin(), merged_lse.begin() + lse_n), lse, kMergeTolerance, "lse"));
  }, kCases);
}

}  // namespace props
