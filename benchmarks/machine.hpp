// Facts about the host the benchmark reports, and the OpenBLAS core-type setup.
#pragma once

#include <string>

namespace bench {

// Returns the "model name" of /proc/cpuinfo (e.g. "AMD EPYC"), or "unknown CPU".
std::string cpu_model();

// Returns MemAvailable of /proc/meminfo in bytes (0 if unreadable).
double available_memory_bytes();

// Returns the 1-minute load average (0 if unreadable).
double load_average();

// OpenBLAS reads OPENBLAS_CORETYPE when the library loads, before main. Re-executes this program
// (once) with the variable unset, or set to the value given by --openblas-coretype, when the
// environment disagrees. Returns only when no re-execution is needed (or it failed).
void ensure_openblas_coretype(int argc, char** argv);

}  // namespace bench
