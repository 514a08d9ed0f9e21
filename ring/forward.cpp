// Ring attention forward (flashattn/ring.hpp): each rank's queries meet every rank's K/V block in
// turn; block results are merged into fp32 accumulators by LSE in a fixed order (own block first,
// then the blocks of ranks me-1, me-2, ...), so the bits depend only on the rank count.
#include <cmath>
#include <limits>
#include <vector>

#include "flashattn/merge.hpp"
#include "step.hpp"

namespace flashattn::ring {
namespace {

using namespace detail;

// The fp32 result of one query part so far, and the scratch its blocks are computed into.
struct PartResult {
  Dense acc;                // fp32 [B, rows, Hq, dv]
  std::vector<float> lse;   // [B, Hq, rows]
  Dense block_out, wide;    // the block's out (input dtype) and its fp32 copy (16-bit inputs)
  std::vector<float> block_lse;
};

// Starts a part's result as the empty row, or as the sinks alone (O = 0, LSE = sink: merging the
// blocks into it adds exp(sink) to every row's denominator exactly once).
PartResult start_part(const ForwardArgs& a, int64_t rows, int threads) {
  const int64_t B = a.q.batch, H = a.q.heads, dv = a.v.dim;
  // fp32 blocks are merged from block_out directly; 16-bit ones through their fp32 copy `wide`.
  const bool widen = a.q.dtype != DType::f32;
  PartResult p{Dense(DType::f32, B, rows, H, dv), std::vector<float>(B * H * rows), Dense(a.q.dtype, B, rows, H, dv),
               widen ? Dense(DType::f32, B, rows, H, dv) : Dense(), std::vector<float>(B * H * rows)};
  zero(p.acc.view, threads);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < rows; ++i)
        p.lse[(b * H + h) * rows + i] = a.sinks ? a.sinks[h] : -std::numeric_limits<float>::infinity();
  return p;
}

}  // namespace

void forward(const ForwardArgs& a, Transport& t, const Options& o, Timings* timings) {
  const Stopwatch total;
  Timings time;
  const RingCall call = start_call(a, t, o);
  const Layout& layout = call.layout;
  const int R = call.ranks, me = call.me;

  const std::vector<Part>& parts = layout.q_parts(me);
  std::vector<PartResult> results;
  const int threads = element_threads(o);
  for (const Part& qp : parts) results.push_back(start_part(a, qp.count, threads));
  KvRing kv(a, layout, me, threads);
  Blocks blocks(o);

  for (int step = 0; step < R; ++step) {
    const int held = (me - step + R) % R;  // whose K/V block is current
    if (step + 1 < R) kv.start(t, held);
    const Stopwatch compute;
    for (size_t p = 0; p < parts.size(); ++p) {
      PartResult& r = results[p];
      for (const Part& kp : layout.k_parts(held)) {
        ForwardArgs b = block_args(a, layout, parts[p], kp, kv.k(held), kv.v(held));
        if (block_hidden(b)) {
          ++time.skipped;
          continue;
        }
        b.out = r.block_out.view;
        b.lse = r.block_lse.data();
        b.num_splits = a.num_splits;
        blocks.forward(b);
        const bool widen = a.q.dtype != DType::f32;
        if (widen) convert(r.block_out.view, r.wide.view, threads);
        merge(r.acc.view, r.lse.data(), widen ? r.wide.view : r.block_out.view, r.block_lse.data(), r.acc.view,
              r.lse.data());
        ++time.blocks;
        t.progress();
      }
    }
    time.compute += compute.seconds();
    if (step + 1 < R) kv.finish(t, time);
  }

  const int64_t bh = a.q.batch * a.q.heads;
  for (size_t p = 0; p < parts.size(); ++p) {
    convert(results[p].acc.view, rows(a.out, parts[p].local, parts[p].count), threads);
    if (a.lse) lse_scatter(results[p].lse.data(), bh, a.q.seq, parts[p].local, parts[p].count, a.lse);
  }
  time.total = total.seconds();
  if (timings) *timings = time;
}

}  // namespace flashattn::ring
