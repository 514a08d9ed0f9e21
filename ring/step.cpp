// Shared parts of the ring's forward and backward (step.hpp).
#include "step.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include <omp.h>

namespace flashattn::ring::detail {

int element_threads(const Options& o) { return o.cpu.threads > 0 ? o.cpu.threads : omp_get_max_threads(); }

KvRing::KvRing(const AttentionArgs& a, const Layout& layout, int me, int threads)
    : dtype_(a.q.dtype), batch_(a.q.batch), heads_(a.k.heads), dim_(a.k.dim), dim_v_(a.v.dim), layout_(layout) {
  size_t most = 0;
  for (int r = 0; r < layout.ranks(); ++r) most = std::max(most, bytes(r));
  for (auto& b : buf_) b.resize(std::max<size_t>(most, 1));
  copy(a.k, view(0, me, false), threads);
  copy(a.v, view(0, me, true), threads);
}

Tensor KvRing::view(int b, int r, bool value) {
  const int64_t n = layout_.shard_k(r);
  unsigned char* base = buf_[b].data();
  return value ? bshd(base + dense_bytes(dtype_, batch_, n, heads_, dim_), dtype_, batch_, n, heads_, dim_v_)
               : bshd(base, dtype_, batch_, n, heads_, dim_);
}

size_t KvRing::bytes(int r) const {
  const int64_t n = layout_.shard_k(r);
  return dense_bytes(dtype_, batch_, n, heads_, dim_) + dense_bytes(dtype_, batch_, n, heads_, dim_v_);
}

ConstTensor KvRing::k(int r) { return view(cur_, r, false); }

ConstTensor KvRing::v(int r) { return view(cur_, r, true); }

void KvRing::start(Transport& t, int held) {
  const int R = layout_.ranks();
  t.start_shift(0, buf_[cur_].data(), bytes(held), buf_[1 - cur_].data(), bytes((held - 1 + R) % R));
}

void KvRing::finish(Transport& t, Timings& time) {
  timed_wait(t, 0, time);
  cur_ = 1 - cur_;
}

Blocks::Blocks(const Options& o) : backend_(o.backend), forward_config_(o.cpu), backward_config_(o.cpu) {
  backward_config_.renormalize = false;
}

void Blocks::forward(const ForwardArgs& b) {
  if (backend_)
    backend_->forward(b);
  else
    cpu::forward(b, forward_config_);
}

void Blocks::backward(const BackwardArgs& b) {
  if (backend_)
    backend_->backward(b);
  else
    cpu::backward(b, backward_config_);
}

void timed_wait(Transport& t, int channel, Timings& time) {
  const Stopwatch w;
  t.wait(channel);
  time.wait += w.seconds();
}

void lse_gather(const float* whole, int64_t batch_heads, int64_t n, int64_t start, int64_t count, float* part) {
  for (int64_t bh = 0; bh < batch_heads; ++bh) std::copy(whole + bh * n + start, whole + bh * n + start + count, part + bh * count);
}

void lse_scatter(const float* part, int64_t batch_heads, int64_t n, int64_t start, int64_t count, float* whole) {
  for (int64_t bh = 0; bh < batch_heads; ++bh) std::copy(part + bh * count, part + (bh + 1) * count, whole + bh * n + start);
}

}  // namespace flashattn::ring::detail
