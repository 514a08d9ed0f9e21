// Shard geometry: shard_rows and the global positions of every rank's parts.
#include "layout.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "flashattn/error.hpp"

namespace flashattn::ring {
namespace detail {
namespace {

// Returns the parts of every rank for shard lengths n under `sharding`, and the global length.
std::vector<std::vector<Part>> place(Sharding sharding, const std::vector<int64_t>& n, int64_t& total) {
  const int R = static_cast<int>(n.size());
  std::vector<std::vector<Part>> parts(R);
  total = 0;
  if (sharding == Sharding::contiguous) {
    for (int r = 0; r < R; ++r) {
      if (n[r] > 0) parts[r].push_back({0, n[r], total});
      total += n[r];
    }
    return parts;
  }
  // zigzag: chunk c < R is rank c's first ceil(n/2) rows; chunk c >= R is rank 2R-1-c's rest.
  for (int c = 0; c < 2 * R; ++c) {
    const int r = c < R ? c : 2 * R - 1 - c;
    const int64_t first = (n[r] + 1) / 2;
    const Part p = c < R ? Part{0, first, total} : Part{first, n[r] - first, total};
    total += p.count;
    if (p.count > 0) parts[r].push_back(p);
  }
  return parts;
}

}  // namespace

Layout::Layout(Sharding sharding, std::vector<int64_t> nq, std::vector<int64_t> nk)
    : nq_(std::move(nq)), nk_(std::move(nk)) {
  q_parts_ = place(sharding, nq_, total_q_);
  k_parts_ = place(sharding, nk_, total_k_);
}

}  // namespace detail

ShardRows shard_rows(int64_t length, int ranks, int rank, Sharding sharding) {
  if (length < 0) throw Error("ring::shard_rows: length (" + std::to_string(length) + ") must be >= 0");
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw Error("ring::shard_rows: rank (" + std::to_string(rank) + ") must lie in [0, ranks = " +
                std::to_string(ranks) + ")");
  const int pieces = sharding == Sharding::contiguous ? ranks : 2 * ranks;
  auto start = [&](int64_t c) { return c * (length / pieces) + std::min<int64_t>(c, length % pieces); };
  ShardRows s;
  if (sharding == Sharding::contiguous) {
    s.begin[0] = start(rank);
    s.count[0] = start(rank + 1) - s.begin[0];
    return s;
  }
  const int64_t second = 2 * ranks - 1 - rank;
  s.parts = 2;
  s.begin[0] = start(rank);
  s.count[0] = start(rank + 1) - s.begin[0];
  s.begin[1] = start(second);
  s.count[1] = start(second + 1) - s.begin[1];
  return s;
}

}  // namespace flashattn::ring
