// Plots of a run with gnuplot: throughput vs sequence length per implementation, and extra
// memory vs sequence length.
#pragma once

#include <string>
#include <vector>

#include "report.hpp"

namespace bench {

// Writes PREFIX.dat and PREFIX.gp and runs gnuplot to draw PREFIX-throughput.png and
// PREFIX-memory.png (x: seqlen_k, log scale). One line per (impl, pass, dtype, mask, d, tiles).
// Returns false (with a message on stderr) when gnuplot is missing or fails.
bool plot(const std::string& prefix, const MachineInfo& m, const std::vector<Result>& rs);

}  // namespace bench
