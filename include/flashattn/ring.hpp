// flashattn::ring — context parallelism: attention over a sequence sharded across processes, K/V
// blocks passed around a ring and partial results folded in by their log-sum-exp (flashattn::merge's
// formula). Component flashattn::ring (built when MPI is found); the MPI entry points are in
// flashattn/ring_mpi.hpp, this header is the transport-independent part.
//
// Each of R ranks holds a shard of every sequence's query rows and of its key/value rows (same
// batch, heads and head dims everywhere) and calls forward (then backward) with its shard's views;
// every rank gets its shard of out, lse (and dq, dk, dv). The result is the single-process call on
// the whole sequences (docs/semantics.md, "Ring attention"): masks and ALiBi use global positions.
//
// Blocks are computed by the CPU backend, or by any BlockBackend (e.g. the GPU through host
// staging, flashattn/ring_gpu.hpp); the transport is MPI (ring_mpi.hpp) or any Transport.
//
// Supported options: scale, causal, window_left/right, diagonal_offset, softcap, ALiBi, GQA/MQA,
// sinks (forward and dsinks), dv != d. Rejected with a flashattn::Error on every rank: seqlens_k,
// varlen (cu_seqlens_q/k), paged K/V (block_table) and the KV-cache append.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashattn/args.hpp"
#include "flashattn/cpu.hpp"

namespace flashattn::ring {

// How the global sequence is cut into the ranks' shards (queries and keys alike).
enum class Sharding : uint8_t {
  // Rank r holds rows [Σ_{s<r} n_s, Σ_{s≤r} n_s) of the sequence, n_r its shard's rows.
  contiguous,
  // The sequence is cut into 2R chunks; rank r holds chunk r (the first ceil(n_r / 2) rows of its
  // shard) followed by chunk 2R-1-r (the remaining floor(n_r / 2) rows), so that under a causal
  // mask every rank has the same work (ring-flash-attn's "zigzag"). shard_rows() gives the split.
  zigzag,
};

// How the ring computes one block: a single-process call whose views are host memory (the ring's
// buffers and row slices of the caller's tensors). The block's diagonal_offset places it in the
// global sequences; a backward block's lse is the global row's, so P = exp(S − lse) must not be
// renormalised over the block. flashattn/ring_gpu.hpp has a GPU one.
class BlockBackend {
 public:
  virtual ~BlockBackend() = default;
  // Returns why this backend cannot compute blocks of a call like `a` (this rank's shard), or ""
  // when it can. Checked with the ranks' agreement, before any data moves: a block that threw
  // half-way would leave the other ranks waiting.
  virtual std::string unsupported(const AttentionArgs& a) const = 0;
  virtual void forward(const ForwardArgs& block) = 0;
  virtual void backward(const BackwardArgs& block) = 0;
};

struct Options {
  Sharding sharding = Sharding::contiguous;
  cpu::Config cpu;                  // the CPU calls that compute each block (when backend is null)
  BlockBackend* backend = nullptr;  // null: flashattn::cpu with `cpu` (backward: renormalize off)
};

// The global rows held by one rank: one range (contiguous) or two (zigzag, in the shard's order).
struct ShardRows {
  int64_t begin[2] = {0, 0};
  int64_t count[2] = {0, 0};
  int parts = 1;
  int64_t rows() const { return count[0] + (parts > 1 ? count[1] : 0); }
};

// Returns the rows of a sequence of `length` rows that rank `rank` of `ranks` holds under the
// standard near-equal split (contiguous: lengths differ by at most 1, the first ranks longer;
// zigzag: the 2R chunks differ by at most 1, the first chunks longer). A helper for callers that
// shard a sequence they hold whole; forward/backward accept any shard lengths.
ShardRows shard_rows(int64_t length, int ranks, int rank, Sharding sharding);

// The ring's communication: point-to-point shifts along the ring and one all-gather. Channels
// 0 and 1 may be in flight at the same time (K/V blocks and gradient accumulators).
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts sending send_bytes from `send` to rank + 1 and receiving recv_bytes into `recv` from
  // rank - 1 (mod size) on `channel`; the buffers stay untouched by the caller until wait().
  virtual void start_shift(int channel, const void* send, size_t send_bytes, void* recv, size_t recv_bytes) = 0;
  // Lets pending transfers progress (called between block computations); never blocks.
  virtual void progress() = 0;
  // Completes the shift started on `channel`.
  virtual void wait(int channel) = 0;
  // Gathers `bytes` from every rank into `all` (rank r's at all + r·bytes). Blocks.
  virtual void allgather(const void* mine, void* all, size_t bytes) = 0;
};

// Where one call's time went (filled when the caller passes a Timings*; seconds on this rank).
struct Timings {
  double total = 0;    // the whole call
  double compute = 0;  // block computations, merges and accumulations
  double wait = 0;     // blocked in Transport::wait (communication not hidden by compute)
  int blocks = 0;      // (query part, key part) blocks computed
  int skipped = 0;     // blocks the mask hides entirely (never computed)
};

// Validates the shard on every rank, agrees on the call's shape and options across ranks (before
// any data moves: a rank with bad or inconsistent arguments makes every rank throw the same
// flashattn::Error), then computes this rank's out and lse (lse optional). Collective: every rank
// of `t` must call it.
void forward(const ForwardArgs& a, Transport& t, const Options& o = {}, Timings* timings = nullptr);

// As forward for the backward pass: a.out and a.lse are this rank's shard of the forward's out and
// lse; writes this rank's dq, dk, dv (dk/dv summed over every rank's queries) and, when set, dsinks
// (the same values on every rank).
void backward(const BackwardArgs& a, Transport& t, const Options& o = {}, Timings* timings = nullptr);

}  // namespace flashattn::ring
