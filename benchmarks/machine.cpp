// Host facts and the OpenBLAS re-execution. See machine.hpp.
#include "machine.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

namespace bench {

namespace {
constexpr const char* kReexecMarker = "FLASHATTN_BENCH_REEXEC";
constexpr const char* kCoretypeOption = "--openblas-coretype";
}  // namespace

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

double available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double one = 0;
  f >> one;
  return one;
}

void ensure_openblas_coretype(int argc, char** argv) {
  if (std::getenv(kReexecMarker)) return;
  std::string want;  // empty: let OpenBLAS choose
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == kCoretypeOption && i + 1 < argc) want = argv[i + 1];
    if (a.rfind(std::string(kCoretypeOption) + "=", 0) == 0) want = a.substr(std::strlen(kCoretypeOption) + 1);
  }
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const bool ok = want.empty() ? env == nullptr : (env != nullptr && want == env);
  if (ok) return;
  if (want.empty()) {
    unsetenv("OPENBLAS_CORETYPE");
  } else {
    setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  }
  setenv(kReexecMarker, "1", 1);
  execv("/proc/self/exe", argv);
  std::cerr << "warning: could not re-execute to apply OPENBLAS_CORETYPE (" << std::strerror(errno)
            << "); OpenBLAS keeps the core type it loaded with\n";
}

}  // namespace bench
