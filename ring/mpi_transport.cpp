// The ring's Transport on MPI (flashattn/ring_mpi.hpp).
#include <algorithm>
#include <string>

#include "flashattn/error.hpp"
#include "flashattn/ring_mpi.hpp"

namespace flashattn::ring {
namespace {

constexpr int kTagBase = 0x5A10;          // channel c uses tags kTagBase + c * kTagsPerChannel + piece
constexpr int kTagsPerChannel = 1 << 12;  // pieces of one message (1 GiB each)
constexpr size_t kPiece = size_t{1} << 30;

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error(std::string("ring: ") + what + " failed: " + std::string(text, len));
  }
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw Error("ring: MPI is not initialised (call MPI_Init before flashattn::ring)");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

void MpiTransport::start_shift(int channel, const void* send, size_t send_bytes, void* recv, size_t recv_bytes) {
  if (send_bytes / kPiece >= kTagsPerChannel || recv_bytes / kPiece >= kTagsPerChannel)
    throw Error("ring: a block of " + std::to_string(std::max(send_bytes, recv_bytes)) + " bytes is too large to send");
  const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
  std::vector<MPI_Request>& req = pending_[channel];
  // Posts one message as pieces of at most 1 GiB (MPI counts are int); an empty message is still one
  // (matched) piece. post(offset, count, tag, request) starts one piece.
  auto pieces = [&](size_t bytes, auto post) {
    for (size_t off = 0, piece = 0; off < bytes || piece == 0; off += kPiece, ++piece) {
      req.emplace_back();
      post(off, static_cast<int>(std::min(kPiece, bytes - std::min(off, bytes))),
           kTagBase + channel * kTagsPerChannel + static_cast<int>(piece), &req.back());
    }
  };
  pieces(recv_bytes, [&](size_t off, int n, int tag, MPI_Request* r) {
    check(MPI_Irecv(static_cast<unsigned char*>(recv) + off, n, MPI_BYTE, prev, tag, comm_, r), "MPI_Irecv");
  });
  pieces(send_bytes, [&](size_t off, int n, int tag, MPI_Request* r) {
    check(MPI_Isend(static_cast<const unsigned char*>(send) + off, n, MPI_BYTE, next, tag, comm_, r), "MPI_Isend");
  });
}

void MpiTransport::progress() {
  for (auto& req : pending_) {
    if (req.empty()) continue;
    int done = 0;
    check(MPI_Testall(static_cast<int>(req.size()), req.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  }
}

void MpiTransport::wait(int channel) {
  std::vector<MPI_Request>& req = pending_[channel];
  if (!req.empty()) check(MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  req.clear();
}

void MpiTransport::allgather(const void* mine, void* all, size_t bytes) {
  check(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comm_),
        "MPI_Allgather");
}

}  // namespace flashattn::ring
