// flashattn::ring over MPI: the ring's Transport on an MPI communicator, and forward/backward taking
// the communicator directly. MPI must be initialised by the caller (any thread level: only the
// calling thread makes MPI calls).
#pragma once

#include <mpi.h>

#include <vector>

#include "flashattn/ring.hpp"

namespace flashattn::ring {

// Transport on an MPI communicator: MPI_Isend/MPI_Irecv to the neighbours (messages over 1 GiB
// go in pieces), MPI_Allgather. The communicator is used as given (not duplicated): the ring's
// messages use tags 0x5A10 and above on it.
class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void start_shift(int channel, const void* send, size_t send_bytes, void* recv, size_t recv_bytes) override;
  void progress() override;
  void wait(int channel) override;
  void allgather(const void* mine, void* all, size_t bytes) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_[2];
};

inline void forward(const ForwardArgs& a, MPI_Comm comm, const Options& o = {}, Timings* timings = nullptr) {
  MpiTransport t(comm);
  forward(a, t, o, timings);
}

inline void backward(const BackwardArgs& a, MPI_Comm comm, const Options& o = {}, Timings* timings = nullptr) {
  MpiTransport t(comm);
  backward(a, t, o, timings);
}

}  // namespace flashattn::ring
