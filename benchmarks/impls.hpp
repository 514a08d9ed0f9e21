// The implementations the benchmark can run, behind one interface.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cases.hpp"
#include "flashattn/args.hpp"

namespace bench {

// Settings shared by every run.
struct RunSettings {
  int threads = 0;                // OpenMP threads (0: all)
  double oracle_limit = 0;        // max multiply-adds (B·Hq·Nq·Nk·d) the oracle may take per run
  double memory_budget = 0;       // bytes an implementation's buffers may take
};

// The two calls of a case over one set of host buffers: the forward writes out and lse, which the
// backward reads.
struct Calls {
  flashattn::ForwardArgs forward;
  flashattn::BackwardArgs backward;
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual std::string name() const = 0;
  // Returns why the case cannot run here (too slow, too much memory), or "" when it can.
  virtual std::string refuse(const Case& c, const RunSettings& s) const = 0;
  // Makes the implementation's copy of the inputs (device memory for the GPU); called once per case
  // before the first forward. Host implementations read the host tensors directly.
  virtual void prepare(const Calls&) {}
  // Copies the results of the last call of `pass` into the host outputs of `a` (GPU); no-op on host.
  virtual void fetch(const Calls&, Pass) {}
  // Computes out and lse, and returns when they are complete. `for_backward`: a backward on the
  // same tensors follows.
  virtual void forward(const flashattn::ForwardArgs& a, const Case& c, bool for_backward) = 0;
  // Computes dq, dk, dv (complete on return); called after forward(a, c, true) on the same tensors.
  virtual void backward(const flashattn::BackwardArgs& a, const Case& c) = 0;
  // Returns the bytes beyond inputs and outputs the implementation states it needs for the pass
  // (0 when it states nothing); the benchmark also measures heap growth.
  virtual size_t declared_bytes(const Calls& a, const Case& c) const = 0;
};

// Returns the names of the implementations built into this executable, in display order.
std::vector<std::string> available_impls();

// Returns a runner for `name` (one of available_impls()).
std::unique_ptr<Runner> make_runner(const std::string& name, const RunSettings& s);

// Returns the multiply-adds the oracle spends on a problem (both passes count their forward).
double oracle_cost(const Problem& p);

}  // namespace bench
