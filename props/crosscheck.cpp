// Cross-check of an implementation against the oracle (see crosscheck.hpp).
#include "props/crosscheck.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "flashattn/convert.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/compare.hpp"
#include "props/instance.hpp"

namespace props {
namespace {

using flashattn::reference::Precision;

// Rounds every value to what a tensor of dtype t holds (the same-precision oracle's final store).
std::vector<double> rounded(std::vector<double> x, flashattn::DType t) {
  for (double& v : x) v = flashattn::round_to(t, static_cast<float>(v));
  return x;
}

// Returns "[b, s, h, x]" for a dense index into a [B, N, H, d] tensor.
std::string where(const flashattn::Tensor& t, int64_t i) {
  std::ostringstream os;
  const int64_t x = i % t.dim, h = (i / t.dim) % t.heads, s = (i / (t.dim * t.heads)) % t.seq,
                b = i / (t.dim * t.heads * t.seq);
  os << "[b=" << b << ", s=" << s << ", h=" << h << ", x=" << x << "]";
  return os.str();
}

// Returns "" if the comparison passed, else its description.
std::string verdict(const char* what, const Comparison& r, const std::vector<double>& impl,
                    const std::vector<double>& oracle, const std::string& index) {
  if (r.passed) return "";
  return std::string(what) + " " + describe(r, impl, oracle) + (index.empty() ? "" : " " + index);
}

// `same` and `reversed`: the two naive orders (the worse one, element by element, sets the bound).
// The floor (compare.hpp) is kFloorUnits units of rounding of the output dtype at the output's
// magnitude, never less than kFloorUnits of the dtype's smallest spacing. The magnitude is
// max|oracle|, or with `terms` (out and dv: the oracle's
// Precision::magnitude, per element Σ_j P_ij|v_jx| or Σ_i P_ij|dO_ix|) the larger of that and
// max terms: those outputs are positive-weighted sums, and a sum rounds at the size of its terms —
// where they cancel (an fp32 out of 0.006 summed from 114 terms of ~0.01) max|oracle| understated a
// few roundings of it, and an implementation as accurate as the naive one exceeded a lucky naive
// draw in ~1 of 2000 generated cases. dq and dk keep max|oracle|: their terms pass through
// dS = P∘(dP − D), whose two sides nearly cancel in every ordinary case, so their term magnitude is
// 10-100x the value, and a floor at it let a dq scaled by (1 + 1e-6) pass (measured; max|oracle|
// catches it within ~50 cases).
std::string compare_tensor(const char* what, const flashattn::Tensor& t, const std::vector<double>& impl,
                           const std::vector<double>& oracle, const std::vector<double>& same,
                           const std::vector<double>& reversed, double c, const std::vector<double>* terms = nullptr) {
  const Comparison r = compare(impl, oracle, worse_naive(rounded(same, t.dtype), rounded(reversed, t.dtype), oracle), c,
                               t.dtype, terms ? max_abs_finite(*terms) : 0.0);
  return verdict(what, r, impl, oracle, r.worst >= 0 ? where(t, r.worst) : "");
}

std::string failure(const std::string& what, const Case& c) { return what + "\n" + replay_hint(c); }

// Dense index of element (row, head, 0) of a [B, N, H, d] tensor.
int64_t dense_row(const flashattn::Tensor& t, int64_t batch, int64_t row, int64_t head) {
  return ((batch * t.seq + row) * t.heads + head) * t.dim;
}

// Returns "" if rows [row, head, :] of `values` are all exactly zero.
bool row_is_zero(const std::vector<double>& values, int64_t start, int64_t dim) {
  for (int64_t x = 0; x < dim; ++x)
    if (values[start + x] != 0) return false;
  return true;
}

std::vector<double> lse_values(const Instance& inst) {
  return std::vector<double>(inst.lse(), inst.lse() + inst.lse_count());
}

}  // namespace

std::string replay_hint(const Case& c) { return "replay: FLASHATTN_REPLAY='" + to_string(c) + "' <runner> -tc=replay"; }

std::string crosscheck_forward(const Implementation& impl, const Case& c) {
  Instance inst(c);
  const flashattn::ForwardArgs a = inst.forward_args();
  impl.forward(a);
  if (std::string e = inst.check(); !e.empty()) return failure(impl.name + " forward: " + e, c);

  const auto oracle = flashattn::reference::forward_values(a, Precision::fp64);
  const auto same = flashattn::reference::forward_values(a, Precision::same_as_input);
  const auto rev = flashattn::reference::forward_values(a, Precision::same_as_input_reversed);
  const std::vector<double> out = read_dense(inst.out()), lse = lse_values(inst);
  const auto terms = flashattn::reference::forward_values(a, Precision::magnitude);
  if (std::string e = compare_tensor("out", inst.out(), out, oracle.out, same.out, rev.out, kOutFactor, &terms.out);
      !e.empty())
    return failure(impl.name + " forward: " + e, c);
  const Comparison rl = compare_lse(
      lse, oracle.lse,
      worse_naive(rounded(same.lse, flashattn::DType::f32), rounded(rev.lse, flashattn::DType::f32), oracle.lse));
  if (!rl.passed) return failure(impl.name + " forward: lse " + describe(rl, lse, oracle.lse), c);

  // Rows that see no key: out = 0 and lse = -inf exactly.
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    for (int64_t h = 0; h < a.q.heads; ++h)
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
        if (!seq.mask.row_empty(i)) continue;
        const double l = lse[flashattn::lse_index(a, seq, h, i)];
        if (!(l == -std::numeric_limits<double>::infinity()) ||
            !row_is_zero(out, dense_row(a.out, seq.batch, seq.q_start + i, h), a.out.dim)) {
          std::ostringstream os;
          os << impl.name << " forward: row " << i << " of sequence " << s << " head " << h
             << " sees no key but out is not 0 or lse (" << l << ") is not -inf";
          return failure(os.str(), c);
        }
      }
  }
  return "";
}

std::string crosscheck_backward(const Implementation& impl, const Case& c) {
  Instance inst(c);
  const flashattn::BackwardArgs a = inst.backward_args();
  impl.backward(a);
  if (std::string e = inst.check(); !e.empty()) return failure(impl.name + " backward: " + e, c);

  const auto oracle = flashattn::reference::backward_values(a, Precision::fp64);
  const auto same = flashattn::reference::backward_values(a, Precision::same_as_input);
  const auto rev = flashattn::reference::backward_values(a, Precision::same_as_input_reversed);
  const std::vector<double> dq = read_dense(inst.dq()), dk = read_dense(inst.dk()), dv = read_dense(inst.dv());
  const auto terms = flashattn::reference::backward_values(a, Precision::magnitude);
  if (std::string e = compare_tensor("dq", inst.dq(), dq, oracle.dq, same.dq, rev.dq, kGradFactor); !e.empty())
    return failure(impl.name + " backward: " + e, c);
  if (std::string e = compare_tensor("dk", inst.dk(), dk, oracle.dk, same.dk, rev.dk, kGradFactor); !e.empty())
    return failure(impl.name + " backward: " + e, c);
  if (std::string e = compare_tensor("dv", inst.dv(), dv, oracle.dv, same.dv, rev.dv, kGradFactor, &terms.dv);
      !e.empty())
    return failure(impl.name + " backward: " + e, c);

  // Rows that see no key get dq = 0; keys that no row sees get dk = dv = 0 (exactly).
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    std::vector<bool> seen(static_cast<size_t>(seq.k_rows), false);
    for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
      for (int64_t j = seq.mask.key_begin(i); j < seq.mask.key_end(i); ++j) seen[j] = true;
    for (int64_t h = 0; h < a.q.heads; ++h)
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
        if (seq.mask.row_empty(i) && !row_is_zero(dq, dense_row(a.dq, seq.batch, seq.q_start + i, h), a.dq.dim)) {
          std::ostringstream os;
          os << impl.name << " backward: row " << i << " of sequence " << s << " head " << h
             << " sees no key but its dq is not 0";
          return failure(os.str(), c);
        }
    for (int64_t hk = 0; hk < a.k.heads; ++hk)
      for (int64_t j = 0; j < seq.k_rows; ++j)
        if (!seen[j] && (!row_is_zero(dk, dense_row(a.dk, seq.batch, seq.k_start + j, hk), a.dk.dim) ||
                         !row_is_zero(dv, dense_row(a.dv, seq.batch, seq.k_start + j, hk), a.dv.dim))) {
          std::ostringstream os;
          os << impl.name << " backward: key " << j << " of sequence " << s << " head " << hk
             << " is seen by no row but its dk or dv is not 0";
          return failure(os.str(), c);
        }
  }
  return "";
}

std::string check_repeatable(const Implementation& impl, const Case& c) {
  Instance inst(c);
  flashattn::ForwardArgs a = inst.forward_args();
  impl.forward(a);
  const std::vector<double> out1 = read_dense(inst.out()), lse1 = lse_values(inst);
  a = inst.forward_args();
  impl.forward(a);
  // Compare bit patterns (NaN == NaN here: writing one is caught by the cross-check).
  auto same_bits = [](const std::vector<double>& x, const std::vector<double>& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
  };
  if (!same_bits(out1, read_dense(inst.out())) || !same_bits(lse1, lse_values(inst)))
    return failure(impl.name + " forward: a second call on the same inputs wrote different out or lse bits", c);
  if (!impl.backward) return "";
  flashattn::BackwardArgs b = inst.backward_args();
  impl.backward(b);
  const std::vector<double> dq = read_dense(inst.dq()), dk = read_dense(inst.dk()), dv = read_dense(inst.dv());
  b = inst.backward_args();
  impl.backward(b);
  if (!same_bits(dq, read_dense(inst.dq())) || !same_bits(dk, read_dense(inst.dk())) ||
      !same_bits(dv, read_dense(inst.dv())))
    return failure(impl.name + " backward: a second call on the same inputs wrote different dq, dk or dv bits", c);
  return "";
}

}  // namespace props
