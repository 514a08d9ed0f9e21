// Host facts and the OpenBLAS re-execution. See machine.hpp.
#include "machine.hpp"

#if FLASHATTN_HAVE_CPU
#include "flashattn/cpu.hpp"
#endif

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

namespace {
// Returns the value of the first "key : value" line of /proc/cpuinfo whose key is `key`, or "".
std::string cpuinfo_field(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto end = line.find_last_not_of(" \t", colon - 1);
    if (end == std::string::npos || line.compare(0, end + 1, key) != 0 || end + 1 != key.size()) continue;
    const auto value = line.find_first_not_of(' ', colon + 1);
    return value == std::string::npos ? "" : line.substr(value);
  }
  return "";
}

}  // namespace

std::string cpu_model() {
  const std::string name = cpuinfo_field("model name");
  return name.empty() ? "unknown CPU" : name;
}

std::string cpu_description() {
  const std::string family = cpuinfo_field("cpu family"), model = cpuinfo_field("model");
  if (family.empty() || model.empty()) return cpu_model();
  return cpu_model() + " (family " + family + " model " + model + ")";
}

#if FLASHATTN_HAVE_CPU
// The sizes the CPU library reads and derives its default key tile from (one reader for both).
int64_t l1d_cache_bytes() { return flashattn::cpu::cache_sizes().l1d; }
int64_t l2_cache_bytes() { return flashattn::cpu::cache_sizes().l2; }
#else
int64_t l1d_cache_bytes() { return 0; }
int64_t l2_cache_bytes() { return 0; }
#endif

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
