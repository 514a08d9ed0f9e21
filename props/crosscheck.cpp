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
#include "tolerance/judge.hpp"

namespace props {

using namespace ::flashattn::tolerance;  // NOLINT: the suite speaks the tolerance rule's vocabulary
namespace {

std::string failure(const std::string& what, const Case& c) { return what + "\n" + replay_hint(c); }

// Returns "" if rows [row, head, :] of `values` are all exactly zero.
bool row_is_zero(const std::vector<double>& values, int64_t start, int64_t dim) {
  for (int64_t x = 0; x < dim; ++x)
    if (values[start + x] != 0) return false;
  return true;
}

// Returns whether row i of query head h in sequence seq sees a key: by the window rule, and with a
// block-sparse mask by flashattn::visible_element too.
bool row_sees(const flashattn::AttentionArgs& a, const flashattn::Sequence& seq, int64_t h, int64_t i) {
  if (!a.block_mask.used()) return !seq.mask.row_empty(i);
  for (int64_t j = seq.mask.key_begin(i); j < seq.mask.key_end(i); ++j)
    if (a.block_mask.visible(seq.index, h, i, j)) return true;
  return false;
}

// Returns, per key of sequence seq, whether some row of some query head of key head hk sees it.
std::vector<bool> keys_seen(const flashattn::AttentionArgs& a, const flashattn::Sequence& seq, int64_t hk) {
  std::vector<bool> seen(static_cast<size_t>(seq.k_rows), false);
  const int64_t group = a.q.heads / a.k.heads;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
    for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
      for (int64_t j = seq.mask.key_begin(i); j < seq.mask.key_end(i); ++j)
        if (!a.block_mask.used() || a.block_mask.visible(seq.index, h, i, j)) seen[j] = true;
  return seen;
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
        if (row_sees(a, seq, h, i)) continue;
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
    for (int64_t h = 0; h < a.q.heads; ++h)
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
        if (!row_sees(a, seq, h, i) && !row_is_zero(dq, dense_row(a.dq, seq.batch, seq.q_start + i, h), a.dq.dim)) {
          std::ostringstream os;
          os << impl.name << " backward: row " << i << " of sequence " << s << " head " << h
             << " sees no key but its dq is not 0";
          return failure(os.str(), c);
        }
    for (int64_t hk = 0; hk < a.k.heads; ++hk) {
      const std::vector<bool> seen = keys_seen(a, seq, hk);
      for (int64_t j = 0; j < seq.k_rows; ++j)
        if (!seen[j] && (!row_is_zero(dk, dense_row(a.dk, seq.batch, seq.k_start + j, hk), a.dk.dim) ||
                         !row_is_zero(dv, dense_row(a.dv, seq.batch, seq.k_start + j, hk), a.dv.dim))) {
          std::ostringstream os;
          os << impl.name << " backward: key " << j << " of sequence " << s << " head " << hk
             << " is seen by no row but its dk or dv is not 0";
          return failure(os.str(), c);
        }
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
  // Bit patterns are compared (NaN == NaN here: writing one is caught by the cross-check).
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

namespace props {
namespace {

// Writes NaN (or, for bits, flips them) wherever the block mask of `a` makes no backend read:
// rows of k and v whose key block no query block of any head of their group lists, bias entries
// whose block no reader lists, and bits of blocks no reader lists as partial. Returns how many
// elements it changed.
int64_t poison_unlisted(const flashattn::AttentionArgs& a) {
  const flashattn::BlockMask& m = a.block_mask;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t group = a.q.heads / a.k.heads, nseq = flashattn::num_sequences(a);
  int64_t changed = 0;
  auto listed = [&](int64_t s, int64_t h, int64_t i, int64_t j, bool partial_only) {
    const flashattn::BlockKind k = m.kind(s, h, i / m.block_q, j / m.block_k);
    return partial_only ? k == flashattn::BlockKind::partial : k != flashattn::BlockKind::hidden;
  };
  // K, V rows.
  for (int64_t s = 0; s < nseq; ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    for (int64_t hk = 0; hk < a.k.heads; ++hk)
      for (int64_t j = 0; j < seq.mask.seqlen_k; ++j) {
        bool read = false;
        for (int64_t h = hk * group; h < (hk + 1) * group && !read; ++h)
          for (int64_t qb = 0; qb * m.block_q < seq.mask.seqlen_q && !read; ++qb) read = listed(s, h, qb * m.block_q, j, false);
        if (read) continue;
        const flashattn::KeyRow r = flashattn::key_row(a, seq, j);
        for (const flashattn::ConstTensor* t : {&a.k, &a.v})
          for (int64_t x = 0; x < t->dim; ++x)
            flashattn::store_from_float(const_cast<void*>(t->data), t->dtype, t->offset(r.batch, r.row, hk) + x, nan);
        ++changed;
      }
  }
  // Bias entries and bits: an element of the view is read when some (sequence, head, row) that
  // maps to it lists its block (as partial, for bits).
  auto poison_view = [&](const flashattn::ConstTensor& view, bool bits) {
    std::vector<bool> read(static_cast<size_t>(view.batch * view.seq * view.heads * view.dim), false);
    for (int64_t s = 0; s < nseq; ++s) {
      const flashattn::Sequence seq = flashattn::sequence(a, s);
      for (int64_t h = 0; h < a.q.heads; ++h)
        for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
          for (int64_t j = 0; j < seq.mask.seqlen_k; ++j)
            if (listed(s, h, i, j, bits)) {
              const int64_t b = view.batch == 1 ? 0 : s, r = view.seq == 1 ? 0 : i, hh = view.heads == 1 ? 0 : h;
              read[static_cast<size_t>(((b * view.seq + r) * view.heads + hh) * view.dim + j)] = true;
            }
    }
    for (int64_t b = 0; b < view.batch; ++b)
      for (int64_t r = 0; r < view.seq; ++r)
        for (int64_t hh = 0; hh < view.heads; ++hh)
          for (int64_t j = 0; j < view.dim; ++j) {
            if (read[static_cast<size_t>(((b * view.seq + r) * view.heads + hh) * view.dim + j)]) continue;
            ++changed;
            if (!bits) {
              flashattn::store_from_float(const_cast<void*>(view.data), view.dtype, view.offset(b, r, hh) + j, nan);
              continue;
            }
            auto* row = const_cast<uint8_t*>(m.bits.data) + b * m.bits.stride_batch + r * m.bits.stride_seq +
                        hh * m.bits.stride_head;
            row[j / 8] = static_cast<uint8_t>(row[j / 8] ^ (1u << (j % 8)));
          }
  };
  // Broadcast views (stride 0 over a full size) alias one element from several indices: poison
  // only where every alias is unread, so skip them (their entries are read by some listed block
  // almost always).
  const flashattn::ConstTensor& bias = a.bias;
  if (flashattn::has_bias(a) && (bias.batch == 1 || bias.stride_batch) && (bias.heads == 1 || bias.stride_head) &&
      (bias.seq == 1 || bias.stride_seq))
    poison_view(bias, false);
  if (m.bits.data) {
    flashattn::ConstTensor bits_shape(nullptr, flashattn::DType::f32, m.bits.batch, m.bits.seq, m.bits.heads,
                                      flashattn::key_columns(a), 0, 0, 0);
    poison_view(bits_shape, true);
  }
  return changed;
}

}  // namespace

std::string check_unlisted_unread(const Implementation& impl, const Case& c, Margins*) {
  if (c.blocks == BlockSparse::off || impl.materialises) return "";
  Instance inst(c);
  flashattn::ForwardArgs a = inst.forward_args();
  impl.forward(a);
  const std::vector<double> out = read_dense(inst.out()), lse = lse_values(inst);
  // The backward on the clean inputs, given the oracle's out and lse (kept to give it again).
  flashattn::BackwardArgs b;
  std::vector<double> dq, dk, dv, dbias, oracle_out;
  std::vector<float> oracle_lse;
  if (impl.backward) {
    b = inst.backward_args();
    oracle_out = read_dense(inst.out());
    oracle_lse.assign(inst.lse(), inst.lse() + inst.lse_count());
    impl.backward(b);
    dq = read_dense(inst.dq()), dk = read_dense(inst.dk()), dv = read_dense(inst.dv()), dbias = read_dense(inst.dbias());
  }
  if (poison_unlisted(a) == 0) return "";
  a = inst.forward_args();
  impl.forward(a);
  if (!same_bits(out, read_dense(inst.out())) || !same_bits(lse, lse_values(inst)))
    return failure(impl.name + " forward: NaN in K/V rows, bias entries or bits of unlisted blocks changed out or lse", c);
  if (!impl.backward) return "";
  write_dense(inst.out(), oracle_out);
  std::copy(oracle_lse.begin(), oracle_lse.end(), const_cast<float*>(inst.lse()));
  impl.backward(b);
  if (!same_bits(dq, read_dense(inst.dq())) || !same_bits(dk, read_dense(inst.dk())) ||
      !same_bits(dv, read_dense(inst.dv())) || !same_bits(dbias, read_dense(inst.dbias())))
    return failure(impl.name +
                       " backward: NaN in K/V rows, bias entries or bits of unlisted blocks changed dq, dk, dv or dbias",
                   c);
  return "";
}

}  // namespace props
