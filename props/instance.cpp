// Materialisation of a Case into guarded buffers (see instance.hpp).
#include "props/instance.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "flashattn/block_mask_build.hpp"
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
  if (c.blocks != BlockSparse::off) {
    // Geometry: lists per sequence and head (shared, rule: one per sequence or one for all), every
    // key block of the longest sequence reserved per list; bits rows padded by one byte per head
    // and three per sequence (strides are part of the contract).
    const bool one_head = c.blocks == BlockSparse::shared || c.blocks == BlockSparse::rule;
    flashattn::BlockMask& m = block_mask_;
    m.block_q = c.block_q;
    m.block_k = c.block_k;
    m.batch = c.blocks == BlockSparse::shared ? 1 : c.batch;
    m.heads = one_head ? 1 : hq;
    const std::vector<int64_t> rk = c.longest();
    m.q_blocks = std::max<int64_t>(1, (rk[0] + c.block_q - 1) / c.block_q);
    m.max_blocks = std::max<int64_t>(1, (rk[1] + c.block_k - 1) / c.block_k);
    const size_t lists = static_cast<size_t>(m.batch * m.heads * m.q_blocks);
    full_count_ = make_array<int32_t>("block_mask.full_count", lists);
    partial_count_ = make_array<int32_t>("block_mask.partial_count", lists);
    full_index_ = make_array<int32_t>("block_mask.full_index", lists * m.max_blocks);
    partial_index_ = make_array<int32_t>("block_mask.partial_index", lists * m.max_blocks);
    if (c.blocks == BlockSparse::bits || c.blocks == BlockSparse::shared) {
      flashattn::BitMask& b = m.bits;
      b.batch = m.batch;
      b.seq = std::max<int64_t>(rk[0], 1);
      b.heads = m.heads;
      b.stride_head = (rk[1] + 7) / 8 + 1;
      b.stride_seq = b.heads * b.stride_head;
      b.stride_batch = b.seq * b.stride_seq + 3;
      bits_ = make_array<uint8_t>("block_mask.bits", static_cast<size_t>(b.batch * b.stride_batch));
    }
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
  auto heavy = [&] {
    const double magnitude = std::exp2(-30.0 + 34.0 * rng.uniform());
    return rng.below(2) ? magnitude : -magnitude;
  };
  switch (c.values) {
    case Values::normal: fill(q_, normal); fill(k_, normal); fill(v_, normal); break;
    case Values::large: fill(q_, large); fill(k_, large); fill(v_, normal); break;
    case Values::ties: fill(q_, ternary); fill(k_, ternary); fill(v_, ternary); break;
    case Values::zero_v: fill(q_, normal); fill(k_, normal); fill(v_, sparse); break;
    case Values::heavy: fill(q_, normal); fill(k_, heavy); fill(v_, heavy); break;
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
  if (c.blocks != BlockSparse::off) fill_block_mask(rng);  // last: earlier cases keep their values
}

void Instance::fill_block_mask(Rng& rng) {
  const Case& c = case_;
  flashattn::BlockMask& m = block_mask_;
  m.full_count = reinterpret_cast<const int32_t*>(full_count_.data());
  m.full_index = reinterpret_cast<const int32_t*>(full_index_.data());
  m.partial_count = reinterpret_cast<const int32_t*>(partial_count_.data());
  m.partial_index = reinterpret_cast<const int32_t*>(partial_index_.data());
  auto* fc = reinterpret_cast<int32_t*>(full_count_.data());
  auto* fi = reinterpret_cast<int32_t*>(full_index_.data());
  auto* pc = reinterpret_cast<int32_t*>(partial_count_.data());
  auto* pi = reinterpret_cast<int32_t*>(partial_index_.data());
  std::fill_n(fi, m.batch * m.heads * m.q_blocks * m.max_blocks, -7);  // unused entries: never read
  std::fill_n(pi, m.batch * m.heads * m.q_blocks * m.max_blocks, -7);
  if (c.blocks == BlockSparse::rule) {
    flashattn::ForwardArgs a = base_args();
    a.block_mask = {};
    const flashattn::BlockMaskBuffers r = flashattn::block_mask_from_rule(a, c.block_q, c.block_k);
    for (int64_t l = 0; l < m.batch * m.q_blocks; ++l) {
      fc[l] = r.full_count[l];
      pc[l] = r.partial_count[l];
      std::copy_n(r.full_index.begin() + l * r.max_blocks, fc[l], fi + l * m.max_blocks);
      std::copy_n(r.partial_index.begin() + l * r.max_blocks, pc[l], pi + l * m.max_blocks);
    }
    return;
  }
  // Each block hidden, full or partial; the shares vary by case (dense to sparse).
  const int64_t hidden_in_8 = 1 + rng.below(7), full_in_8 = rng.below(8 - hidden_in_8 + 1);
  const int64_t key_blocks = (c.longest()[1] + c.block_k - 1) / c.block_k;  // max_blocks, or 0 without keys
  for (int64_t l = 0; l < m.batch * m.heads * m.q_blocks; ++l) {
    fc[l] = pc[l] = 0;
    for (int64_t kb = 0; kb < key_blocks; ++kb) {
      const int64_t x = rng.below(8);
      if (x < hidden_in_8) continue;
      if (x < hidden_in_8 + full_in_8)
        fi[l * m.max_blocks + fc[l]++] = static_cast<int32_t>(kb);
      else
        pi[l * m.max_blocks + pc[l]++] = static_cast<int32_t>(kb);
    }
  }
  if (m.bits.batch) {  // about 3 in 4 bits set; the bits of full and hidden blocks are as random
    m.bits.data = bits_.data();
    for (size_t x = 0; x < bits_.bytes(); ++x)
      bits_.data()[x] = static_cast<uint8_t>(rng.below(256) | rng.below(256));
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
  flashattn::copy_value_options(a, c);
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
  a.block_mask = block_mask_;
  if (c.dropout_p != 0) {
    a.dropout_p = c.dropout_p;
    a.dropout_seed = c.seed * 0x9E3779B97F4A7C15ull;  // all 64 bits in use
    // Streams (offset + s·Hq + h) below 2^32, crossing it, above it and wrapping past 2^64: an
    // implementation that drops the counter's high word (long training runs reach such offsets)
    // draws other keep bits than the definition's.
    const uint64_t small = c.seed % 1000;
    const uint64_t offsets[] = {small, (uint64_t{1} << 32) - 1 - small % 4, (uint64_t{5} << 32) + small,
                                ~uint64_t{0} - small % 4};
    a.dropout_offset = offsets[(c.seed >> 12) % 4];
  }
  return a;
}

flashattn::ForwardArgs Instance::forward_args() {
  backward_ = false;
  poison(out_);
  std::fill_n(reinterpret_cast<float*>(lse_.data()), lse_count_, std::numeric_limits<float>::quiet_NaN());
  std::fill_n(mask_.data(), mask_.bytes(), kCanary);
  for (Buffer* in : {&q_.buffer, &k_.buffer, &v_.buffer, &dout_.buffer, &key_lengths_, &cu_q_, &cu_k_, &alibi_, &bias_.buffer,
                     &full_count_, &full_index_, &partial_count_, &partial_index_, &bits_})
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
                     &cu_k_, &alibi_, &bias_.buffer, &full_count_, &full_index_, &partial_count_, &partial_index_, &bits_})
    in->snapshot();
  return a;
}

std::string Instance::check() const {
  std::vector<const Buffer*> inputs = {&q_.buffer, &k_.buffer, &v_.buffer, &dout_.buffer,
                                       &key_lengths_, &cu_q_, &cu_k_, &alibi_, &bias_.buffer,
                                       &full_count_, &full_index_, &partial_count_, &partial_index_, &bits_};
  if (backward_) {
    inputs.push_back(&out_.buffer);
    inputs.push_back(&lse_);
  }
  for (const Buffer* in : inputs)
    if (std::string e = in->unchanged_since_snapshot(); !e.empty()) return e;
  for (const Buffer* b : {&q_.buffer, &k_.buffer, &v_.buffer, &out_.buffer, &dout_.buffer, &dq_.buffer, &dk_.buffer,
                          &dv_.buffer, &lse_, &key_lengths_, &cu_q_, &cu_k_, &alibi_, &bias_.buffer, &dbias_.buffer, &mask_,
                          &full_count_, &full_index_, &partial_count_, &partial_index_, &bits_})
    if (std::string e = b->check_outside_view(); !e.empty()) return e;
  return "";
}

}  // namespace props
