// Judges an implementation's results for one call against the fp64 oracle by the tolerance rule
// (compare.hpp, docs/semantics.md "How the tests judge a backend"). It runs every oracle the rule
// needs on the call's own arguments and returns one verdict per output. Used by the property
// suite's cross-check, the reliability tests, the fuzz target and the benchmarks' oracle check:
// one rule, one implementation (library flashattn_tolerance; no RapidCheck or doctest).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/args.hpp"
#include "tolerance/compare.hpp"

namespace flashattn::tolerance {

// Returns the index of element (b, s, h, 0) in a dense [B, N, H, d] array with t's sizes: the layout
// of Verdict::impl and Verdict::oracle for out and the gradients.
int64_t dense_row(const flashattn::ConstTensor& t, int64_t b, int64_t s, int64_t h);

struct Verdict {
  std::string output;              // "out", "lse", "dq", "dk", "dv", "dbias" or "dsinks"
  Comparison result;
  std::vector<double> impl, oracle;  // the compared values (dense; see below)
  std::string where;               // the worst element as "[b=…, s=…, h=…, x=…]" ("[b=…, h=…, s=…]" for lse)
  std::string message() const;     // "" when passed, else "<output> <describe(...)> <where>"
};

struct Judgement {
  std::vector<Verdict> verdicts;
  bool passed() const;
  std::string first_failure() const;  // "" when every output passed
  const Verdict* find(const std::string& output) const;
};

// Judges a forward call whose outputs a.out (and a.lse when set) hold an implementation's results.
// Only rows of the call's sequences are compared (varlen rows outside every sequence are not
// outputs of the call).
Judgement judge_forward(const flashattn::ForwardArgs& a);

// Judges a backward call whose a.dq, a.dk, a.dv hold an implementation's results; a.out and a.lse
// must hold what the implementation was given (the rule's contract term is computed from them).
Judgement judge_backward(const flashattn::BackwardArgs& a);

}  // namespace flashattn::tolerance
