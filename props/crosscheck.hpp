// The cross-check of an implementation against the oracle on one case. Every check runs in
// guarded buffers: canaries around every allocation and in layout padding, outputs poisoned with
// NaN before the call, inputs compared bit for bit after it.
#pragma once

#include <string>

#include "props/case.hpp"
#include "props/margins.hpp"
#include "props/registry.hpp"

namespace props {

// Runs impl.forward on the case; returns "" if out and lse agree with the fp64 oracle under the
// tolerance rule (compare.hpp), rows that see no key give out = 0 and lse = -inf exactly, and the
// buffers are intact; else a one-paragraph description of the first failure. When `margins` is
// set, the rule's verdicts are recorded in it (passed or not).
std::string crosscheck_forward(const Implementation& impl, const Case& c, Margins* margins = nullptr);

// As above for impl.backward (given the fp64 oracle's out and lse): dq, dk, dv agree with the
// oracle; rows that see no key get dq = 0, keys no row sees get dk = dv = 0, exactly.
std::string crosscheck_backward(const Implementation& impl, const Case& c, Margins* margins = nullptr);

// Returns "" if two forward calls (and two backward calls, when implemented) on the same inputs
// write bitwise identical outputs (`margins` is not used: nothing is judged by the rule).
std::string check_repeatable(const Implementation& impl, const Case& c, Margins* margins = nullptr);

// With a block-sparse mask: returns "" if NaN in every K/V row, bias element and bit that no listed
// block of the call makes a backend read (rows of key blocks no query block of the group lists, bias
// entries of unlisted blocks, bits of blocks not listed partial) leaves the forward's and the
// backward's outputs bitwise as they were ("" for cases without a block mask).
std::string check_unlisted_unread(const Implementation& impl, const Case& c, Margins* margins = nullptr);

// Returns "" if NaN in one element of q, k, v or dout (chosen from the case's seed) leaves every
// output outside its (sequence, key head) group bitwise as it was — out, lse, dq, dk, dv, and the
// dbias elements no row of the group sums into — and, without −∞ bias entries, makes out and lse NaN in
// every row that reads a poisoned q row or k row (docs/semantics.md, "Non-finite inputs").
std::string check_nan_contained(const Implementation& impl, const Case& c, Margins* margins = nullptr);

// Returns the replay instruction for a case: FLASHATTN_REPLAY='<line>'.
std::string replay_hint(const Case& c);

}  // namespace props
