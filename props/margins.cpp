// Worst error/bound ratios per output (see margins.hpp).
#include "props/margins.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace props {

void Margins::add(const Judgement& j, const Case& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  static const bool log = std::getenv("FLASHATTN_PROPS_VERDICTS") != nullptr;
  for (const Verdict& v : j.verdicts) {
    const Comparison& r = v.result;
    if (log)  // every verdict's parts, for estimates of the rule's power (docs/reliability.md)
      std::fprintf(stderr, "verdict %s d=%lld error=%.6g bound=%.6g max_oracle=%.6g c_naive=%.6g fp32_terms=%.6g contract=%.6g floor=%.6g\n",
                   v.output.c_str(), static_cast<long long>(c.dim), r.max_error, r.bound, max_abs_finite(v.oracle), r.allowance.c * r.same_error,
                   r.allowance.fp32_terms, r.allowance.contract, r.allowance.floor);
    // A non-finite mismatch fails whatever the bound: count it as infinitely far over.
    const double ratio = !r.passed && r.max_error <= r.bound ? 1e300
                         : r.bound > 0                              ? r.max_error / r.bound
                         : r.max_error > 0                          ? 1e300
                                                                    : 0;
    Worst& w = worst_[v.output];
    if (ratio > w.ratio || w.line.empty()) w = {ratio, to_string(c)};
  }
}

double Margins::worst(const std::string& output) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = worst_.find(output);
  return it == worst_.end() ? 0 : it->second.ratio;
}

std::string Margins::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream os;
  os.precision(3);
  for (const auto& [output, w] : worst_)
    os << "\n  " << output << " " << w.ratio << " of the bound (FLASHATTN_REPLAY='" << w.line << "')";
  return os.str();
}

}  // namespace props
