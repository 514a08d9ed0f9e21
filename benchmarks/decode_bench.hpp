// flashattn-bench's decode mode (--decode): decode-shaped forward calls (few query rows per
// sequence against a long KV cache), reported as GB/s of K/V read and % of the machine's measured
// read bandwidth (read_bandwidth.hpp, before and after the timings, like the FMA peak), beside the
// standard baseline and the CPU's general path (Config.decode = false) in the same run.
#pragma once

namespace bench {

// Returns whether argv asks for the decode mode (--decode or --mode decode).
bool decode_mode_requested(int argc, char** argv);

// Runs the decode mode; returns the process exit code.
int run_decode(int argc, char** argv);

}  // namespace bench
