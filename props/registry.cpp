// Registry of implementations under test and the runners' doctest entry point.
#define DOCTEST_CONFIG_IMPLEMENT
#include "props/registry.hpp"

#include <cstdlib>
#include <cstring>
#include <iostream>

#include <doctest/doctest.h>

namespace props {
namespace {

std::vector<Implementation>& registry() {
  static std::vector<Implementation> r;
  return r;
}

}  // namespace

void add(Implementation impl) { registry().push_back(std::move(impl)); }

std::vector<const Implementation*> implementations() {
  const char* only = std::getenv("FLASHATTN_PROPS_IMPL");
  std::vector<const Implementation*> r;
  for (const Implementation& i : registry())
    if (!only || i.name == only) r.push_back(&i);
  return r;
}

int run(int argc, char** argv) {
  if (registry().empty()) {
    std::cerr << "props::run: no implementation registered (call props::add first)\n";
    return EXIT_FAILURE;
  }
  if (implementations().empty()) {
    std::cerr << "props::run: FLASHATTN_PROPS_IMPL=" << std::getenv("FLASHATTN_PROPS_IMPL")
              << " names no registered implementation; registered:";
    for (const Implementation& i : registry()) std::cerr << ' ' << i.name;
    std::cerr << '\n';
    return EXIT_FAILURE;
  }
  for (int i = 1; i < argc; ++i)
    if (std::strstr(argv[i], "replay") && !std::getenv("FLASHATTN_REPLAY"))
      std::cerr << "props: FLASHATTN_REPLAY is not set, so the replay test is skipped; set it to a case line "
                   "printed by a failure: FLASHATTN_REPLAY='b=1 hk=1 ...' "
                << argv[0] << " -tc=replay\n";
  doctest::Context context;
  // FLASHATTN_PROPS_ABORT_AFTER=n stops the runner after n failed checks (scripts/mutate sets 1:
  // a mutant is killed by its first failure, and the properties after it need not run).
  if (const char* n = std::getenv("FLASHATTN_PROPS_ABORT_AFTER")) context.setOption("abort-after", std::atoi(n));
  context.applyCommandLine(argc, argv);
  return context.run();
}

}  // namespace props
