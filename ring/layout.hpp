// Where every rank's query and key rows sit in the global sequences, and the mask offset of a block.
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/ring.hpp"

namespace flashattn::ring::detail {

// A contiguous run of a rank's shard: local rows [local, local + count) are global rows
// [global, global + count).
struct Part {
  int64_t local = 0, count = 0, global = 0;
};

class Layout {
 public:
  // nq[r], nk[r]: query and key rows of rank r's shard.
  Layout(Sharding sharding, std::vector<int64_t> nq, std::vector<int64_t> nk);

  int ranks() const { return static_cast<int>(nq_.size()); }
  int64_t global_q() const { return total_q_; }
  int64_t global_k() const { return total_k_; }
  int64_t shard_q(int r) const { return nq_[r]; }
  int64_t shard_k(int r) const { return nk_[r]; }
  // The parts of rank r's query (key) shard, in the shard's order; empty parts left out.
  const std::vector<Part>& q_parts(int r) const { return q_parts_[r]; }
  const std::vector<Part>& k_parts(int r) const { return k_parts_[r]; }

  // The diagonal_offset that makes a call on query part qp and key part kp see the global mask:
  // global row qp.global + i is aligned with key qp.global + i + Nk - Nq + user_offset.
  int64_t block_offset(const Part& qp, const Part& kp, int64_t user_offset) const {
    return qp.global - kp.global + (total_k_ - total_q_) - (kp.count - qp.count) + user_offset;
  }

 private:
  std::vector<int64_t> nq_, nk_;
  int64_t total_q_ = 0, total_k_ = 0;
  std::vector<std::vector<Part>> q_parts_, k_parts_;
};

}  // namespace flashattn::ring::detail
