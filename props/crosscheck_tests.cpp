// The properties every registered implementation must satisfy, one doctest TEST_CASE each, and the
// replay test. Linked into every props runner.
#include <cstdlib>
#include <cstring>
#include <vector>
#include <stdexcept>
#include <string>

#include <doctest/doctest.h>

#include "props/case.hpp"
#include "props/check.hpp"
#include "props/coverage.hpp"
#include "props/crosscheck.hpp"
#include "props/instance.hpp"
#include "props/registry.hpp"

namespace props {
namespace {

// Cases per property in CI (FLASHATTN_PROPS_CASES raises it).
constexpr int kCrossCheckCases = 100;
constexpr int kRepeatCases = 30;

// The case space of the cross-checks: every dtype, or only the one FLASHATTN_PROPS_DTYPE names
// (f32, f16 or bf16), so long runs can be split (and counted) per dtype.
CaseSpace crosscheck_space() {
  CaseSpace space;
  if (const char* only = std::getenv("FLASHATTN_PROPS_DTYPE")) {
    space.dtypes.clear();
    for (flashattn::DType t : {flashattn::DType::f32, flashattn::DType::f16, flashattn::DType::bf16})
      if (std::string(only) == flashattn::dtype_name(t)) space.dtypes.push_back(t);
    if (space.dtypes.empty())
      throw std::invalid_argument(std::string("FLASHATTN_PROPS_DTYPE=") + only + ": expected f32, f16 or bf16");
  }
  return space;
}

using CaseCheck = std::string (*)(const Implementation&, const Case&, Margins*);

// Checks `fn` for every registered implementation on generated cases, discarding cases the
// implementation declares unsupported; then reports what the checked cases covered (one MESSAGE
// block: the shares of dtypes, layouts, masks, rows that see several keys, tiles; coverage.hpp),
// and per implementation the worst error/bound ratio of each output with its case (margins.hpp).
void for_each_implementation(const char* property, CaseCheck fn, bool needs_backward, int cases,
                             CaseSpace space = crosscheck_space()) {
  CoverageTally tally;  // every checked case of every implementation (on a failure, shrinking's too)
  for (const Implementation* impl : implementations()) {
    if (needs_backward && !impl->backward) {
      MESSAGE(impl->name << " has no backward: '" << std::string(property) << "' does not apply");
      continue;
    }
    Margins margins;  // this implementation's worst ratios (cases shrunk after a failure included)
    check(
        impl->name + "/" + property,
        [impl, fn, space, &tally, &margins] {
          const Case c = *gen_case(space);
          if (impl->unsupported) {
            const std::string why = impl->unsupported(c);
            if (!why.empty()) RC_DISCARD(why);
          }
          tally.add(c);
          const std::string e = fn(*impl, c, &margins);
          if (!e.empty()) RC_FAIL(e);
        },
        cases);
    if (const std::string m = margins.summary(); !m.empty())
      MESSAGE(std::string(property) << ", " << impl->name << ": worst error/bound per output:" << m);
  }
  if (tally.cases() > 0) MESSAGE(std::string(property) << ", all implementations: " << tally.summary());
}

const char* replay_line() { return std::getenv("FLASHATTN_REPLAY"); }


}  // namespace

TEST_CASE("forward agrees with the fp64 oracle") {
  for_each_implementation("forward", crosscheck_forward, false, kCrossCheckCases);
}

TEST_CASE("backward agrees with the fp64 oracle") {
  for_each_implementation("backward", crosscheck_backward, true, kCrossCheckCases);
}

TEST_CASE("repeated calls are bitwise identical") {
  for_each_implementation("repeatable", check_repeatable, false, kRepeatCases);
}

// Additive bias (every broadcast form, −∞ entries, any bias dtype; dbias in the backward) and
// dropout (keep mask compared bit for bit) on top of every other option of the generator.
CaseSpace bias_dropout_space() {
  CaseSpace space = crosscheck_space();
  space.bias = space.dropout = true;
  return space;
}

TEST_CASE("forward with bias and dropout agrees with the fp64 oracle") {
  for_each_implementation("forward+bias+dropout", crosscheck_forward, false, kCrossCheckCases, bias_dropout_space());
}

TEST_CASE("backward with bias, dbias and dropout agrees with the fp64 oracle") {
  for_each_implementation("backward+bias+dropout", crosscheck_backward, true, kCrossCheckCases, bias_dropout_space());
}

TEST_CASE("repeated calls with bias and dropout are bitwise identical") {
  for_each_implementation("repeatable+bias+dropout", check_repeatable, false, kRepeatCases, bias_dropout_space());
}

TEST_CASE("dropout_p = 0 is bitwise the call without dropout") {
  for_each_implementation(
      "dropout-zero",
      [](const Implementation& impl, const Case& c, Margins*) -> std::string {
        Instance inst(c);
        flashattn::ForwardArgs a = inst.forward_args();
        impl.forward(a);
        const std::vector<double> out = read_dense(inst.out());
        const std::vector<float> lse(inst.lse(), inst.lse() + inst.lse_count());
        a = inst.forward_args();
        a.dropout_p = 0;
        a.dropout_seed = c.seed + 1;  // a seed and an offset change nothing at p = 0
        a.dropout_offset = 7;
        impl.forward(a);
        const std::vector<double> out0 = read_dense(inst.out());
        if (std::memcmp(out.data(), out0.data(), out.size() * sizeof(double)) != 0 ||
            std::memcmp(lse.data(), inst.lse(), lse.size() * sizeof(float)) != 0)
          return impl.name + " forward: dropout_p = 0 with a seed wrote other bits than the call without dropout\n" +
                 replay_hint(c);
        return "";
      },
      false, kRepeatCases, [] {
        CaseSpace space = crosscheck_space();
        space.bias = true;
        return space;
      }());
}

// Block-sparse masks (every BlockSparse kind and block size, with bias, dbias and dropout on top of
// every other option of the generator).
CaseSpace block_space() {
  CaseSpace space = crosscheck_space();
  space.bias = space.dropout = space.blocks = true;
  return space;
}

TEST_CASE("forward with a block-sparse mask agrees with the fp64 oracle") {
  for_each_implementation("forward+blocks", crosscheck_forward, false, kCrossCheckCases, block_space());
}

TEST_CASE("backward with a block-sparse mask agrees with the fp64 oracle") {
  for_each_implementation("backward+blocks", crosscheck_backward, true, kCrossCheckCases, block_space());
}

TEST_CASE("K/V rows, bias entries and bits of blocks a block mask skips are never used (NaN there changes nothing)") {
  for_each_implementation("blocks-unread", check_unlisted_unread, false, kRepeatCases, [] {
    CaseSpace space = block_space();
    space.dropout = false;
    return space;
  }());
}

// 200 cases: the draws whose poisoned row reaches the general forward with a NaN row sum are rare
// enough that 30 cases missed the forward's NaN-row rule (mutant cpu-forward-nan-row-empty).
constexpr int kNanContainedCases = 200;

TEST_CASE("a NaN input damages only its (sequence, key head) group, and every row that reads it") {
  for_each_implementation("nan-contained", check_nan_contained, false, kNanContainedCases, block_space());
}

TEST_CASE("case lines parse back to the same case") {
  check("case-roundtrip", [] {
    CaseSpace space;
    space.bias = space.dropout = space.blocks = true;
    const Case c = *gen_case(space);
    RC_ASSERT(to_string(parse_case(to_string(c))) == to_string(c));
  });
}

// Runs every cross-check on the case in FLASHATTN_REPLAY (a line printed by a failure); skipped
// (reported as such by doctest) when the variable is unset.
TEST_CASE("replay" * doctest::skip(replay_line() == nullptr) *
          doctest::description("set FLASHATTN_REPLAY='<case line>' to replay one printed case")) {
  const Case c = parse_case(replay_line());
  MESSAGE("replaying " << c);
  for (const Implementation* impl : implementations()) {
    INFO(impl->name);
    if (impl->unsupported) {
      const std::string why = impl->unsupported(c);
      if (!why.empty()) {
        MESSAGE(impl->name << " does not support this case: " << why);
        continue;
      }
    }
    const std::string fwd = crosscheck_forward(*impl, c);
    CHECK_MESSAGE(fwd.empty(), fwd);
    if (impl->backward) {
      const std::string bwd = crosscheck_backward(*impl, c);
      CHECK_MESSAGE(bwd.empty(), bwd);
    }
    const std::string rep = check_repeatable(*impl, c);
    CHECK_MESSAGE(rep.empty(), rep);
    const std::string unread = check_unlisted_unread(*impl, c);
    CHECK_MESSAGE(unread.empty(), unread);
    const std::string contained = check_nan_contained(*impl, c);
    CHECK_MESSAGE(contained.empty(), contained);
  }
}

}  // namespace props
