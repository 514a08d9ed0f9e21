// Command-line options of flashattn-bench (CLI11).
#pragma once

#include <string>
#include <vector>

#include "cases.hpp"

namespace bench {

struct Options {
  Grid grid;                 // problem lists (filled with defaults for lists not given)
  bool custom = false;       // some problem option was given: run the grid, not the default set
  bool tile_sweep = false;   // time the CPU backend over grid.block_q × grid.block_k plus its default
  int reps = 5;
  double min_seconds = 0.3;  // per case: keep repeating (up to 200 reps) until this much time was spent
  double max_seconds = 5;
  double time_limit = 0;     // > 0: skip a case whose call is estimated (from its series) to take longer    // per case: stop repeating (after 2 reps) once this much time was spent
  int threads = 0;
  bool no_check = false;
  int64_t check_max_seqlen = 0;  // > 0: cases with more keys than this run unchecked
  double oracle_limit = 4e8;  // multiply-adds
  double mem_limit_gib = 0;   // 0: 70 % of MemAvailable
  double peak_seconds = 0.6;
  std::string json, csv, plot, openblas_coretype;
  std::string simd_target;   // non-empty: run every Highway kernel at most this target (limit_simd_target)
  bool quiet = false;
};

// Parses argv into options. Returns an exit code >= 0 when the program should stop (help, error),
// or -1 to continue.
int parse_options(int argc, char** argv, const std::vector<std::string>& available, Options& o);

}  // namespace bench
