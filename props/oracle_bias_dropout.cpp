// Properties of the oracle's additive bias and dropout (docs/semantics.md, "Additive bias and
// dropout"): a zero bias changes nothing; a bias equal to the ALiBi term is ALiBi; a −∞ bias where
// the window/causal rule hides keys is that rule; a broadcast bias is its materialised table (and
// dbias the sum of the full dbias over the broadcast dimensions); the keep decisions keep 1 − p of
// the weights within a binomial bound; a dropped row is the undropped softmax of values scaled by
// the documented keep bits. (dbias and the dropped gradients against finite differences:
// oracle_gradients.cpp.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/dropout.hpp"
#include "flashattn/philox.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/buffers.hpp"
#include "props/check.hpp"
#include "props/instance.hpp"
#include "props/oracle_support.hpp"
#include "props/rng.hpp"

namespace props {
namespace {

using flashattn::DType;
using flashattn::reference::Precision;

constexpr int kCases = 60;
constexpr double kReorderTolerance = 1e-12;  // fp64 sums in another order

// A bias table [S, Nq, Hq, Nk] (bhsd storage) of one call and a dbias of the same sizes (f32).
struct FullBias {
  std::vector<unsigned char> mem;
  std::vector<float> grad;
  flashattn::Tensor view, dview;

  FullBias(const flashattn::AttentionArgs& a, DType dtype) {
    const int64_t s = flashattn::num_sequences(a), n = a.q.seq, h = a.q.heads, k = flashattn::key_columns(a);
    mem.assign(static_cast<size_t>(std::max<int64_t>(1, s * n * h * k)) * flashattn::dtype_size(dtype), 0);
    grad.assign(static_cast<size_t>(std::max<int64_t>(1, s * n * h * k)), 0.0f);
    view = flashattn::bhsd(mem.data(), dtype, s, n, h, k);
    dview = flashattn::bhsd(grad.data(), DType::f32, s, n, h, k);
  }
  void set(int64_t s, int64_t i, int64_t h, int64_t j, double x) {
    flashattn::store_from_float(view.data, view.dtype, view.offset(s, i, h) + j, static_cast<float>(x));
  }
  // Puts this table (and its gradient) into a call.
  template <class Args>
  void into(Args& a) const {
    a.bias = view;
    if constexpr (std::is_same_v<Args, flashattn::BackwardArgs>) a.dbias = dview;
  }
};

CaseSpace no_bias_space() { return CaseSpace{}; }

}  // namespace

TEST_CASE("oracle: a zero bias equals no bias, bitwise") {
  check("oracle/bias-zero", [] {
    const Case c = *gen_case(no_bias_space());
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    flashattn::BackwardArgs b = a;
    const FullBias zero(a, *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f16, DType::bf16}));
    zero.into(b);
    require_same_values(a, b, "zero bias");
  }, kCases);
}

TEST_CASE("oracle: a bias equal to the ALiBi term equals ALiBi, bitwise") {
  check("oracle/bias-alibi", [] {
    const Case c = *gen_case(no_bias_space());
    Instance inst(c);
    flashattn::BackwardArgs a = inst.backward_args();
    // Slopes 2^-(h+1): slope·distance is exact in fp32, so the bias holds the ALiBi term exactly.
    std::vector<float> slopes(static_cast<size_t>(a.q.heads));
    for (int64_t h = 0; h < a.q.heads; ++h) slopes[h] = std::ldexp(1.0f, static_cast<int>(-(h % 8) - 1));
    a.alibi_slopes = slopes.data();
    a.alibi_batch_stride = 0;
    flashattn::BackwardArgs b = a;
    b.alibi_slopes = nullptr;
    FullBias bias(a, DType::f32);
    for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
      const flashattn::Sequence seq = flashattn::sequence(a, s);
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
        for (int64_t h = 0; h < a.q.heads; ++h)
          for (int64_t j = 0; j < seq.mask.seqlen_k; ++j)
            bias.set(s, i, h, j, -static_cast<double>(slopes[h]) * std::abs(i + seq.mask.diag() - j));
    }
    bias.into(b);
    require_same_values(a, b, "ALiBi as a bias");
  }, kCases);
}

TEST_CASE("oracle: a -inf bias where the mask hides keys equals the mask, bitwise") {
  check("oracle/bias-mask", [] {
    const Case c = *gen_case(no_bias_space());
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    flashattn::BackwardArgs b = a;
    b.causal = false;
    b.window_left = b.window_right = -1;  // diagonal_offset stays: ALiBi still uses it
    FullBias bias(a, *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f16, DType::bf16}));
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
      const flashattn::Sequence seq = flashattn::sequence(a, s);
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i)
        for (int64_t h = 0; h < a.q.heads; ++h)
          for (int64_t j = 0; j < seq.mask.seqlen_k; ++j) bias.set(s, i, h, j, seq.mask.visible(i, j) ? 0.0 : -inf);
    }
    bias.into(b);
    require_same_values(a, b, "the mask as a -inf bias");
  }, kCases);
}

TEST_CASE("oracle: a broadcast bias equals its materialised table; dbias sums over the broadcast") {
  check("oracle/bias-broadcast", [] {
    CaseSpace space;
    space.bias = true;
    const Case c = *gen_case(space);
    if (c.bias == BiasKind::off || c.bias == BiasKind::full) RC_DISCARD("not a broadcast bias");
    Instance inst(c);
    const flashattn::BackwardArgs a = inst.backward_args();
    flashattn::BackwardArgs b = a;
    FullBias full(a, c.bias_dtype);
    const flashattn::ConstTensor v = flashattn::bias_view(a);
    for (int64_t s = 0; s < full.view.batch; ++s)
      for (int64_t i = 0; i < full.view.seq; ++i)
        for (int64_t h = 0; h < full.view.heads; ++h)
          for (int64_t j = 0; j < full.view.dim; ++j)
            full.set(s, i, h, j, flashattn::load_as_float(v.data, v.dtype, v.offset(s, i, h) + j));
    full.into(b);
    require_same_values(a, b, "broadcast vs materialised bias");
    const auto ga = flashattn::reference::backward_values(a, Precision::fp64);
    const auto gb = flashattn::reference::backward_values(b, Precision::fp64);
    // Sum the full table's gradient over the broadcast (size-1) dimensions of a's dbias.
    const flashattn::Tensor& g = a.dbias;
    std::vector<double> summed(ga.dbias.size(), 0.0);
    for (int64_t s = 0; s < full.view.batch; ++s)
      for (int64_t i = 0; i < full.view.seq; ++i)
        for (int64_t h = 0; h < full.view.heads; ++h)
          for (int64_t j = 0; j < full.view.dim; ++j) {
            const int64_t to = ((std::min(s, g.batch - 1) * g.seq + std::min(i, g.seq - 1)) * g.heads +
                                std::min(h, g.heads - 1)) * g.dim + j;
            summed[to] += gb.dbias[((s * full.view.seq + i) * full.view.heads + h) * full.view.dim + j];
          }
    require(close(ga.dbias, summed, kReorderTolerance, "dbias"));
  }, kCases);
}

TEST_CASE("oracle: dropout keeps 1 - p of the weights, within a binomial bound, in every word position") {
  // Keep masks of a call with 2 sequences x 3 heads x 61 rows x 517 keys (varlen-free, no mask: the
  // decision does not depend on the mask) for several p and seeds; the kept count of all bits and
  // of each of the 8 word positions of a Philox call lies within 5 standard deviations of
  // n·(1 − ⌊65536p⌋/65536).
  const int64_t batch = 2, heads = 3, rows = 61, keys = 517;
  std::vector<unsigned char> q(static_cast<size_t>(batch * rows * heads * 4) * 2), k(static_cast<size_t>(batch * keys * 4) * 2);
  for (const float p : {0.1f, 0.5f, 0.85f, 0.999f}) {
    for (const uint64_t seed : {uint64_t{0}, uint64_t{12345}, ~uint64_t{0}}) {
      flashattn::ForwardArgs a;
      a.q = flashattn::bshd(q.data(), DType::f16, batch, rows, heads, 4);
      a.k = a.v = flashattn::bshd(k.data(), DType::f16, batch, keys, 1, 4);
      a.dropout_p = p;
      a.dropout_seed = seed;
      a.dropout_offset = seed % 1000;
      std::vector<uint8_t> mask(static_cast<size_t>(flashattn::lse_count(a) * flashattn::dropout_mask_row_bytes(a)));
      a.dropout_mask = mask.data();
      flashattn::write_dropout_mask(a);
      const double keep = 1.0 - flashattn::dropout_threshold(p) / 65536.0;
      int64_t kept[8] = {}, n[8] = {};
      const int64_t row_bytes = flashattn::dropout_mask_row_bytes(a);
      for (int64_t r = 0; r < flashattn::lse_count(a); ++r)
        for (int64_t j = 0; j < keys; ++j) {
          ++n[j % 8];
          kept[j % 8] += (mask[r * row_bytes + j / 8] >> (j % 8)) & 1;
        }
      int64_t all = 0, total = 0;
      for (int w = 0; w < 8; ++w) {
        const double sd = std::sqrt(n[w] * keep * (1 - keep));
        CHECK_MESSAGE(std::fabs(kept[w] - n[w] * keep) <= 5 * sd + 1,
                      "p " << p << " seed " << seed << " word " << w << ": kept " << kept[w] << " of " << n[w]);
        all += kept[w];
        total += n[w];
      }
      CHECK(std::fabs(all - total * keep) <= 5 * std::sqrt(total * keep * (1 - keep)) + 1);
      // Bits past the keys of a row are 0.
      for (int64_t r = 0; r < flashattn::lse_count(a); ++r) CHECK((mask[r * row_bytes + row_bytes - 1] >> (keys % 8)) == 0);
    }
  }
}

TEST_CASE("oracle: a dropped row is the undropped row over values scaled by its keep bits") {
  check("oracle/dropout-row", [] {
    namespace ref = flashattn::reference;
    ref::Head h;
    h.nq = 1;  // one row: its keep factors can be folded into the value rows
    h.nk = *rc::gen::inRange<int64_t>(1, 40);
    h.d = *rc::gen::inRange<int64_t>(1, 6);
    h.scale = 0.5;
    h.mask = flashattn::Mask::make(1, h.nk, false, -1, -1);
    const uint64_t seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);
    Rng rng(seed);
    std::vector<double> q(static_cast<size_t>(h.d)), k(static_cast<size_t>(h.nk * h.d)), v(k.size());
    for (double& x : q) x = rng.normal();
    for (double& x : k) x = rng.normal();
    for (double& x : v) x = rng.normal();
    std::vector<double> out(static_cast<size_t>(h.d)), lse(1), out_plain(out.size()), lse_plain(1);
    ref::Head dropped = h;
    dropped.dropout_p = *rc::gen::elementOf(std::vector<float>{0.2f, 0.5f, 0.9f});
    dropped.dropout_seed = seed * 0x9E3779B97F4A7C15ull;
    dropped.dropout_stream = seed >> 3;
    ref::head_forward(dropped, q.data(), k.data(), v.data(), out.data(), lse.data());
    const uint32_t t = flashattn::dropout_threshold(dropped.dropout_p);
    std::vector<double> scaled = v;
    for (int64_t j = 0; j < h.nk; ++j) {
      const bool z = flashattn::dropout_keep(dropped.dropout_seed, dropped.dropout_stream, 0, j, t);
      for (int64_t x = 0; x < h.d; ++x) scaled[j * h.d + x] *= z ? 1.0 / (1.0 - dropped.dropout_p) : 0.0;
    }
    ref::head_forward(h, q.data(), k.data(), scaled.data(), out_plain.data(), lse_plain.data());
    RC_ASSERT(lse[0] == lse_plain[0]);  // LSE is the undropped one
    require(close(out, out_plain, kReorderTolerance, "dropped out"));
  }, kCases);
}

}  // namespace props
