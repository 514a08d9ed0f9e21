// Ring attention backward (flashattn/ring.hpp), as ring-flash-attn: K/V blocks travel the ring one
// step ahead of the compute; each block's fp32 dK/dV accumulator travels one step behind it,
// gathering every rank's contribution, and after the last step lands on the block's owner. dQ
// accumulates locally. The summation orders are fixed (the accumulator of rank o's block adds the
// contributions of ranks o, o+1, ...), so the bits depend only on the rank count.
#include <algorithm>
#include <vector>

#include "flashattn/problem.hpp"
#include "step.hpp"

namespace flashattn::ring {
namespace {

using namespace detail;

// dsinks: this rank's rows' sums (add_sink_gradients, fp64), then summed over the ranks in rank
// order: every rank writes the same values.
void sink_gradients(const BackwardArgs& a, Transport& t) {
  const int64_t H = a.q.heads;
  std::vector<double> mine(H, 0.0), all(static_cast<size_t>(H) * t.size());
  add_sink_gradients(a, mine.data());
  t.allgather(mine.data(), all.data(), sizeof(double) * H);
  for (int64_t h = 0; h < H; ++h) {
    double s = 0;
    for (int r = 0; r < t.size(); ++r) s += all[r * H + h];
    a.dsinks[h] = static_cast<float>(s);
  }
}

// The fp32 dK then dV of one rank's shard, laid out like KvRing's blocks.
struct GradBlock {
  Tensor dk, dv;
};

GradBlock grad_views(std::vector<float>& buf, const BackwardArgs& a, int64_t rows) {
  const int64_t B = a.q.batch, H = a.k.heads;
  return {bshd(buf.data(), DType::f32, B, rows, H, a.k.dim),
          bshd(buf.data() + B * rows * H * a.k.dim, DType::f32, B, rows, H, a.v.dim)};
}

}  // namespace

void backward(const BackwardArgs& a, Transport& t, const Options& o, Timings* timings) {
  const Stopwatch total;
  Timings time;
  const RingCall call = start_call(a, t, o);
  const Layout& layout = call.layout;
  const int R = call.ranks, me = call.me;
  const DType dt = a.q.dtype;
  const int64_t B = a.q.batch, Hq = a.q.heads, Hk = a.k.heads, d = a.q.dim, dv = a.v.dim;

  // dQ in fp32, and per query part its LSE rows and a dQ block in the input dtype.
  Dense dq_acc(DType::f32, B, a.q.seq, Hq, d);
  const int threads = element_threads(o);
  zero(dq_acc.view, threads);
  const std::vector<Part>& parts = layout.q_parts(me);
  std::vector<std::vector<float>> part_lse;
  std::vector<Dense> part_dq;
  for (const Part& qp : parts) {
    part_lse.emplace_back(B * Hq * qp.count);
    lse_gather(a.lse, B * Hq, a.q.seq, qp.local, qp.count, part_lse.back().data());
    part_dq.emplace_back(dt, B, qp.count, Hq, d);
  }
  // The block's dK/dV in the input dtype (sized for the longest key part), this rank's fp32
  // contribution to the held block, and the two travelling accumulators.
  int64_t most_k = 1;
  for (int r = 0; r < R; ++r) most_k = std::max(most_k, layout.shard_k(r));
  Dense block_dk(dt, B, most_k, Hk, d), block_dv(dt, B, most_k, Hk, dv);
  auto grad_floats = [&](int r) { return B * layout.shard_k(r) * Hk * (d + dv); };
  std::vector<float> contribution(B * most_k * Hk * (d + dv)), travelling[2] = {contribution, contribution};
  int acc = 0;  // travelling[acc]: the accumulator of the held block once received

  KvRing kv(a, layout, me, threads);
  Blocks blocks(o);
  for (int step = 0; step < R; ++step) {
    const int held = (me - step + R) % R;
    if (step + 1 < R) kv.start(t, held);
    const Stopwatch compute;
    const GradBlock mine = grad_views(contribution, a, layout.shard_k(held));
    zero(mine.dk, threads);
    zero(mine.dv, threads);
    for (size_t p = 0; p < parts.size(); ++p) {
      for (const Part& kp : layout.k_parts(held)) {
        BackwardArgs b = block_args(a, layout, parts[p], kp, kv.k(held), kv.v(held));
        if (block_hidden(b)) {
          ++time.skipped;
          continue;
        }
        b.out = rows(a.out, parts[p].local, parts[p].count);
        b.dout = rows(a.dout, parts[p].local, parts[p].count);
        b.lse = part_lse[p].data();
        b.dq = part_dq[p].view;
        b.dk = rows(block_dk.view, 0, kp.count);
        b.dv = rows(block_dv.view, 0, kp.count);
        blocks.backward(b);
        accumulate(b.dq, rows(dq_acc.view, parts[p].local, parts[p].count), threads);
        accumulate(b.dk, rows(mine.dk, kp.local, kp.count), threads);
        accumulate(b.dv, rows(mine.dv, kp.local, kp.count), threads);
        ++time.blocks;
        t.progress();
      }
    }
    time.compute += compute.seconds();
    // Add this rank's contribution to the held block's accumulator (received from rank me-1 while
    // computing; the owner starts it) and pass it on.
    if (step > 0) timed_wait(t, 1, time);
    const int64_t n = grad_floats(held);
    if (step == 0)
      std::copy(contribution.begin(), contribution.begin() + n, travelling[acc].begin());
    else
      for (int64_t i = 0; i < n; ++i) travelling[acc][i] += contribution[i];
    if (R > 1) {
      const int next = (held - 1 + R) % R;  // the block received next: held now by rank me-1
      t.start_shift(1, travelling[acc].data(), sizeof(float) * n, travelling[1 - acc].data(),
                    sizeof(float) * grad_floats(next));
      acc = 1 - acc;
    }
    if (step + 1 < R) kv.finish(t, time);
  }
  if (R > 1) timed_wait(t, 1, time);  // this rank's own block, with every rank's contribution

  const GradBlock own = grad_views(travelling[acc], a, layout.shard_k(me));
  convert(own.dk, a.dk, threads);
  convert(own.dv, a.dv, threads);
  convert(dq_acc.view, a.dq, threads);
  if (a.dsinks) sink_gradients(a, t);
  time.total = total.seconds();
  if (timings) *timings = time;
}

}  // namespace flashattn::ring
