// An attention implementation from OUTSIDE flashattn, checked by flashattn's property suite through
// the installed package (find_package(flashattn COMPONENTS props), target flashattn::props): a naive
// scalar forward pass (fp64 inside, outputs rounded once), as a user would write to test a kernel.
// Two registrations: "naive" (right: must pass) and "naive_top_left" (aligns the causal/window
// diagonal top-left instead of bottom-right: must be reported as failing). Run one at a time with
// FLASHATTN_PROPS_IMPL=<name>; tests/consumer/run.cmake checks both outcomes.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <flashattn/flashattn.hpp>
#include <props/registry.hpp>

namespace {

void naive_forward(const flashattn::ForwardArgs& a, bool top_left) {
  flashattn::validate(a);
  const double scale = flashattn::effective_scale(a);
  const int64_t group = a.q.heads / a.k.heads;
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    const flashattn::Mask& m = seq.mask;
    const int64_t nq = m.seqlen_q, nk = m.seqlen_k, diag = top_left ? m.offset : m.diag();
    for (int64_t h = 0; h < a.q.heads; ++h) {
      const int64_t hk = h / group;
      const double slope = flashattn::alibi_slope(a, seq.index, h);
      for (int64_t i = 0; i < nq; ++i) {
        std::vector<double> p(nk, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < nk; ++j) {
          const bool left_ok = m.left < 0 || j >= i + diag - m.left;
          const bool right_ok = m.right < 0 || j <= i + diag + m.right;
          if (!left_ok || !right_ok) continue;
          double dot = 0;
          for (int64_t x = 0; x < a.q.dim; ++x)
            dot += double(flashattn::load_as_float(a.q.data, a.q.dtype, a.q.offset(seq.batch, seq.q_start + i, h) + x)) *
                   flashattn::load_as_float(a.k.data, a.k.dtype, a.k.offset(seq.batch, seq.k_start + j, hk) + x);
          p[j] = scale * dot - slope * double(std::llabs(i + m.diag() - j));
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (double& e : p) sum += (e = std::isinf(e) ? 0.0 : std::exp(e - mx));
        for (int64_t x = 0; x < a.v.dim; ++x) {
          double o = 0;
          for (int64_t j = 0; j < nk && sum > 0; ++j)
            if (p[j] != 0)
              o += p[j] * flashattn::load_as_float(a.v.data, a.v.dtype, a.v.offset(seq.batch, seq.k_start + j, hk) + x);
          flashattn::store_from_float(a.out.data, a.out.dtype, a.out.offset(seq.batch, seq.q_start + i, h) + x,
                                      float(sum > 0 ? o / sum : 0.0));
        }
        if (a.lse)
          a.lse[flashattn::lse_index(a, seq, h, i)] =
              float(sum > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity());
      }
    }
  }
}

// What the naive kernel leaves out; such cases are discarded by the suite.
std::string unsupported(const props::Case& c) {
  if (c.softcap != 0) return "softcap";
  if (c.bias != props::BiasKind::off) return "bias";
  if (c.dropout_p != 0) return "dropout";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  props::add({"naive", [](const flashattn::ForwardArgs& a) { naive_forward(a, false); }, {}, unsupported});
  props::add({"naive_top_left", [](const flashattn::ForwardArgs& a) { naive_forward(a, true); }, {}, unsupported});
  return props::run(argc, argv);
}
