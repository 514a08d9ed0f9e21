// Property runner for the oracle: registers reference::forward/backward in both precisions (the
// cross-check then proves the harness and the tolerance rule accept both), and links the
// properties of the oracle itself (props/oracle_*.cpp).
#include "flashattn/reference.hpp"
#include "props/registry.hpp"

namespace {

using flashattn::BackwardArgs;
using flashattn::ForwardArgs;
using flashattn::reference::Precision;

}  // namespace

int main(int argc, char** argv) {
  props::add({"reference-fp64", [](const ForwardArgs& a) { flashattn::reference::forward(a, Precision::fp64); },
              [](const BackwardArgs& a) { flashattn::reference::backward(a, Precision::fp64); }, {}});
  props::add({"reference-same-precision",
              [](const ForwardArgs& a) { flashattn::reference::forward(a, Precision::same_as_input); },
              [](const BackwardArgs& a) { flashattn::reference::backward(a, Precision::same_as_input); }, {}});
  props::add({"reference-same-precision-reversed",
              [](const ForwardArgs& a) { flashattn::reference::forward(a, Precision::same_as_input_reversed); },
              [](const BackwardArgs& a) { flashattn::reference::backward(a, Precision::same_as_input_reversed); },
              {}});
  return props::run(argc, argv);
}
