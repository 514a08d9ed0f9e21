// Facts about the host the benchmark reports, and the OpenBLAS core-type setup.
#pragma once

#include <cstdint>
#include <string>

namespace bench {

// Returns the "model name" of /proc/cpuinfo (e.g. "AMD EPYC"), or "unknown CPU".
std::string cpu_model();

// Returns the model name with the family and model numbers, e.g. "AMD EPYC (family 25 model 17)":
// the name alone does not tell the development hosts' Zen 4 and Zen 5 apart.
std::string cpu_description();

// Return the per-core L1 data and L2 cache sizes in bytes as the CPU library reads them
// (flashattn::cpu::cache_sizes), 0 when unknown or when the CPU library is not built.
int64_t l1d_cache_bytes();
int64_t l2_cache_bytes();

// Returns MemAvailable of /proc/meminfo in bytes (0 if unreadable).
double available_memory_bytes();

// Returns the 1-minute load average (0 if unreadable).
double load_average();

// OpenBLAS reads OPENBLAS_CORETYPE when the library loads, before main. Re-executes this program
// (once) with the variable unset, or set to the value given by --openblas-coretype, when the
// environment disagrees. Returns only when no re-execution is needed (or it failed).
void ensure_openblas_coretype(int argc, char** argv);

}  // namespace bench
