// The doctest <-> RapidCheck adapter.
//
// props::check(id, property) runs a RapidCheck property inside the current doctest TEST_CASE; a
// failure becomes a doctest failure whose message is RapidCheck's report with the shrunk
// counterexample (one replayable line per generated Case).
//
// Parameters, for CI stability: a fixed seed (kDefaultSeed) and a fixed number of cases per
// property, unless overridden:
//   FLASHATTN_PROPS_CASES=N   runs N cases per property (RapidCheck's max_success);
//   RC_PARAMS="seed=… max_success=… reproduce=…"   RapidCheck's own settings win over the defaults
//                              (reproduce=… replays a failure RapidCheck printed).
#pragma once

#include <string>

#include <doctest/doctest.h>
#include <rapidcheck.h>

namespace props {

// Seed of every property unless RC_PARAMS sets one.
constexpr uint64_t kDefaultSeed = 20261122;

// Returns RapidCheck's parameters for a property with `default_cases` cases (see above).
rc::detail::TestParams test_params(int default_cases);

// Records the result of a property run in doctest: nothing on success, a failure carrying the
// RapidCheck report otherwise.
void report(const std::string& id, const rc::detail::TestResult& result);

// Checks `property` (a callable taking no arguments or RapidCheck-arbitrary ones) with up to
// `default_cases` cases. `id` names the property in reports and in RC_PARAMS="reproduce=…".
template <class Property>
void check(const std::string& id, Property&& property, int default_cases = 100) {
  rc::detail::TestMetadata metadata;
  metadata.id = id;
  metadata.description = id;
  report(id, rc::detail::checkTestable(std::forward<Property>(property), metadata, test_params(default_cases)));
}

}  // namespace props
