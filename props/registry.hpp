// The implementations under test. A runner registers each one with props::add (one line) and then
// calls props::run, which runs every property TEST_CASE linked into the runner.
//
//   int main(int argc, char** argv) {
//     props::add({"cpu", [](const flashattn::ForwardArgs& a) { flashattn::cpu::forward(a); },
//                        [](const flashattn::BackwardArgs& a) { flashattn::cpu::backward(a); }});
//     return props::run(argc, argv);
//   }
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "flashattn/args.hpp"
#include "props/case.hpp"

namespace props {

struct Implementation {
  std::string name;  // unique; used in test reports and FLASHATTN_PROPS_IMPL
  // Computes out and lse. Arguments always point to HOST memory: a device backend copies to the
  // device and back itself.
  std::function<void(const flashattn::ForwardArgs&)> forward;
  // Computes dq, dk, dv (host memory as above); empty: forward only.
  std::function<void(const flashattn::BackwardArgs&)> backward;
  // Returns why a case is not supported ("" if it is); empty: everything is supported. Unsupported
  // cases are discarded (RapidCheck generates others in their place).
  std::function<std::string(const Case&)> unsupported;
  // True for the oracle's modes: they materialise every element of S and P, so their P·V and dS·K
  // include the K/V rows of hidden keys with a zero weight (0·NaN = NaN). The property that a
  // block mask's skipped blocks are never used (check_unlisted_unread) applies to the others only.
  bool materialises = false;
};

// Registers an implementation (call before run()).
void add(Implementation impl);

// Returns the registered implementations, filtered by FLASHATTN_PROPS_IMPL (a name) when it is set.
std::vector<const Implementation*> implementations();

// Runs the doctest suite (every TEST_CASE linked into the runner) with the command line's doctest
// options; returns the process exit code. Fails if nothing was registered, or if
// FLASHATTN_PROPS_IMPL names no registered implementation.
int run(int argc, char** argv);

}  // namespace props
