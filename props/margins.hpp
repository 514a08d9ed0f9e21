// How close an implementation came to the tolerance rule's bound: per output, the largest
// max_error / bound over the cases it was judged on, with the case that gave it. The cross-check
// properties print it per implementation after each run, so a long run (FLASHATTN_PROPS_CASES)
// reports its worst ratios and how to replay them, not only whether it passed.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "props/case.hpp"
#include "tolerance/judge.hpp"

namespace props {

using namespace ::flashattn::tolerance;  // NOLINT: the suite speaks the tolerance rule's vocabulary

class Margins {
 public:
  // Records every verdict of `j`, judged on case c; with FLASHATTN_PROPS_VERDICTS set also prints
  // each one's error and the parts of its bound to stderr ("verdict dq d=… error=… bound=… …").
  void add(const Judgement& j, const Case& c);
  // One line per output in name order: "out 0.45 (replay: FLASHATTN_REPLAY='…')"; "" when empty.
  std::string summary() const;
  // The worst ratio recorded for `output` (0 when none).
  double worst(const std::string& output) const;

 private:
  struct Worst {
    double ratio = 0;
    std::string line;
  };
  mutable std::mutex mutex_;
  std::map<std::string, Worst> worst_;
};

}  // namespace props
