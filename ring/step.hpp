// What the forward and the backward share: the agreed layout, the K/V blocks travelling the ring
// (double-buffered), the block's call arguments and the time bookkeeping.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "agree.hpp"
#include "blocks.hpp"
#include "flashattn/mask.hpp"
#include "layout.hpp"

namespace flashattn::ring::detail {

// The agreed geometry of one ring call and this rank's place in it.
struct RingCall {
  Layout layout;
  int ranks, me;
};

// Seconds since construction.
class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// Agrees on the call across the ranks (agree.hpp) and returns its layout.
template <class Args>
RingCall start_call(const Args& a, Transport& t, const Options& o) {
  const Agreed agreed = agree(a, t, o);
  return RingCall{Layout(o.sharding, agreed.nq, agreed.nk), t.size(), t.rank()};
}

// Threads of the ring's element-wise passes: Options::cpu.threads, 0 meaning OpenMP's maximum.
int element_threads(const Options& o);

// Rank r's K then V shard, packed contiguous ([B, n_r, Hk, d] then [B, n_r, Hk, dv]), in two
// buffers: the one computed on and the one being received.
class KvRing {
 public:
  KvRing(const AttentionArgs& a, const Layout& layout, int me, int threads);
  size_t bytes(int r) const;                 // K and V bytes of rank r's shard
  ConstTensor k(int r);                      // views of rank r's shard in the current buffer
  ConstTensor v(int r);
  // Starts sending the current buffer (rank `held`'s shard) on and receiving rank held-1's.
  void start(Transport& t, int held);
  void finish(Transport& t, Timings& time);  // waits, then the received buffer becomes current

 private:
  // Rank r's K (value = false) or V view in buffer b.
  Tensor view(int b, int r, bool value);
  DType dtype_;
  int64_t batch_, heads_, dim_, dim_v_;
  const Layout& layout_;
  std::vector<unsigned char> buf_[2];
  int cur_ = 0;
};

// Returns the arguments of the call on query part qp and key part kp (views k, v of the part):
// the caller's options with the block's diagonal offset, no sinks (the ring adds them once).
template <class Args>
Args block_args(const Args& a, const Layout& layout, const Part& qp, const Part& kp, const ConstTensor& k,
                const ConstTensor& v) {
  Args b;
  static_cast<AttentionArgs&>(b) = a;
  b.q = rows(a.q, qp.local, qp.count);
  b.k = rows(k, kp.local, kp.count);
  b.v = rows(v, kp.local, kp.count);
  b.sinks = nullptr;
  b.diagonal_offset = layout.block_offset(qp, kp, a.diagonal_offset);
  return b;
}

// Returns whether the mask hides the whole block (it is then never computed).
inline bool block_hidden(const AttentionArgs& b) {
  const Mask m = Mask::make(b.q.seq, b.k.seq, b.causal, b.window_left, b.window_right, b.diagonal_offset);
  return m.classify(0, b.q.seq, 0, b.k.seq) == TileKind::empty;
}

// The blocks' backend: options.backend, or the CPU backend with options.cpu (the backward with
// Config::renormalize off: a block's lse is the global row's).
class Blocks {
 public:
  explicit Blocks(const Options& o);
  void forward(const ForwardArgs& b);
  void backward(const BackwardArgs& b);

 private:
  BlockBackend* backend_;
  cpu::Config forward_config_, backward_config_;
};

// Waits on a channel, adding the time blocked to time.wait.
void timed_wait(Transport& t, int channel, Timings& time);

// Copies rows [start, start + count) of every (batch, head) of an lse-like [B·H, n] array into a
// contiguous [B·H, count] one (lse_gather), or back (lse_scatter).
void lse_gather(const float* whole, int64_t batch_heads, int64_t n, int64_t start, int64_t count, float* part);
void lse_scatter(const float* part, int64_t batch_heads, int64_t n, int64_t start, int64_t count, float* whole);

}  // namespace flashattn::ring::detail
