// Cross-check of an implementation against the oracle (see crosscheck.hpp).
#include "props/crosscheck.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "flashattn/convert.hpp"
#include "flashattn/dropout.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/instance.hpp"
#include "props/tolerance.hpp"

namespace props {
namespace {

std::string failure(const std::string& what, const Case& c) { return what + "\n" + replay_hint(c); }

// Returns "" if rows [row, head, :] of `values` are all exactly zero.
bool row_is_zero(const std::vector<double>& values, int64_t start, int64_t dim) {
  for (int64_t x = 0; x < dim; ++x)
    if (values[start + x] != 0) return false;
  return true;
}

std::vector<double> lse_values(const Instance& inst) {
  return std::vector<double>(inst.lse(), inst.lse() + inst.lse_count());
}

// Returns "" if the keep mask the implementation wrote equals, bit for bit, the one the definition
// gives (flashattn::write_dropout_mask) in every row of the call's sequences, else where not.
std::string check_dropout_mask(const flashattn::ForwardArgs& a, const Instance& inst) {
  if (!a.dropout_mask) return "";
  const int64_t bytes = inst.dropout_mask_bytes();
  std::vector<uint8_t> expected(inst.dropout_mask(), inst.dropout_mask() + bytes);  // rows of no sequence: as written
  flashattn::ForwardArgs e = a;
  e.dropout_mask = expected.data();
  flashattn::write_dropout_mask(e);
  for (int64_t x = 0; x < bytes; ++x)
    if (expected[x] != inst.dropout_mask()[x]) {
      std::ostringstream os;
      const int64_t row_bytes = flashattn::dropout_mask_row_bytes(a);
      os << "dropout_mask byte " << x << " (lse row " << x / row_bytes << ", keys " << 8 * (x % row_bytes) << "..+7) is 0x"
         << std::hex << int(inst.dropout_mask()[x]) << ", the definition gives 0x" << int(expected[x]);
      return os.str();
    }
  return "";
}

}  // namespace

std::string replay_hint(const Case& c) { return "replay: FLASHATTN_REPLAY='" + to_string(c) + "' <runner> -tc=replay"; }

std::string crosscheck_forward(const Implementation& impl, const Case& c, Margins* margins) {
  Instance inst(c);
  const flashattn::ForwardArgs a = inst.forward_args();
  impl.forward(a);
  if (std::string e = inst.check(); !e.empty()) return failure(impl.name + " forward: " + e, c);

  const Judgement judged = judge_forward(a);
  if (margins) margins->add(judged, c);
  if (std::string e = judged.first_failure(); !e.empty()) return failure(impl.name + " forward: " + e, c);
  if (std::string e = check_dropout_mask(a, inst); !e.empty()) return failure(impl.name + " forward: " + e, c);
  // The judged values (dense; every row of a sequence is the implementation's).
  const std::vector<double>& out = judged.find("out")->impl;
  const std::vector<double> lse = lse_values(inst);

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

std::string crosscheck_backward(const Implementation& impl, const Case& c, Margins* margins) {
  Instance inst(c);
  const flashattn::BackwardArgs a = inst.backward_args();
  impl.backward(a);
  if (std::string e = inst.check(); !e.empty()) return failure(impl.name + " backward: " + e, c);

  const Judgement judged = judge_backward(a);
  if (margins) margins->add(judged, c);
  if (std::string e = judged.first_failure(); !e.empty()) return failure(impl.name + " backward: " + e, c);
  // The judged values (dense; every row of a sequence is the implementation's).
  const std::vector<double>& dq = judged.find("dq")->impl;
  const std::vector<double>& dk = judged.find("dk")->impl;
  const std::vector<double>& dv = judged.find("dv")->impl;

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

std::string check_repeatable(const Implementation& impl, const Case& c, Margins*) {
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
  const std::vector<double> dq = read_dense(inst.dq()), dk = read_dense(inst.dk()), dv = read_dense(inst.dv()),
                            dbias = read_dense(inst.dbias());
  b = inst.backward_args();
  impl.backward(b);
  if (!same_bits(dq, read_dense(inst.dq())) || !same_bits(dk, read_dense(inst.dk())) ||
      !same_bits(dv, read_dense(inst.dv())) || !same_bits(dbias, read_dense(inst.dbias())))
    return failure(impl.name + " backward: a second call on the same inputs wrote different dq, dk, dv or dbias bits", c);
  return "";
}

}  // namespace props
