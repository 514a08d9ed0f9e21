// The NaN containment property (docs/semantics.md, "Non-finite inputs"; see crosscheck.hpp).
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/problem.hpp"
#include "props/crosscheck.hpp"
#include "props/instance.hpp"
#include "tolerance/judge.hpp"

namespace props {

using namespace ::flashattn::tolerance;  // NOLINT: the suite speaks the tolerance rule's vocabulary
namespace {

enum class Input { q, k, v, dout };
const char* input_name(Input w) { return w == Input::q ? "q" : w == Input::k ? "k" : w == Input::v ? "v" : "dout"; }

// The poisoned element: input w, sequence `seq`, head `head` (a query head for q/dout, a key head
// for k/v), row `row` within the sequence and column `col`.
struct Target {
  Input w = Input::q;
  int64_t seq = 0, head = 0, row = 0, col = 0;
};

uint64_t mix(uint64_t& x) {  // splitmix64: the target follows from the case's seed alone
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Picks an element of a sequence with at least one query row and one key; false if none has both.
bool pick(const flashattn::AttentionArgs& a, const Case& c, bool backward, Target& t) {
  std::vector<int64_t> seqs;
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    if (seq.mask.seqlen_q > 0 && seq.mask.seqlen_k > 0) seqs.push_back(s);
  }
  if (seqs.empty()) return false;
  uint64_t x = c.seed ^ 0x6E616E2D636F6E74ull;
  t.w = static_cast<Input>(mix(x) % (backward ? 4 : 3));
  t.seq = seqs[mix(x) % seqs.size()];
  const flashattn::Sequence seq = flashattn::sequence(a, t.seq);
  const bool query = t.w == Input::q || t.w == Input::dout;
  t.head = static_cast<int64_t>(mix(x) % static_cast<uint64_t>(query ? a.q.heads : a.k.heads));
  t.row = static_cast<int64_t>(mix(x) % static_cast<uint64_t>(query ? seq.mask.seqlen_q : seq.mask.seqlen_k));
  t.col = static_cast<int64_t>(mix(x) % static_cast<uint64_t>(t.w == Input::v || t.w == Input::dout ? a.v.dim : a.q.dim));
  return true;
}

void poison_target(const flashattn::AttentionArgs& a, const flashattn::ConstTensor& dout, const Target& t) {
  const flashattn::Sequence seq = flashattn::sequence(a, t.seq);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const flashattn::ConstTensor& view = t.w == Input::q ? a.q : t.w == Input::k ? a.k : t.w == Input::v ? a.v : dout;
  int64_t batch = seq.batch, row = seq.q_start + t.row;
  if (t.w == Input::k || t.w == Input::v) {
    const flashattn::KeyRow r = flashattn::key_row(a, seq, t.row);
    batch = r.batch, row = r.row;
  }
  flashattn::store_from_float(const_cast<void*>(view.data), view.dtype, view.offset(batch, row, t.head) + t.col, nan);
}

// Returns whether x and y hold the same bits (NaN equals NaN; −0 differs from 0).
bool same_bit_pattern(double x, double y) { return std::memcmp(&x, &y, sizeof x) == 0; }

// The damaged group of a target: its sequence and its key head's query heads.
struct Group {
  int64_t seq = 0, hk = 0, size = 1;
  bool has_query_head(int64_t h) const { return h / size == hk; }
};

// Returns "" if the rows of `before` and `after` (dense [batch, seq, heads, dim] values of a q- or
// k-shaped output `view`) are bitwise equal outside the group, else where not.
std::string compare_outside(const flashattn::AttentionArgs& a, const flashattn::ConstTensor& view, bool key_rows,
                            const std::vector<double>& before, const std::vector<double>& after, const Group& g,
                            const char* name) {
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    const int64_t rows = key_rows ? seq.k_rows : seq.mask.seqlen_q;
    for (int64_t h = 0; h < view.heads; ++h) {
      if (s == g.seq && (key_rows ? h == g.hk : g.has_query_head(h))) continue;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t start = dense_row(view, seq.batch, (key_rows ? seq.k_start : seq.q_start) + i, h);
        for (int64_t x = 0; x < view.dim; ++x)
          if (!same_bit_pattern(before[start + x], after[start + x])) {
            std::ostringstream os;
            os << name << " of sequence " << s << " head " << h << " row " << i << " column " << x << " changed ("
               << before[start + x] << " -> " << after[start + x] << ")";
            return os.str();
          }
      }
    }
  }
  return "";
}

// Returns "" if dbias is bitwise unchanged at every element no (sequence, row, head) of the group sums into.
std::string compare_dbias_outside(const flashattn::AttentionArgs& a, const flashattn::ConstTensor& g_view,
                                  const std::vector<double>& before, const std::vector<double>& after, const Group& g) {
  if (before.empty()) return "";
  std::vector<bool> damaged(before.size(), false);
  const flashattn::Sequence seq = flashattn::sequence(a, g.seq);
  for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
    for (int64_t h = g.hk * g.size; h < (g.hk + 1) * g.size; ++h) {
      const int64_t start = dense_row(g_view, g_view.batch == 1 ? 0 : g.seq, g_view.seq == 1 ? 0 : i, g_view.heads == 1 ? 0 : h);
      for (int64_t j = 0; j < g_view.dim; ++j) damaged[static_cast<size_t>(start + j)] = true;
    }
  for (size_t e = 0; e < before.size(); ++e)
    if (!damaged[e] && !same_bit_pattern(before[e], after[e])) {
      std::ostringstream os;
      os << "dbias element " << e << " (dense order) changed (" << before[e] << " -> " << after[e] << ")";
      return os.str();
    }
  return "";
}

}  // namespace

std::string check_nan_contained(const Implementation& impl, const Case& c, Margins*) {
  Instance inst(c);
  flashattn::ForwardArgs a = inst.forward_args();
  Target t;
  if (!pick(a, c, static_cast<bool>(impl.backward), t)) return "";
  const Group g{t.seq, (t.w == Input::q || t.w == Input::dout) ? t.head / (a.q.heads / a.k.heads) : t.head,
                a.q.heads / a.k.heads};
  std::ostringstream where;
  where << "NaN in " << input_name(t.w) << " at sequence " << t.seq << " head " << t.head << " row " << t.row
        << " column " << t.col << ": ";
  auto fail = [&](const std::string& pass, const std::string& e) {
    return impl.name + " " + pass + ": " + where.str() + e + " outside its (sequence, key head) group\n" + replay_hint(c);
  };

  // Clean runs: the forward, and the backward given the oracle's out and lse.
  impl.forward(a);
  const std::vector<double> out = read_dense(inst.out());
  const std::vector<float> lse(inst.lse(), inst.lse() + inst.lse_count());
  std::vector<double> dq, dk, dv, dbias;
  if (impl.backward) {
    impl.backward(inst.backward_args());
    dq = read_dense(inst.dq()), dk = read_dense(inst.dk()), dv = read_dense(inst.dv()), dbias = read_dense(inst.dbias());
  }
  poison_target(a, inst.dout(), t);

  if (t.w != Input::dout) {
    a = inst.forward_args();
    impl.forward(a);
    if (std::string e = compare_outside(a, a.out, false, out, read_dense(inst.out()), g, "out"); !e.empty())
      return fail("forward", e);
    for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
      const flashattn::Sequence seq = flashattn::sequence(a, s);
      for (int64_t h = 0; h < a.q.heads; ++h)
        for (int64_t i = 0; i < seq.mask.seqlen_q && !(s == g.seq && g.has_query_head(h)); ++i) {
          const int64_t li = flashattn::lse_index(a, seq, h, i);
          if (!same_bit_pattern(lse[li], inst.lse()[li])) return fail("forward", "lse of row " + std::to_string(i) + " changed");
        }
    }
    // A poisoned query row, or key that a row reads, makes that row NaN (never a finite value); a −∞
    // bias entry may hide the key, so this part needs a case without such entries.
    if ((c.bias == BiasKind::off || !c.bias_inf) && t.w != Input::v) {
      const flashattn::Sequence seq = flashattn::sequence(a, t.seq);
      const std::vector<double> poisoned_out = read_dense(inst.out());
      for (int64_t h = g.hk * g.size; h < (g.hk + 1) * g.size; ++h)
        for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
          if (t.w == Input::q && (h != t.head || i != t.row)) continue;
          bool reads = false;
          for (int64_t j = seq.mask.key_begin(i); j < seq.mask.key_end(i) && !reads; ++j)
            reads = (t.w == Input::q || j == t.row) && (!a.block_mask.used() || a.block_mask.visible(seq.index, h, i, j));
          if (!reads) continue;
          const double o = poisoned_out[dense_row(a.out, seq.batch, seq.q_start + i, h)];
          const float l = inst.lse()[flashattn::lse_index(a, seq, h, i)];
          // (With dropout, out is Σ_j Z_ij·P_ij·v_j: a row whose kept keys are none may be 0.)
          if ((!std::isnan(o) && c.dropout_p == 0) || !std::isnan(l)) {
            std::ostringstream os;
            os << impl.name << " forward: " << where.str() << "row " << i << " of head " << h
               << " reads it but its out (" << o << ") or lse (" << l << ") is not NaN\n"
               << replay_hint(c);
            return os.str();
          }
        }
    }
  }
  if (!impl.backward) return "";
  const flashattn::BackwardArgs b = inst.backward_args();  // the oracle's out and lse of the poisoned inputs
  impl.backward(b);
  if (std::string e = compare_outside(b, b.dq, false, dq, read_dense(inst.dq()), g, "dq"); !e.empty()) return fail("backward", e);
  if (std::string e = compare_outside(b, b.dk, true, dk, read_dense(inst.dk()), g, "dk"); !e.empty()) return fail("backward", e);
  if (std::string e = compare_outside(b, b.dv, true, dv, read_dense(inst.dv()), g, "dv"); !e.empty()) return fail("backward", e);
  if (std::string e = compare_dbias_outside(b, inst.dbias(), dbias, read_dense(inst.dbias()), g); !e.empty())
    return fail("backward", e);
  return "";
}

}  // namespace props
