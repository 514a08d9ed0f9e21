// The doctest <-> RapidCheck adapter (see check.hpp).
#include "props/check.hpp"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace props {
namespace {

// Returns whether RC_PARAMS sets `key` (keys are separated by spaces: "key=value key=value").
bool rc_params_sets(const std::string& key) {
  const char* env = std::getenv("RC_PARAMS");
  if (!env) return false;
  std::istringstream is(env);
  std::string tok;
  while (is >> tok)
    if (tok.rfind(key + "=", 0) == 0) return true;
  return false;
}

}  // namespace

rc::detail::TestParams test_params(int default_cases) {
  rc::detail::TestParams p = rc::detail::configuration().testParams;
  if (!rc_params_sets("seed")) p.seed = kDefaultSeed;
  if (const char* n = std::getenv("FLASHATTN_PROPS_CASES")) {
    const int cases = std::atoi(n);
    if (cases <= 0) throw std::invalid_argument(std::string("FLASHATTN_PROPS_CASES (") + n + ") must be a positive integer");
    p.maxSuccess = cases;
  } else if (!rc_params_sets("max_success")) {
    p.maxSuccess = default_cases;
  }
  return p;
}

void report(const std::string& id, const rc::detail::TestResult& result) {
  std::ostringstream os;
  rc::detail::printResultMessage(result, os);
  if (result.template is<rc::detail::SuccessResult>()) {
    CHECK_MESSAGE(true, id);
    return;
  }
  FAIL_CHECK("property '" << id << "' failed\n"
             << os.str()
             << "\n(RapidCheck also prints RC_PARAMS=\"reproduce=...\" at exit: it replays this failure)");
}

}  // namespace props
