// Materialisation of a Case into guarded buffers (see instance.hpp).
#include "props/instance.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "flashattn/convert.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/rng.hpp"

namespace props {
namespace {

using flashattn::Tensor;

// Typical |S| of the `large` value kind: its tails reach ~1e3.
constexpr double kLargeScore = 300;
// Bound on the typical unscaled |q·k| of the `large` kind: its tails stay well below the f16
// maximum (65504), so the same-precision oracle's rounded dot products stay finite.
constexpr double kLargeDot = 2000;

template <class F>
void fill(GuardedTensor& t, F value) {
  std::vector<double> dense(static_cast<size_t>(t.view.batch * t.view.seq * t.view.heads * t.view.dim));
  for (double& x : dense) x = value();
  write_dense(t.view, dense);
}

}  // namespace

double effective_scale(const Case& c) {
  return c.scale ? *c.scale : static_cast<double>(flashattn::default_scale(c.dim));
}

Instance::Instance(const Case& c) : case_(c) {
  const int64_t b = c.tensor_batch(), hq = c.heads_q();
  const auto dt = c.dtype;
  q_ = make_tensor("q", dt, b, c.seqlen_q, hq, c.dim, c.layout, c.offset);
  k_ = make_tensor("k", dt, b, c.seqlen_k, c.heads_k, c.dim, c.layout, c.offset);
  v_ = make_tensor("v", dt, b, c.seqlen_k, c.heads_k, c.dim, c.layout, c.offset);
  out_ = make_tensor("out", dt, b, c.seqlen_q, hq, c.dim, c.layout, c.offset);
  dout_ = make_tensor("dout", dt, b, c.seqlen_q, hq, c.dim, c.layout, c.offset);
  dq_ = make_tensor("dq", dt, b, c.seqlen_q, hq, c.dim, c.layout, c.offset);
  dk_ = make_tensor("dk", dt, b, c.seqlen_k, c.heads_k, c.dim, c.layout, c.offset);
  dv_ = make_tensor("dv", dt, b, c.seqlen_k, c.heads_k, c.dim, c.layout, c.offset);
  lse_count_ = b * hq * c.seqlen_q;
  lse_ = make_array<float>("lse", static_cast<size_t>(lse_count_));
  const size_t nseq = static_cast<size_t>(c.batch);
  if (!c.key_lengths.empty()) key_lengths_ = make_array<int32_t>("seqlens_k", nseq);
  if (c.varlen()) {
    cu_q_ = make_array<int32_t>("cu_seqlens_q", nseq + 1);
    cu_k_ = make_array<int32_t>("cu_seqlens_k", nseq + 1);
  }
  if (c.alibi != Alibi::off)
    alibi_ = make_array<float>("alibi_slopes", static_cast<size_t>(c.alibi == Alibi::per_batch ? c.batch * hq : hq));
  if (c.bias != BiasKind::off) {
    const std::vector<int64_t> n = c.bias_sizes();
    if (c.bias == BiasKind::stride0) {
      // One [Nq, Nk] table seen with the full sizes through stride 0 over sequences and heads; its
      // gradient has the full sizes (nothing is summed).
      bias_ = make_tensor("bias", c.bias_dtype, 1, n[1], 1, n[3], Layout::bhsd, c.offset);
      bias_.view.batch = n[0];
      bias_.view.heads = n[2];
      bias_.view.stride_batch = bias_.view.stride_head = 0;
    } else {
      bias_ = make_tensor("bias", c.bias_dtype, n[0], n[1], n[2], n[3], Layout::bhsd, c.offset);
    }
    dbias_ = make_tensor("dbias", c.bias_dtype, n[0], n[1], n[2], n[3], c.layout, c.offset);
  }
  if (c.dropout_p != 0) {
    const int64_t keys = c.varlen() ? *std::max_element(c.varlen_k.begin(), c.varlen_k.end()) : c.seqlen_k;
    mask_ = make_array<uint8_t>("dropout_mask", static_cast<size_t>(lse_count_ * ((keys + 7) / 8)));
  }
  fill_inputs();
}

void Instance::fill_inputs() {
  const Case& c = case_;
  Rng rng(c.seed);
  auto normal = [&] { return rng.normal(); };
  auto ternary = [&] { return static_cast<double>(rng.below(3) - 1); };
  const double root_d = std::sqrt(static_cast<double>(c.dim));
  const double sigma_large =
      std::sqrt(std::min(kLargeScore / std::fabs(effective_scale(c)), kLargeDot) / root_d);
  auto large = [&] { return sigma_large * rng.normal(); };
  auto sparse = [&] { return rng.below(2) ? rng.normal() : 0.0; };
  switch (c.values) {
    case Values::normal: fill(q_, normal); fill(k_, normal); fill(v_, normal); break;
    case Values::large: fill(q_, large); fill(k_, large); fill(v_, normal); break;
    case Values::ties: fill(q_, ternary); fill(k_, ternary); fill(v_, ternary); break;
    case Values::zero_v: fill(q_, normal); fill(k_, normal); fill(v_, sparse); break;
  }
  fill(dout_, normal);
  if (!c.key_lengths.empty()) std::memcpy(key_lengths_.data(), c.key_lengths.data(), key_lengths_.bytes());
  if (c.varlen()) {
    auto* cq = reinterpret_cast<int32_t*>(cu_q_.data());
    auto* ck = reinterpret_cast<int32_t*>(cu_k_.data());
    cq[0] = ck[0] = 0;
    for (size_t s = 0; s < c.varlen_q.size(); ++s) {
      cq[s + 1] = cq[s] + c.varlen_q[s];
      ck[s + 1] = ck[s] + c.varlen_k[s];
    }
  }
  if (c.bias != BiasKind::off) {
    // Normal entries of size 2 (as large as typical scores); with bias_inf a quarter of them −∞ and
    // the first row of every table wholly −∞ (a row that sees no key through the bias alone).
    const flashattn::Tensor& b = bias_.view;
    const int64_t tables = c.bias == BiasKind::stride0 ? 1 : b.batch * b.heads;
    std::vector<double> dense(static_cast<size_t>(tables * b.seq * b.dim));
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < tables; ++t)
      for (int64_t i = 0; i < b.seq; ++i)
        for (int64_t j = 0; j < b.dim; ++j) {
          const double x = 2 * rng.normal();
          const bool hidden = c.bias_inf && (i == 0 || rng.below(4) == 0);
          dense[static_cast<size_t>((t * b.seq + i) * b.dim + j)] = hidden ? -inf : x;
        }
    // dense is in storage order [table, row, key]; write it through a view of that order.
    const int64_t per_head = c.bias == BiasKind::stride0 ? 1 : b.heads;
    flashattn::Tensor storage = b;
    storage.batch = tables / per_head;
    storage.heads = per_head;
    std::vector<double> bshd_order(dense.size());
    for (int64_t bb = 0; bb < storage.batch; ++bb)
      for (int64_t i = 0; i < b.seq; ++i)
        for (int64_t h = 0; h < per_head; ++h)
          for (int64_t j = 0; j < b.dim; ++j)
            bshd_order[static_cast<size_t>(((bb * b.seq + i) * per_head + h) * b.dim + j)] =
                dense[static_cast<size_t>(((bb * per_head + h) * b.seq + i) * b.dim + j)];
    write_dense(storage, bshd_order);
  }
  if (c.alibi != Alibi::off) {
    // Slopes 2^(-8(h+1)/Hq) as in the ALiBi paper, jittered per sequence when per_batch.
    auto* slopes = reinterpret_cast<float*>(alibi_.data());
    const int64_t rows = c.alibi == Alibi::per_batch ? c.batch : 1, hq = c.heads_q();
    for (int64_t s = 0; s < rows; ++s)
      for (int64_t h = 0; h < hq; ++h)
        slopes[s * hq + h] = static_cast<float>(std::exp2(-8.0 * (h + 1) / hq) * (0.5 + rng.uniform()));
  }
}

flashattn::ForwardArgs Instance::base_args() {
  const Case& c = case_;
  flashattn::ForwardArgs a;
  a.q = q_.view;
  a.k = k_.view;
  a.v = v_.view;
  a.out = out_.view;
  a.lse = reinterpret_cast<float*>(lse_.data());
  a.scale = c.scale;
  a.causal = c.causal;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.diagonal_offset = c.diagonal_offset;
  a.softcap = c.softcap;
  if (c.alibi != Alibi::off) {
    a.alibi_slopes = reinterpret_cast<const float*>(alibi_.data());
    a.alibi_batch_stride = c.alibi == Alibi::per_batch ? c.heads_q() : 0;
  }
  if (!c.key_lengths.empty()) a.seqlens_k = reinterpret_cast<const int32_t*>(key_lengths_.data());
  if (c.varlen()) {
    a.cu_seqlens_q = reinterpret_cast<const int32_t*>(cu_q_.data());
    a.cu_seqlens_k = reinterpret_cast<const int32_t*>(cu_k_.data());
    a.varlen_batch = c.batch;
    a.max_seqlen_q = *std::max_element(c.varlen_q.begin(), c.varlen_q.end());
    a.max_seqlen_k = *std::max_element(c.varlen_k.begin(), c.varlen_k.end());
  }
  if (c.bias != BiasKind::off) a.bias = bias_.view;
  if (c.dropout_p != 0) {
    a.dropout_p = c.dropout_p;
    a.dropout_seed = c.seed * 0x9E3779B97F4A7C15ull;  // all 64 bits in use
    a.dropout_offset = c.seed % 1000;
  }
  return a;
}

flashattn::ForwardArgs Instance::forward_args() {
  backward_ = false;
  poison(out_);
  std::fill_n(reinterpret_cast<float*>(lse_.data()), lse_count_, std::numeric_limits<float>::quiet_NaN());
  std::fill_n(mask_.data(), mask_.bytes(), kCanary);
  for (Buffer* in : {&q_.buffer, &k_.buffer, &v_.buffer, &dout_.buffer, &key_lengths_, &cu_q_, &cu_k_, &alibi_, &bias_.buffer})
    in->snapshot();
  flashattn::ForwardArgs a = base_args();
  if (case_.dropout_p != 0) a.dropout_mask = mask_.data();
  return a;
}

flashattn::BackwardArgs Instance::backward_args() {
  const flashattn::ForwardArgs f = forward_args();
  flashattn::reference::forward(f, flashattn::reference::Precision::fp64);
  flashattn::BackwardArgs a = flashattn::backward_args(f);
  backward_ = true;
  a.dout = dout_.view;
  a.dq = dq_.view;
  a.dk = dk_.view;
  a.dv = dv_.view;
  poison(dq_);
  poison(dk_);
  poison(dv_);
  if (case_.bias != BiasKind::off) {
    a.dbias = dbias_.view;
    poison(dbias_);
  }
  for (Buffer* in : {&q_.buffer, &k_.buffer, &v_.buffer, &out_.buffer, &lse_, &dout_.buffer, &key_lengths_, &cu_q_,
                     &cu_k_, &alibi_, &bias_.buffer})
    in->snapshot();
  return a;
}

std::string Instance::check() const {
  std::vector<const Buffer*> inputs = {&q_.buffer, &k_.buffer, &v_.buffer, &dout_.buffer,
                                       &key_lengths_, &cu_q_, &cu_k_, &alibi_, &bias_.buffer};
  if (backward_) {
    inputs.push_back(&out_.buffer);
    inputs.push_back(&lse_);
  }
  for (const Buffer* in : inputs)
    if (std::string e = in->unchanged_since_snapshot(); !e.empty()) return e;
  for (const Buffer* b : {&q_.buffer, &k_.buffer, &v_.buffer, &out_.buffer, &dout_.buffer, &dq_.buffer, &dk_.buffer,
                          &dv_.buffer, &lse_, &key_lengths_, &cu_q_, &cu_k_, &alibi_, &bias_.buffer, &dbias_.buffer, &mask_})
    if (std::string e = b->check_outside_view(); !e.empty()) return e;
  return "";
}

}  // namespace props
