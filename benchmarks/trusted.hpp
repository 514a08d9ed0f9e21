// The trusted result of one problem: the fp64 oracle where affordable (--oracle-limit), judged by
// the tests' tolerance rule (props/tolerance.hpp, run per implementation: the backward's bound
// depends on the out and lse that implementation's backward was given), else another fp32
// implementation, computed once and shared by every implementation checked against it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "check.hpp"
#include "impls.hpp"
#include "problem_data.hpp"

namespace bench {

struct CheckResult {
  std::string against;  // "oracle", "cpu-f32", "standard-f32", or "none"
  bool passed = false;
  double max_err = 0, bound = 0;  // of the tensor closest to (or furthest past) its bound
  std::vector<TensorCheck> tensors;
  std::string note;  // why nothing was checked, or the failing tensors
};

class Trusted {
 public:
  // `runner(name)` returns the shared runner of an implementation (nullptr if not built).
  Trusted(const ProblemData& data, const RunSettings& s, std::function<Runner*(const std::string&)> runner);

  // Checks the outputs of implementation `impl` (which ran on `data`).
  CheckResult check(const std::string& impl, Outputs& o);

 private:
  struct Values {
    std::vector<std::vector<double>> ref;  // per tensor
  };
  const Values* fp32_by(const std::string& name);  // nullptr when it cannot run here
  std::vector<std::vector<double>> read(const Outputs& o, flashattn::DType t) const;

  const ProblemData& data_;
  RunSettings settings_;
  std::function<Runner*(const std::string&)> runner_;
  std::map<std::string, Values> cache_;
  std::map<std::string, std::string> refused_;
};

// Names of the tensors a pass checks: {"out", "lse"} or {"dq", "dk", "dv"}.
std::vector<std::string> checked_tensors(Pass p);

}  // namespace bench
