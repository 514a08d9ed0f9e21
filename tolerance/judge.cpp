// Applies the tolerance rule to one call (see judge.hpp).
#include "tolerance/judge.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "flashattn/convert.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"

namespace flashattn::tolerance {
namespace {

using flashattn::reference::Precision;

// Reads the rows of view t that belong to the call's sequences (q rows, or k rows when `keys`) into
// a dense array; elements outside every sequence take the oracle's value (they are not compared).
std::vector<double> read_rows(const flashattn::AttentionArgs& a, const flashattn::Tensor& t, bool keys,
                              const std::vector<double>& oracle) {
  std::vector<double> r(oracle);
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    const int64_t row0 = keys ? seq.k_start : seq.q_start, rows = keys ? seq.k_rows : seq.mask.seqlen_q;
    for (int64_t i = row0; i < row0 + rows; ++i)
      for (int64_t h = 0; h < t.heads; ++h) {
        const int64_t o = t.offset(seq.batch, i, h), d = dense_row(t, seq.batch, i, h);
        for (int64_t x = 0; x < t.dim; ++x) r[d + x] = flashattn::load_as_float(t.data, t.dtype, o + x);
      }
  }
  return r;
}

std::vector<double> read_lse(const flashattn::ForwardArgs& a, const std::vector<double>& oracle) {
  std::vector<double> r(oracle);
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    for (int64_t h = 0; h < a.q.heads; ++h)
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
        const int64_t li = flashattn::lse_index(a, seq, h, i);
        r[li] = a.lse[li];
      }
  }
  return r;
}

std::string where_dense(const flashattn::Tensor& t, int64_t i) {
  std::ostringstream os;
  const int64_t x = i % t.dim, h = (i / t.dim) % t.heads, s = (i / (t.dim * t.heads)) % t.seq,
                b = i / (t.dim * t.heads * t.seq);
  os << "[b=" << b << ", s=" << s << ", h=" << h << ", x=" << x << "]";
  return os.str();
}

std::string where_lse(const flashattn::AttentionArgs& a, int64_t i) {
  std::ostringstream os;  // lse is [B, Hq, Nq] (varlen: [Hq, total rows])
  const int64_t n = a.q.seq, s = i % n, h = (i / n) % a.q.heads, b = i / (n * a.q.heads);
  os << "[b=" << b << ", h=" << h << ", s=" << s << "]";
  return os.str();
}

// The naive results of one output in the three summation orders (Precision::same_as_input,
// _reversed, _alternating, or the fp32 models), before rounding to the output dtype.
using NaiveOrders = std::vector<const std::vector<double>*>;

// Returns the worst of the naive orders after each is rounded to `t` (as a naive implementation
// stores it).
std::vector<double> worst_naive(const NaiveOrders& orders, flashattn::DType t, const std::vector<double>& oracle) {
  std::vector<std::vector<double>> r;
  for (const std::vector<double>* o : orders) r.push_back(rounded(*o, t));
  return worse_naive(r, oracle);
}

// One output of a tensor: the naive error is the worst of the naive orders after each is rounded
// to the output dtype.
Verdict tensor_verdict(const char* name, const flashattn::Tensor& t, std::vector<double> impl,
                       std::vector<double> oracle, const NaiveOrders& orders, Allowance allowance) {
  Verdict v;
  v.output = name;
  const std::vector<double> naive = worst_naive(orders, t.dtype, oracle);
  v.result = compare(impl.data(), oracle.data(), naive.data(), oracle.size(), allowance);
  if (v.result.worst >= 0) v.where = where_dense(t, v.result.worst);
  v.impl = std::move(impl);
  v.oracle = std::move(oracle);
  return v;
}

}  // namespace

int64_t dense_row(const flashattn::ConstTensor& t, int64_t b, int64_t s, int64_t h) {
  return ((b * t.seq + s) * t.heads + h) * t.dim;
}

std::string Verdict::message() const {
  if (result.passed) return "";
  return output + " " + describe(result, impl, oracle) + (where.empty() ? "" : " " + where);
}

bool Judgement::passed() const {
  for (const Verdict& v : verdicts)
    if (!v.result.passed) return false;
  return true;
}

std::string Judgement::first_failure() const {
  for (const Verdict& v : verdicts)
    if (!v.result.passed) return v.message();
  return "";
}

const Verdict* Judgement::find(const std::string& output) const {
  for (const Verdict& v : verdicts)
    if (v.output == output) return &v;
  return nullptr;
}

Judgement judge_forward(const flashattn::ForwardArgs& a) {
  namespace ref = flashattn::reference;
  const auto oracle = ref::forward_values(a, Precision::fp64);
  const auto same = ref::forward_values(a, Precision::same_as_input);
  const auto rev = ref::forward_values(a, Precision::same_as_input_reversed);
  const auto alt = ref::forward_values(a, Precision::same_as_input_alternating);
  const auto terms = ref::forward_values(a, Precision::magnitude);
  Judgement j;
  // out = P·V is a positive-weighted sum: its floor scales with the size of its terms (per element
  // Σ_j P_ij|v_jx|, Precision::magnitude), not only with max|out|: a sum rounds at the size of its
  // terms, and where they cancel (an fp32 out of 0.006 summed from 114 terms of ~0.01) max|out|
  // understated a few roundings of it — an implementation as accurate as the naive one exceeded a
  // lucky naive draw in ~1 of 2000 generated cases.
  Allowance out;
  out.c = kOutFactor;
  out.floor = floor_for(a.out.dtype, std::max(max_abs_finite(oracle.out), max_abs_finite(terms.out)));
  // Every implementation sums S in fp32 or coarser: one fp32 rounding of each score at the size of
  // its terms moves out by u32·Σ_j P_ij·T_ij·|v_jx − O_ix| (Precision::magnitude's score_terms), and
  // a dot product takes two such roundings at least where its products are rounded before they are
  // summed (a vectorised one: a product per lane, then a sum across the lanes), and a sequential
  // sum of d terms about √(d/3) (its standard deviation where one term dominates). A lower bound of
  // the naive part, as fp32_terms is for dq/dk: at scores of ~30 the naive orders drew 9.6e-7 where
  // an fp32-score kernel erred 3.2e-6; on heavy-tailed fp8 K/V they drew 6e-8 where the CPU decode
  // path erred 2.2 units of one rounding; at d = 100 on heavy-tailed values the CPU's FMA chains
  // erred 2.8x the worst naive order's draw (docs/reliability.md).
  out.fp32_terms = score_rounding_units(a.q.dim) * flashattn::unit_roundoff(flashattn::DType::f32) *
                   max_abs_finite(terms.score_terms);
  j.verdicts.push_back(
      tensor_verdict("out", a.out, read_rows(a, a.out, false, oracle.out), oracle.out,
                     {&same.out, &rev.out, &alt.out}, out));
  if (a.lse) {
    // LSE is an fp32 output: its naive counterpart keeps S in fp32 (no 16-bit rounding of S), and
    // its floor scales with the size of the terms of the scores it is computed from (an fp32 LSE of
    // 4.5 from d = 128 dot products with ALiBi was 7 units of 2^-24·|LSE| off in the emulated GPU
    // kernels, 2.9x a naive draw: 0.79 of a floor at |LSE|).
    const auto n32 = ref::forward_values(a, Precision::fp32);
    const auto n32r = ref::forward_values(a, Precision::fp32_reversed);
    const auto n32a = ref::forward_values(a, Precision::fp32_alternating);
    Verdict v;
    v.output = "lse";
    v.impl = read_lse(a, oracle.lse);
    v.oracle = oracle.lse;
    v.result = compare_lse(v.impl, v.oracle, worst_naive({&n32.lse, &n32r.lse, &n32a.lse}, flashattn::DType::f32, oracle.lse),
                           max_abs_finite(terms.lse));
    if (v.result.worst >= 0) v.where = where_lse(a, v.result.worst);
    j.verdicts.push_back(std::move(v));
  }
  return j;
}

Judgement judge_backward(const flashattn::BackwardArgs& a) {
  namespace ref = flashattn::reference;
  const auto oracle = ref::backward_values(a, Precision::fp64);
  const auto same = ref::backward_values(a, Precision::same_as_input);
  const auto rev = ref::backward_values(a, Precision::same_as_input_reversed);
  const auto alt = ref::backward_values(a, Precision::same_as_input_alternating);
  const auto terms = ref::backward_values(a, Precision::magnitude);
  const auto given = ref::backward_values(a, Precision::fp64_given);
  const auto ds = ref::backward_values(a, Precision::ds_magnitude);
  const double u32 = flashattn::unit_roundoff(flashattn::DType::f32);
  const double u_in = flashattn::unit_roundoff(a.q.dtype);
  // ds_terms (dq, dk, dbias): the naive part is at least one fp32 rounding of dS's terms, and one
  // rounding of dS itself to the input dtype (`d`: Precision::ds_magnitude's output).
  auto allowance = [&](const flashattn::Tensor& t, const std::vector<double>& o, const std::vector<double>& g,
                       const std::vector<double>& m, bool ds_terms, bool floor_at_terms,
                       const std::vector<double>& d = {}) {
    Allowance r;
    r.c = kGradFactor;
    r.contract = max_abs_diff(g, o);
    r.fp32_terms = ds_terms ? std::max(kDsTermUnits * u32 * max_abs_finite(m), u_in * max_abs_finite(d)) : 0.0;
    r.floor = floor_for(t.dtype, std::max(max_abs_finite(o), floor_at_terms ? max_abs_finite(m) : 0.0));
    return r;
  };
  Judgement j;
  // dv = Pᵀ·dO is a positive-weighted sum: floor at its terms, as out. dq and dk keep their floor at
  // max|value|: their terms go through dS = P∘(dP − D), whose two sides nearly cancel in every
  // ordinary case, so their term magnitude is 10-100x the value, and a floor at it let a dq scaled
  // by (1 + 1e-6) pass. Instead their naive error is bounded below by one fp32 rounding of those
  // terms (fp32_terms): that only matters where the naive draw is (nearly) exact — rows with one
  // visible key, a softcap derivative that rounds to 0 in 16 bits — and there every fp32
  // implementation that sums dP and D separately has that error (docs/reliability.md). Likewise by
  // one rounding of dS itself to the input dtype, which 16-bit tile products and the naive model
  // make: two bf16 dS that cancel in dq can round to exact opposites in the naive model (a tie).
  // The same arguments hold for dbias.
  j.verdicts.push_back(tensor_verdict("dq", a.dq, read_rows(a, a.dq, false, oracle.dq), oracle.dq, {&same.dq, &rev.dq, &alt.dq},
                                      allowance(a.dq, oracle.dq, given.dq, terms.dq, true, false, ds.dq)));
  j.verdicts.push_back(tensor_verdict("dk", a.dk, read_rows(a, a.dk, true, oracle.dk), oracle.dk, {&same.dk, &rev.dk, &alt.dk},
                                      allowance(a.dk, oracle.dk, given.dk, terms.dk, true, false, ds.dk)));
  j.verdicts.push_back(tensor_verdict("dv", a.dv, read_rows(a, a.dv, true, oracle.dv), oracle.dv, {&same.dv, &rev.dv, &alt.dv},
                                      allowance(a.dv, oracle.dv, given.dv, terms.dv, false, true)));
  // dbias = P∘(dP − D) summed over bias's broadcast dimensions: every element is an output (0 where
  // nothing reads it). Judged like dq and dk: its terms are dS's, whose two sides nearly cancel, so
  // the floor stays at max|value| and one fp32 rounding of the terms bounds the naive part below.
  if (flashattn::view_set(a.dbias)) {
    const flashattn::Tensor& g = a.dbias;
    std::vector<double> impl(oracle.dbias.size());
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t i = 0; i < g.seq; ++i)
        for (int64_t h = 0; h < g.heads; ++h)
          for (int64_t x = 0; x < g.dim; ++x)
            impl[dense_row(g, b, i, h) + x] = flashattn::load_as_float(g.data, g.dtype, g.offset(b, i, h) + x);
    j.verdicts.push_back(tensor_verdict("dbias", g, std::move(impl), oracle.dbias, {&same.dbias, &rev.dbias, &alt.dbias},
                                        allowance(g, oracle.dbias, given.dbias, terms.dbias, true, false, ds.dbias)));
  }
  // dsinks (fp32 [Hq]) = −Σ_i exp(sink − LSE_i)·D_i: judged like an fp32 gradient. D comes from the
  // given out and P_sink from the given lse, so the contract term carries their rounding; the floor
  // scales with the size of its terms (Precision::magnitude: Σ_i P_sink,i·Σ|dO∘O|), as dv's does.
  if (a.dsinks) {
    Verdict v;
    v.output = "dsinks";
    v.impl.assign(a.dsinks, a.dsinks + a.q.heads);
    v.oracle = oracle.dsinks;
    Allowance r;
    r.c = kGradFactor;
    r.contract = max_abs_diff(given.dsinks, oracle.dsinks);
    r.floor = floor_for(flashattn::DType::f32, std::max(max_abs_finite(oracle.dsinks), max_abs_finite(terms.dsinks)));
    const std::vector<double> naive = worse_naive({same.dsinks, rev.dsinks, alt.dsinks}, oracle.dsinks);
    v.result = compare(v.impl.data(), v.oracle.data(), naive.data(), v.oracle.size(), r);
    if (v.result.worst >= 0) v.where = "[h=" + std::to_string(v.result.worst) + "]";
    j.verdicts.push_back(std::move(v));
  }
  return j;
}

}  // namespace flashattn::tolerance
