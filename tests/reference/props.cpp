// Property runner for the oracle: registers reference::forward/backward in both precisions (the
// cross-check then proves the harness and the tolerance rule accept the naive model the rule is
// built from: same-precision out and gradients, fp32 LSE), and links the
// properties of the oracle itself (props/oracle_*.cpp).
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "props/registry.hpp"

namespace {

using flashattn::BackwardArgs;
using flashattn::ForwardArgs;
using flashattn::reference::Precision;

// The naive implementation the rule is built from: `out` from the same-precision model `p`, `lse`
// from the fp32 naive model of the same order (the rule bounds LSE as an fp32 output: a 16-bit S
// gives an LSE off by ~1e-4, which it rejects).
void naive_forward(const ForwardArgs& a, Precision p) {
  flashattn::reference::forward(a, p);
  if (!a.lse) return;
  const auto v = flashattn::reference::forward_values(
      a, p == Precision::same_as_input            ? Precision::fp32
         : p == Precision::same_as_input_reversed ? Precision::fp32_reversed
                                                  : Precision::fp32_alternating);
  for (int64_t s = 0; s < flashattn::num_sequences(a); ++s) {
    const flashattn::Sequence seq = flashattn::sequence(a, s);
    for (int64_t h = 0; h < a.q.heads; ++h)
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
        const int64_t li = flashattn::lse_index(a, seq, h, i);
        a.lse[li] = static_cast<float>(v.lse[li]);
      }
  }
}

}  // namespace

int main(int argc, char** argv) {
  props::add({"reference-fp64", [](const ForwardArgs& a) { flashattn::reference::forward(a, Precision::fp64); },
              [](const BackwardArgs& a) { flashattn::reference::backward(a, Precision::fp64); }, {}, true});
  props::add({"reference-same-precision",
              [](const ForwardArgs& a) { naive_forward(a, Precision::same_as_input); },
              [](const BackwardArgs& a) { flashattn::reference::backward(a, Precision::same_as_input); }, {}, true});
  props::add({"reference-same-precision-reversed",
              [](const ForwardArgs& a) { naive_forward(a, Precision::same_as_input_reversed); },
              [](const BackwardArgs& a) { flashattn::reference::backward(a, Precision::same_as_input_reversed); },
              {}, true});
  props::add({"reference-same-precision-alternating",
              [](const ForwardArgs& a) { naive_forward(a, Precision::same_as_input_alternating); },
              [](const BackwardArgs& a) { flashattn::reference::backward(a, Precision::same_as_input_alternating); },
              {}, true});
  return props::run(argc, argv);
}
