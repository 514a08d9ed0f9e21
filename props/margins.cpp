// Worst error/bound ratios per output (see margins.hpp).
#include "props/margins.hpp"

#include <sstream>

namespace props {

void Margins::add(const Judgement& j, const Case& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Verdict& v : j.verdicts) {
    const Comparison& r = v.result;
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
