// Agreement before any data moves: every rank validates its own shard, then all ranks exchange one
// fixed-size record (shape, options, the local verdict) and check that they describe one call.
#pragma once

#include <vector>

#include "flashattn/ring.hpp"

namespace flashattn::ring::detail {

// The shard lengths of every rank, once the ranks agree.
struct Agreed {
  std::vector<int64_t> nq, nk;
};

// Validates `a` as this rank's shard of a ring call (validate() on the shard, then the options the
// ring does not support), exchanges the records and returns the ranks' shard lengths. Throws the
// same flashattn::Error on every rank when any rank's arguments are invalid or differ from rank 0's.
// A backend's unsupported() reason counts as an invalid argument.
Agreed agree(const ForwardArgs& a, Transport& t, const Options& o);
Agreed agree(const BackwardArgs& a, Transport& t, const Options& o);

}  // namespace flashattn::ring::detail
