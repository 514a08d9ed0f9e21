// Whole-call oracle: walks sequences and heads, gathers each head into dense arrays, runs the
// one-head passes, and scatters the results (see flashattn/reference.hpp).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "flashattn/append.hpp"
#include "flashattn/convert.hpp"
#include "flashattn/dropout.hpp"
#include "flashattn/philox.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"
#include "head_impl.hpp"

namespace flashattn::reference {
namespace {

// Copies rows [row0, row0 + rows) of head h of sequence batch b into a dense [rows x dim] array.
template <class Acc>
std::vector<Acc> gather(const ConstTensor& t, int64_t b, int64_t row0, int64_t rows, int64_t h) {
  std::vector<Acc> r(static_cast<size_t>(rows * t.dim));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t base = t.offset(b, row0 + i, h);
    for (int64_t x = 0; x < t.dim; ++x) r[i * t.dim + x] = static_cast<Acc>(load_as_float(t.data, t.dtype, base + x));
  }
  return r;
}

// Copies keys [0, rows) of head h of sequence seq from k or v (through the block table when the call
// has one) into a dense [rows x dim] array; quantized elements dequantized with `scales` (the
// tensor's kv_scales).
template <class Acc>
std::vector<Acc> gather_keys(const AttentionArgs& a, const ConstTensor& t, const float* scales, const Sequence& seq,
                             int64_t rows, int64_t h) {
  std::vector<Acc> r(static_cast<size_t>(rows * t.dim));
  for (int64_t j = 0; j < rows; ++j) {
    const KeyRow at = key_row(a, seq, j);
    const int64_t base = t.offset(at.batch, at.row, h);
    const float scale = is_quantized(t.dtype) ? kv_scale(a, scales, at.batch, at.row, h) : 1.0f;
    for (int64_t x = 0; x < t.dim; ++x) {
      const float value = load_as_float(t.data, t.dtype, base + x);
      r[j * t.dim + x] = static_cast<Acc>(is_quantized(t.dtype) ? dequantize(value, scale) : value);
    }
  }
  return r;
}

// Returns the index of (b, s, h, 0) in a dense array with t's sizes.
int64_t dense_index(const ConstTensor& t, int64_t b, int64_t s, int64_t h) {
  return ((b * t.seq + s) * t.heads + h) * t.dim;
}

// The dense per-head side arrays of a call: the bias of query head h of sequence seq as [nq x nk]
// (empty without a bias), and where its block mask shows an element (empty without one).
struct HeadArrays {
  std::vector<double> bias;
  std::vector<uint8_t> blocks;
};

HeadArrays gather_head(const AttentionArgs& a, const Sequence& seq, int64_t h) {
  HeadArrays r;
  const int64_t nq = seq.mask.seqlen_q, nk = seq.mask.seqlen_k;
  if (has_bias(a)) {
    const ConstTensor b = bias_view(a);
    r.bias.resize(static_cast<size_t>(nq * nk));
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t base = b.offset(seq.index, i, h);
      for (int64_t j = 0; j < nk; ++j) r.bias[i * nk + j] = load_as_float(b.data, b.dtype, base + j);
    }
  }
  if (a.block_mask.used()) {
    r.blocks.resize(static_cast<size_t>(nq * nk));
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) r.blocks[i * nk + j] = a.block_mask.visible(seq.index, h, i, j);
  }
  return r;
}

// Returns the head problem of query head h of sequence seq; `arrays` is its gather_head result,
// which must outlive the result.
Head head_of(const AttentionArgs& a, const Sequence& seq, int64_t h, const HeadArrays& arrays) {
  Head hd;
  hd.nq = seq.mask.seqlen_q;
  hd.nk = seq.mask.seqlen_k;
  hd.d = a.q.dim;
  hd.dv = a.v.dim;
  hd.has_sink = a.sinks != nullptr;
  hd.sink = a.sinks ? a.sinks[h] : 0.0;
  hd.scale = effective_scale(a);
  hd.softcap = a.softcap;
  hd.slope = alibi_slope(a, seq.index, h);
  hd.mask = seq.mask;
  hd.bias = arrays.bias.empty() ? nullptr : arrays.bias.data();
  hd.blocks = arrays.blocks.empty() ? nullptr : arrays.blocks.data();
  hd.dropout_p = a.dropout_p;
  hd.dropout_seed = a.dropout_seed;
  hd.dropout_stream = dropout_stream(a.dropout_offset, seq.index, a.q.heads, h);
  return hd;
}

template <class Acc>
detail::Rounding<Acc> rounding_for(const AttentionArgs& a, Precision p) {
  const bool fp32 = p == Precision::fp32 || p == Precision::fp32_reversed || p == Precision::fp32_alternating;
  const detail::Order order =
      p == Precision::same_as_input_reversed || p == Precision::fp32_reversed         ? detail::Order::reversed
      : p == Precision::same_as_input_alternating || p == Precision::fp32_alternating ? detail::Order::alternating
                                                                                      : detail::Order::forward;
  const bool ds = p == Precision::ds_magnitude;
  return {sizeof(Acc) == sizeof(float), fp32 ? DType::f32 : a.q.dtype, order, p == Precision::magnitude || ds, ds};
}

template <class Acc>
ForwardValues forward_impl(const AttentionArgs& a, Precision p) {
  ForwardValues r;
  r.out.assign(static_cast<size_t>(a.q.batch * a.q.seq * a.q.heads * a.v.dim), 0.0);
  const ConstTensor out_shape(nullptr, a.q.dtype, a.q.batch, a.q.seq, a.q.heads, a.v.dim, 0, 0, 0);
  r.lse.assign(static_cast<size_t>(a.q.batch * a.q.heads * a.q.seq), 0.0);
  if (p == Precision::magnitude) r.score_terms.assign(r.out.size(), 0.0);
  const auto rnd = rounding_for<Acc>(a, p);
  for (int64_t s = 0; s < num_sequences(a); ++s) {
    const Sequence seq = sequence(a, s);
    for (int64_t h = 0; h < a.q.heads; ++h) {
      const HeadArrays arrays = gather_head(a, seq, h);
      const Head hd = head_of(a, seq, h, arrays);
      const int64_t hk = kv_head(h, a.q.heads, a.k.heads);
      const auto q = gather<Acc>(a.q, seq.batch, seq.q_start, hd.nq, h);
      const auto k = gather_keys<Acc>(a, a.k, a.kv_scales.k, seq, hd.nk, hk);
      const auto v = gather_keys<Acc>(a, a.v, a.kv_scales.v, seq, hd.nk, hk);
      std::vector<Acc> out(static_cast<size_t>(hd.nq * hd.dv)), lse(static_cast<size_t>(hd.nq));
      std::vector<Acc> terms(r.score_terms.empty() ? 0 : out.size());
      detail::forward_head<Acc>(hd, q.data(), k.data(), v.data(), rnd, out.data(), lse.data(),
                                terms.empty() ? nullptr : terms.data());
      for (int64_t i = 0; i < hd.nq; ++i) {
        const int64_t o = dense_index(out_shape, seq.batch, seq.q_start + i, h);
        for (int64_t x = 0; x < hd.dv; ++x) r.out[o + x] = out[i * hd.dv + x];
        if (!terms.empty())
          for (int64_t x = 0; x < hd.dv; ++x) r.score_terms[o + x] = terms[i * hd.dv + x];
        r.lse[lse_index(a, seq, h, i)] = lse[i];
      }
    }
  }
  return r;
}

template <class Acc>
BackwardValues backward_impl(const BackwardArgs& a, Precision p) {
  BackwardValues r;
  r.dq.assign(static_cast<size_t>(a.q.batch * a.q.seq * a.q.heads * a.q.dim), 0.0);
  r.dk.assign(static_cast<size_t>(a.k.batch * a.k.seq * a.k.heads * a.k.dim), 0.0);
  r.dv.assign(static_cast<size_t>(a.v.batch * a.v.seq * a.v.heads * a.v.dim), 0.0);
  if (a.sinks) r.dsinks.assign(static_cast<size_t>(a.q.heads), 0.0);
  std::vector<Acc> dsinks(static_cast<size_t>(a.q.heads), 0);  // summed over sequences in order
  // dbias, dense with its own sizes, summed over its broadcast (size-1) dimensions in (sequence,
  // head, row) order.
  const Tensor& g = a.dbias;
  const bool want_dbias = view_set(g);
  std::vector<Acc> dbias(want_dbias ? static_cast<size_t>(g.batch * g.seq * g.heads * g.dim) : 0, 0);
  const auto rnd = rounding_for<Acc>(a, p);
  const int64_t group = a.q.heads / a.k.heads;
  for (int64_t s = 0; s < num_sequences(a); ++s) {
    const Sequence seq = sequence(a, s);
    for (int64_t hk = 0; hk < a.k.heads; ++hk) {
      const int64_t nk = seq.mask.seqlen_k, d = a.q.dim, e = a.v.dim;
      const auto k = gather<Acc>(a.k, seq.batch, seq.k_start, nk, hk);
      const auto v = gather<Acc>(a.v, seq.batch, seq.k_start, nk, hk);
      // dK and dV of a key head sum the gradients of its query heads, in head order (reversed in
      // the reversed naive variant).
      std::vector<Acc> dk_sum(static_cast<size_t>(nk * d), 0), dv_sum(static_cast<size_t>(nk * e), 0);
      for (int64_t t = 0; t < group; ++t) {
        const int64_t h = hk * group + rnd.at(group, t);
        const HeadArrays arrays = gather_head(a, seq, h);
        const Head hd = head_of(a, seq, h, arrays);
        const auto q = gather<Acc>(a.q, seq.batch, seq.q_start, hd.nq, h);
        const auto dout = gather<Acc>(a.dout, seq.batch, seq.q_start, hd.nq, h);
        std::vector<Acc> dq(static_cast<size_t>(hd.nq * d)), dk(dk_sum.size()), dv(dv_sum.size());
        std::vector<Acc> given_out, given_lse;
        if (p == Precision::fp64_given_out || p == Precision::fp64_given)
          given_out = gather<Acc>(a.out, seq.batch, seq.q_start, hd.nq, h);
        if (p == Precision::fp64_given) {
          given_lse.resize(static_cast<size_t>(hd.nq));
          for (int64_t i = 0; i < hd.nq; ++i) given_lse[i] = a.lse[lse_index(a, seq, h, i)];
        }
        Acc dsink = 0;
        std::vector<Acc> head_dbias(want_dbias ? static_cast<size_t>(hd.nq * hd.nk) : 0);
        detail::backward_head<Acc>(hd, q.data(), k.data(), v.data(), dout.data(), rnd, dq.data(), dk.data(), dv.data(),
                                   given_out.empty() ? nullptr : given_out.data(),
                                   given_lse.empty() ? nullptr : given_lse.data(), a.sinks ? &dsink : nullptr,
                                   want_dbias ? head_dbias.data() : nullptr);
        dsinks[h] += dsink;
        for (int64_t i = 0; i < hd.nq && want_dbias; ++i) {
          const int64_t o = ((std::min(seq.index, g.batch - 1) * g.seq + std::min(i, g.seq - 1)) * g.heads +
                             std::min(h, g.heads - 1)) * g.dim;
          for (int64_t j = 0; j < hd.nk; ++j) dbias[o + j] += head_dbias[i * hd.nk + j];
        }
        for (int64_t i = 0; i < hd.nq; ++i) {
          const int64_t o = dense_index(a.q, seq.batch, seq.q_start + i, h);
          for (int64_t x = 0; x < d; ++x) r.dq[o + x] = dq[i * d + x];
        }
        for (size_t x = 0; x < dk_sum.size(); ++x) dk_sum[x] += dk[x];
        for (size_t x = 0; x < dv_sum.size(); ++x) dv_sum[x] += dv[x];
      }
      // Keys past seqlens_k (still rows of this sequence) keep their zero gradient.
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t o = dense_index(a.k, seq.batch, seq.k_start + j, hk);
        for (int64_t x = 0; x < d; ++x) r.dk[o + x] = rnd(dk_sum[j * d + x]);
        const int64_t ov = dense_index(a.v, seq.batch, seq.k_start + j, hk);
        for (int64_t x = 0; x < e; ++x) r.dv[ov + x] = rnd(dv_sum[j * e + x]);
      }
    }
  }
  for (size_t h = 0; h < r.dsinks.size(); ++h) r.dsinks[h] = dsinks[h];  // fp32 output: not rounded to the dtype
  r.dbias.assign(dbias.size(), 0.0);
  for (size_t x = 0; x < dbias.size(); ++x) r.dbias[x] = rnd(dbias[x]);
  return r;
}

// Writes the rows of every sequence of a dense array into view t (rows outside every sequence,
// possible with varlen, are left untouched). `rows_of` gives a sequence's (first row, row count).
template <class RowsOf>
void scatter(const AttentionArgs& a, const std::vector<double>& dense, const Tensor& t, RowsOf rows_of) {
  for (int64_t s = 0; s < num_sequences(a); ++s) {
    const Sequence seq = sequence(a, s);
    const auto [row0, rows] = rows_of(seq);
    for (int64_t i = row0; i < row0 + rows; ++i)
      for (int64_t h = 0; h < t.heads; ++h) {
        const int64_t o = t.offset(seq.batch, i, h), di = dense_index(t, seq.batch, i, h);
        for (int64_t x = 0; x < t.dim; ++x) store_from_float(t.data, t.dtype, o + x, static_cast<float>(dense[di + x]));
      }
  }
}

std::pair<int64_t, int64_t> q_rows(const Sequence& s) { return {s.q_start, s.mask.seqlen_q}; }
std::pair<int64_t, int64_t> k_rows(const Sequence& s) { return {s.k_start, s.k_rows}; }

// Returns the forward values of a validated call.
ForwardValues forward_values_of_valid(const AttentionArgs& a, Precision p) {
  if (p == Precision::fp64_given_out || p == Precision::fp64_given || p == Precision::ds_magnitude)
    p = Precision::fp64;  // nothing is given; no dS
  return p == Precision::fp64 || p == Precision::magnitude ? forward_impl<double>(a, p) : forward_impl<float>(a, p);
}

}  // namespace

ForwardValues forward_values(const AttentionArgs& a, Precision p) {
  validate(a);
  return forward_values_of_valid(a, p);
}

BackwardValues backward_values(const BackwardArgs& a, Precision p) {
  validate(a);
  const bool wide = p == Precision::fp64 || p == Precision::magnitude || p == Precision::ds_magnitude || p == Precision::fp64_given_out ||
                    p == Precision::fp64_given;
  return wide ? backward_impl<double>(a, p) : backward_impl<float>(a, p);
}

void forward(const ForwardArgs& a_in, Precision p) {
  validate(a_in);  // the outputs too: forward_values checks only what it reads
  // An append writes the caches first, then the call is the plain one over them.
  const AppendedCall appended = apply_append(a_in);
  const ForwardArgs& a = appended.args;
  const ForwardValues r = forward_values_of_valid(a, p);
  scatter(a, r.out, a.out, q_rows);
  write_dropout_mask(a);
  if (a.lse)
    for (int64_t s = 0; s < num_sequences(a); ++s) {
      const Sequence seq = sequence(a, s);
      for (int64_t h = 0; h < a.q.heads; ++h)
        for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
          const int64_t li = lse_index(a, seq, h, i);
          a.lse[li] = static_cast<float>(r.lse[li]);
        }
    }
}

void backward(const BackwardArgs& a, Precision p) {
  const BackwardValues r = backward_values(a, p);
  scatter(a, r.dq, a.dq, q_rows);
  scatter(a, r.dk, a.dk, k_rows);
  scatter(a, r.dv, a.dv, k_rows);
  if (a.dsinks)
    for (int64_t h = 0; h < a.q.heads; ++h) a.dsinks[h] = static_cast<float>(r.dsinks[h]);
  const Tensor& g = a.dbias;
  for (int64_t b = 0; b < g.batch && !r.dbias.empty(); ++b)
    for (int64_t i = 0; i < g.seq; ++i)
      for (int64_t h = 0; h < g.heads; ++h) {
        const int64_t o = g.offset(b, i, h), di = ((b * g.seq + i) * g.heads + h) * g.dim;
        for (int64_t j = 0; j < g.dim; ++j) store_from_float(g.data, g.dtype, o + j, static_cast<float>(r.dbias[di + j]));
      }
}

}  // namespace flashattn::reference
