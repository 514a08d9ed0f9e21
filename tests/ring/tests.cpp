// Ring attention under MPI (run by ctest with 1-4 ranks): every rank builds the same global
// problem, runs flashattn::ring on its shard, and rank 0 judges the gathered results against the
// fp64 oracle with the tolerance rule (props/tolerance.hpp), beside the single-process CPU call.
// Also: repeated calls and other thread counts give the same bits; bad or inconsistent arguments
// make every rank throw the same flashattn::Error before anything is written, and nothing hangs.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/cpu.hpp"
#include "flashattn/error.hpp"
#include "flashattn/ring_mpi.hpp"
#include "tolerance/judge.hpp"
#ifdef FLASHATTN_RING_TEST_GPU_EMU
#include "emu/emu_api.hpp"
#endif

namespace {

using flashattn::ConstTensor;
using flashattn::DType;
using flashattn::Tensor;
using flashattn::ring::Sharding;

int g_rank = 0, g_ranks = 1, g_checks = 0, g_failures = 0;

void check(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", g_rank, what.c_str());
  }
}

struct RingCase {
  std::string name;
  Sharding sharding = Sharding::contiguous;
  DType dtype = DType::f32;
  int64_t batch = 1, seqlen_q = 40, seqlen_k = 40, heads_q = 2, heads_k = 2, dim = 16, dim_v = 16;
  bool causal = false;
  int64_t window_left = -1, window_right = -1, diagonal_offset = 0;
  float softcap = 0;
  bool alibi = false, sinks = false;
  bool uneven = false;  // shard lengths proportional to rank + 1 instead of the standard split
  bool bhsd = false;    // the ranks' local tensors in the bhsd layout
  bool gpu = false;     // blocks by the GPU kernels (host emulator) instead of the CPU backend
};

#ifdef FLASHATTN_RING_TEST_GPU_EMU
// The GPU kernels as the ring's block backend, run by the host emulator on host memory: the same
// kernels GpuStaging launches on a device.
class EmulatedGpuBlocks final : public flashattn::ring::BlockBackend {
 public:
  std::string unsupported(const flashattn::AttentionArgs& a) const override {
    return flashattn::gpu_emu::unsupported(a.q.dtype, a.q.dim, a.v.dim, true);
  }
  void forward(const flashattn::ForwardArgs& b) override { flashattn::gpu_emu::forward(b); }
  void backward(const flashattn::BackwardArgs& b) override { flashattn::gpu_emu::backward(b, true); }
};
EmulatedGpuBlocks g_gpu_blocks;
#endif

// A global tensor [B, N, H, D] held as fp32 values exactly representable in the case's dtype.
struct Global {
  int64_t batch, seq, heads, dim;
  std::vector<float> x;
  float& at(int64_t b, int64_t s, int64_t h, int64_t i) { return x[((b * seq + s) * heads + h) * dim + i]; }
};

Global random_tensor(int64_t b, int64_t n, int64_t h, int64_t d, DType t, uint32_t seed) {
  Global g{b, n, h, d, std::vector<float>(static_cast<size_t>(b * n * h * d))};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : g.x) v = flashattn::round_to(t, normal(rng));
  return g;
}

// Storage of one tensor in a dtype, with a view in bshd or bhsd layout.
struct Stored {
  std::vector<unsigned char> bytes;
  Tensor view;
};

Stored store(const Global& g, int64_t rows, const std::function<int64_t(int64_t)>& global_row, DType t, bool bhsd) {
  Stored s;
  s.bytes.assign(static_cast<size_t>(g.batch * rows * g.heads * g.dim) * flashattn::dtype_size(t), 0);
  s.view = bhsd ? flashattn::bhsd(s.bytes.data(), t, g.batch, rows, g.heads, g.dim)
                : flashattn::bshd(s.bytes.data(), t, g.batch, rows, g.heads, g.dim);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < g.heads; ++h)
        for (int64_t i = 0; i < g.dim; ++i)
          flashattn::store_from_float(s.view.data, t, s.view.offset(b, r, h) + i,
                                      const_cast<Global&>(g).at(b, global_row(r), h, i));
  return s;
}

// The global rows of this rank's shard, in the shard's order, for shard lengths n (zigzag: first
// ceil(n_r / 2) rows are chunk r, the rest chunk 2R-1-r) — written independently of the library.
std::vector<int64_t> shard_global_rows(const std::vector<int64_t>& n, Sharding sharding, int rank) {
  const int R = static_cast<int>(n.size());
  std::vector<int64_t> rows;
  if (sharding == Sharding::contiguous) {
    int64_t start = 0;
    for (int r = 0; r < rank; ++r) start += n[r];
    for (int64_t i = 0; i < n[rank]; ++i) rows.push_back(start + i);
    return rows;
  }
  std::vector<int64_t> chunk(2 * R), begin(2 * R + 1, 0);
  for (int r = 0; r < R; ++r) {
    chunk[r] = (n[r] + 1) / 2;
    chunk[2 * R - 1 - r] = n[r] / 2;
  }
  for (int c = 0; c < 2 * R; ++c) begin[c + 1] = begin[c] + chunk[c];
  for (int c : {rank, 2 * R - 1 - rank})
    for (int64_t i = 0; i < chunk[c]; ++i) rows.push_back(begin[c] + i);
  return rows;
}

std::vector<int64_t> shard_lengths(int64_t total, const RingCase& c) {
  std::vector<int64_t> n(g_ranks);
  if (!c.uneven) {
    for (int r = 0; r < g_ranks; ++r) n[r] = flashattn::ring::shard_rows(total, g_ranks, r, c.sharding).rows();
    return n;
  }
  const int64_t w = int64_t{g_ranks} * (g_ranks + 1) / 2;
  int64_t used = 0;
  for (int r = 0; r < g_ranks; ++r) used += n[r] = total * (r + 1) / w;
  n[g_ranks - 1] += total - used;
  return n;
}

// Sums every rank's values (zero outside its rows) into rank 0's copy: the gathered global tensor.
std::vector<float> gather(std::vector<float> mine) {
  std::vector<float> all(mine.size());
  MPI_Reduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  return all;
}

// Scatters a local [B, rows, H, D] view's values into a zeroed global [B, N, H, D] array.
std::vector<float> place(const ConstTensor& local, const std::vector<int64_t>& rows, int64_t n_global) {
  std::vector<float> g(static_cast<size_t>(local.batch * n_global * local.heads * local.dim), 0.0f);
  for (int64_t b = 0; b < local.batch; ++b)
    for (size_t r = 0; r < rows.size(); ++r)
      for (int64_t h = 0; h < local.heads; ++h)
        for (int64_t i = 0; i < local.dim; ++i)
          g[((b * n_global + rows[r]) * local.heads + h) * local.dim + i] =
              flashattn::load_as_float(local.data, local.dtype, local.offset(b, static_cast<int64_t>(r), h) + i);
  return g;
}

// The same for an lse array [B, H, rows] (values placed at the global rows; -inf stays -inf).
std::vector<float> place_lse(const std::vector<float>& lse, int64_t bh, const std::vector<int64_t>& rows, int64_t n) {
  std::vector<float> g(static_cast<size_t>(bh * n), 0.0f);
  for (int64_t k = 0; k < bh; ++k)
    for (size_t r = 0; r < rows.size(); ++r) g[k * n + rows[r]] = lse[k * rows.size() + r];  // (lse may be padded)
  return g;
}

Stored from_values(const std::vector<float>& x, DType t, int64_t b, int64_t n, int64_t h, int64_t d) {
  Stored s;
  s.bytes.assign(x.size() * flashattn::dtype_size(t), 0);
  s.view = flashattn::bshd(s.bytes.data(), t, b, n, h, d);
  for (size_t i = 0; i < x.size(); ++i) flashattn::store_from_float(s.view.data, t, static_cast<int64_t>(i), x[i]);
  return s;
}

flashattn::ForwardArgs forward_of(const Stored& q, const Stored& k, const Stored& v, const Stored& out, float* lse) {
  flashattn::ForwardArgs f;
  f.q = q.view;
  f.k = k.view;
  f.v = v.view;
  f.out = out.view;
  f.lse = lse;
  return f;
}

std::string judged(const flashattn::tolerance::Judgement& j) { return j.passed() ? "" : j.first_failure(); }

void run_case(const RingCase& c) {
  const DType t = c.dtype;
  const Global q = random_tensor(c.batch, c.seqlen_q, c.heads_q, c.dim, t, 11);
  const Global k = random_tensor(c.batch, c.seqlen_k, c.heads_k, c.dim, t, 12);
  const Global v = random_tensor(c.batch, c.seqlen_k, c.heads_k, c.dim_v, t, 13);
  const Global dout = random_tensor(c.batch, c.seqlen_q, c.heads_q, c.dim_v, t, 14);
  std::vector<float> slopes(c.heads_q), sinks(c.heads_q);
  for (int64_t h = 0; h < c.heads_q; ++h) {
    slopes[h] = std::exp2(-8.0f * (h + 1) / c.heads_q);
    sinks[h] = 0.5f * static_cast<float>(h) - 0.3f;
  }
  auto options = [&](flashattn::AttentionArgs& a) {
    a.causal = c.causal;
    a.window_left = c.window_left;
    a.window_right = c.window_right;
    a.diagonal_offset = c.diagonal_offset;
    a.softcap = c.softcap;
    if (c.alibi) a.alibi_slopes = slopes.data();
    if (c.sinks) a.sinks = sinks.data();
  };

  // This rank's shard.
  const std::vector<int64_t> nq = shard_lengths(c.seqlen_q, c), nk = shard_lengths(c.seqlen_k, c);
  const std::vector<int64_t> qrows = shard_global_rows(nq, c.sharding, g_rank), krows = shard_global_rows(nk, c.sharding, g_rank);
  auto qmap = [&](int64_t r) { return qrows[r]; };
  auto kmap = [&](int64_t r) { return krows[r]; };
  const int64_t mq = nq[g_rank], mk = nk[g_rank];
  Stored lq = store(q, mq, qmap, t, c.bhsd), lk = store(k, mk, kmap, t, c.bhsd), lv = store(v, mk, kmap, t, c.bhsd),
         ldo = store(dout, mq, qmap, t, c.bhsd);
  Stored lout = store(Global{c.batch, mq, c.heads_q, c.dim_v, std::vector<float>(c.batch * mq * c.heads_q * c.dim_v)},
                      mq, [](int64_t r) { return r; }, t, c.bhsd);
  std::vector<float> llse(std::max<int64_t>(1, c.batch * c.heads_q * mq));  // non-null on an empty shard
  flashattn::ForwardArgs f = forward_of(lq, lk, lv, lout, llse.data());
  options(f);
  flashattn::ring::Options o;
  o.sharding = c.sharding;
  o.cpu.threads = 1;
#ifdef FLASHATTN_RING_TEST_GPU_EMU
  if (c.gpu) o.backend = &g_gpu_blocks;
#endif

  auto grad = [&](const Global& g, int64_t rows) {
    return store(Global{g.batch, rows, g.heads, g.dim, std::vector<float>(g.batch * rows * g.heads * g.dim)}, rows,
                 [](int64_t r) { return r; }, t, c.bhsd);
  };
  Stored ldq = grad(q, mq), ldk = grad(k, mk), ldv = grad(v, mk);
  std::vector<float> dsinks(c.heads_q, 0.0f);
  auto run = [&](int threads) {
    o.cpu.threads = threads;
    flashattn::ring::forward(f, MPI_COMM_WORLD, o);
    flashattn::BackwardArgs b = flashattn::backward_args(f);
    b.dout = ldo.view;
    b.dq = ldq.view;
    b.dk = ldk.view;
    b.dv = ldv.view;
    if (c.sinks) b.dsinks = dsinks.data();
    flashattn::ring::backward(b, MPI_COMM_WORLD, o);
    std::vector<unsigned char> bits = lout.bytes;
    for (const auto* s : {&ldq.bytes, &ldk.bytes, &ldv.bytes}) bits.insert(bits.end(), s->begin(), s->end());
    const auto* l = reinterpret_cast<const unsigned char*>(llse.data());
    bits.insert(bits.end(), l, l + llse.size() * sizeof(float));
    const auto* ds = reinterpret_cast<const unsigned char*>(dsinks.data());
    bits.insert(bits.end(), ds, ds + dsinks.size() * sizeof(float));
    return bits;
  };
  const std::vector<unsigned char> first = run(1);
  check(run(1) == first, c.name + ": a repeated ring call gives the same bits");
  check(run(2) == first, c.name + ": 2 threads per rank give the same bits as 1");

  // Gather to rank 0 and judge there.
  const int64_t bh = c.batch * c.heads_q;
  const std::vector<float> out = gather(place(lout.view, qrows, c.seqlen_q));
  const std::vector<float> lse = gather(place_lse(llse, bh, qrows, c.seqlen_q));
  const std::vector<float> dq = gather(place(ldq.view, qrows, c.seqlen_q));
  const std::vector<float> dk = gather(place(ldk.view, krows, c.seqlen_k));
  const std::vector<float> dv = gather(place(ldv.view, krows, c.seqlen_k));
  if (g_rank != 0) return;

  auto whole = [&](const Global& g) { return from_values(g.x, t, g.batch, g.seq, g.heads, g.dim); };
  Stored gq = whole(q), gk = whole(k), gv = whole(v), gdo = whole(dout);
  Stored gout = from_values(out, t, c.batch, c.seqlen_q, c.heads_q, c.dim_v);
  std::vector<float> glse = lse;
  flashattn::ForwardArgs a = forward_of(gq, gk, gv, gout, glse.data());
  options(a);
  check(judged(flashattn::tolerance::judge_forward(a)).empty(), c.name + ": ring forward vs the fp64 oracle: " + judged(flashattn::tolerance::judge_forward(a)));

  Stored gdq = from_values(dq, t, c.batch, c.seqlen_q, c.heads_q, c.dim), gdk = from_values(dk, t, c.batch, c.seqlen_k, c.heads_k, c.dim),
         gdv = from_values(dv, t, c.batch, c.seqlen_k, c.heads_k, c.dim_v);
  flashattn::BackwardArgs b = flashattn::backward_args(a);
  b.dout = gdo.view;
  b.dq = gdq.view;
  b.dk = gdk.view;
  b.dv = gdv.view;
  std::vector<float> gds = dsinks;
  if (c.sinks) b.dsinks = gds.data();
  const std::string bwd = judged(flashattn::tolerance::judge_backward(b));
  check(bwd.empty(), c.name + ": ring backward vs the fp64 oracle: " + bwd);

  // The single-process CPU call on the whole problem passes the same rule (the ring's reference point).
  Stored sout = from_values(std::vector<float>(out.size()), t, c.batch, c.seqlen_q, c.heads_q, c.dim_v);
  std::vector<float> slse(glse.size());
  flashattn::ForwardArgs s = a;
  s.out = sout.view;
  s.lse = slse.data();
  flashattn::cpu::forward(s);
  check(judged(flashattn::tolerance::judge_forward(s)).empty(), c.name + ": single-process forward vs the oracle");
  double diff = 0;
  for (size_t i = 0; i < out.size(); ++i)
    diff = std::max(diff, double(std::fabs(out[i] - flashattn::load_as_float(sout.view.data, t, static_cast<int64_t>(i)))));
  std::printf("  %-44s ok, max |ring - single-process| out = %.3g\n", c.name.c_str(), diff);
}

// Runs f on every rank and checks that every rank threw a flashattn::Error containing `expect`,
// and that `untouched` still holds its bytes afterwards.
void expect_error(const std::string& name, const std::function<void()>& f, const std::string& expect,
                  const std::vector<unsigned char>& before, const std::vector<unsigned char>& after) {
  std::string got = "(no exception)";
  try {
    f();
  } catch (const flashattn::Error& e) {
    got = e.what();
  }
  check(got.find(expect) != std::string::npos, name + ": expected an error containing '" + expect + "', got '" + got + "'");
  check(before == after, name + ": the outputs were not written");
}

void error_cases() {
  const DType t = DType::f32;
  const int64_t n = 8, d = 4;
  std::vector<float> q(n * 2 * d, 0.5f), k(n * 2 * d, 0.25f), v(n * 2 * d, 1.0f), out(n * 2 * d, -7.0f), lse(2 * n, -7.0f);
  auto args = [&](int64_t heads_k) {
    flashattn::ForwardArgs f;
    f.q = flashattn::bshd(static_cast<const void*>(q.data()), t, 1, n, 2, d);
    f.k = flashattn::bshd(static_cast<const void*>(k.data()), t, 1, n, heads_k, d);
    f.v = flashattn::bshd(static_cast<const void*>(v.data()), t, 1, n, heads_k, d);
    f.out = flashattn::bshd(out.data(), t, 1, n, 2, d);
    f.lse = lse.data();
    return f;
  };
  auto bytes = [&] {
    std::vector<unsigned char> b(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<unsigned char*>(out.data() + out.size()));
    b.insert(b.end(), reinterpret_cast<unsigned char*>(lse.data()), reinterpret_cast<unsigned char*>(lse.data() + lse.size()));
    return b;
  };
  const std::vector<unsigned char> before = bytes();
  const int last = g_ranks - 1;
  if (g_ranks > 1) {
    // The last rank passes k/v with 1 head, every other rank 2: consistent locally, not across ranks.
    expect_error("inconsistent k.heads", [&] { flashattn::ring::forward(args(g_rank == last ? 1 : 2), MPI_COMM_WORLD); },
                 "ring: rank " + std::to_string(last) + " has k.heads = 1 but rank 0 has 2", before, bytes());
    expect_error("inconsistent causal", [&] {
      flashattn::ForwardArgs f = args(2);
      f.causal = g_rank == last;
      flashattn::ring::forward(f, MPI_COMM_WORLD);
    }, "has causal = 1 but rank 0 has 0", before, bytes());
  }
  expect_error("invalid window on the last rank", [&] {
    flashattn::ForwardArgs f = args(2);
    if (g_rank == last) f.window_left = -5;
    flashattn::ring::forward(f, MPI_COMM_WORLD);
  }, "ring: rank " + std::to_string(last) + ": window_left (-5) must be >= -1", before, bytes());
  std::vector<int32_t> lengths(1, static_cast<int32_t>(n));
  expect_error("seqlens_k rejected", [&] {
    flashattn::ForwardArgs f = args(2);
    f.seqlens_k = lengths.data();
    flashattn::ring::forward(f, MPI_COMM_WORLD);
  }, "ring: rank 0: seqlens_k is not supported", before, bytes());
  if (g_ranks > 1) expect_error("forward on one rank, backward on another", [&] {
    if (g_rank == last) {
      flashattn::BackwardArgs b = flashattn::backward_args(args(2));
      std::vector<float> g(n * 2 * d);
      b.dout = flashattn::bshd(static_cast<const void*>(v.data()), t, 1, n, 2, d);
      b.dq = flashattn::bshd(g.data(), t, 1, n, 2, d);
      std::vector<float> gk(n * 2 * d), gv(n * 2 * d);
      b.dk = flashattn::bshd(gk.data(), t, 1, n, 2, d);
      b.dv = flashattn::bshd(gv.data(), t, 1, n, 2, d);
      b.out = flashattn::bshd(static_cast<const void*>(q.data()), t, 1, n, 2, d);
      flashattn::ring::backward(b, MPI_COMM_WORLD);
    } else {
      flashattn::ring::forward(args(2), MPI_COMM_WORLD);
    }
  }, "has call (1 forward, 2 backward) = 2 but rank 0 has 1", before, bytes());
#ifdef FLASHATTN_RING_TEST_GPU_EMU
  expect_error("GPU blocks refuse f32", [&] {
    flashattn::ring::Options o;
    o.backend = &g_gpu_blocks;
    flashattn::ring::forward(args(2), MPI_COMM_WORLD, o);
  }, "ring: rank 0: the ring's block backend cannot compute this call", before, bytes());
#endif
}

// Returns `count` random cases (the same on every rank: a fixed seed, FLASHATTN_RING_SEED to
// explore): shapes, GQA, dims, dtypes, masks with windows and offsets, softcap, ALiBi, sinks,
// shardings, uneven shards, layouts. Sizes stay small: the oracle judges every case on rank 0.
std::vector<RingCase> random_cases(int count) {
  const char* env = std::getenv("FLASHATTN_RING_SEED");
  std::mt19937 rng(env ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 20261125u);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<RingCase> cases;
  for (int i = 0; i < count; ++i) {
    RingCase c;
    c.sharding = pick(0, 1) ? Sharding::zigzag : Sharding::contiguous;
    c.dtype = std::vector<DType>{DType::f32, DType::f16, DType::bf16}[pick(0, 2)];
    c.batch = pick(1, 2);
    c.heads_k = pick(1, 2);
    c.heads_q = c.heads_k * pick(1, 3);
    c.dim = pick(1, 40);
    c.dim_v = pick(0, 3) ? c.dim : pick(1, 40);
    c.seqlen_q = pick(0, 60);
    c.seqlen_k = pick(0, 3) ? c.seqlen_q : pick(0, 60);
    c.causal = pick(0, 1);
    if (pick(0, 2) == 0) c.window_left = pick(0, 20);
    if (pick(0, 2) == 0) c.window_right = pick(0, 20);
    if (pick(0, 3) == 0) c.diagonal_offset = pick(-30, 30);
    if (pick(0, 3) == 0) c.softcap = 4.0f;
    c.alibi = pick(0, 3) == 0;
    c.sinks = pick(0, 3) == 0;
    c.uneven = pick(0, 1);
    c.bhsd = pick(0, 1);
    c.name = "random " + std::to_string(i) + ": " + (c.sharding == Sharding::zigzag ? "zigzag " : "contiguous ") +
             flashattn::dtype_name(c.dtype) + " b=" + std::to_string(c.batch) + " hq=" + std::to_string(c.heads_q) +
             " hk=" + std::to_string(c.heads_k) + " d=" + std::to_string(c.dim) + " dv=" + std::to_string(c.dim_v) +
             " nq=" + std::to_string(c.seqlen_q) + " nk=" + std::to_string(c.seqlen_k) + " causal=" +
             std::to_string(c.causal) + " window=(" + std::to_string(c.window_left) + "," +
             std::to_string(c.window_right) + ") offset=" + std::to_string(c.diagonal_offset) +
             (c.softcap > 0 ? " softcap" : "") + (c.alibi ? " alibi" : "") + (c.sinks ? " sinks" : "") +
             (c.uneven ? " uneven" : "") + (c.bhsd ? " bhsd" : "");
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks);
  std::vector<RingCase> cases;
  auto add = [&](RingCase c) { cases.push_back(c); };
  for (Sharding s : {Sharding::contiguous, Sharding::zigzag}) {
    const std::string sh = s == Sharding::contiguous ? "contiguous" : "zigzag";
    RingCase c;
    c.sharding = s;
    c.name = sh + " f32";
    add(c);
    c.causal = true;
    c.name = sh + " f32 causal";
    add(c);
    c.dtype = DType::bf16;
    c.heads_q = 4;
    c.heads_k = 1;
    c.name = sh + " bf16 causal MQA bhsd";
    c.bhsd = true;
    add(c);
    c = RingCase{};
    c.sharding = s;
    c.dtype = DType::f16;
    c.batch = 2;
    c.seqlen_q = c.seqlen_k = 53;
    c.heads_q = 4;
    c.heads_k = 2;
    c.causal = true;
    c.uneven = true;
    c.name = sh + " f16 causal GQA uneven shards";
    add(c);
    c = RingCase{};
    c.sharding = s;
    c.window_left = 7;
    c.window_right = 3;
    c.alibi = true;
    c.softcap = 5.0f;
    c.dim_v = 24;
    c.name = sh + " f32 window+alibi+softcap dv!=d";
    add(c);
    c = RingCase{};
    c.sharding = s;
    c.causal = true;
    c.window_left = 5;
    c.sinks = true;
    c.seqlen_q = 24;
    c.seqlen_k = 61;
    c.uneven = true;
    c.name = sh + " f32 causal window sinks Nq<Nk";
    add(c);
    c = RingCase{};
    c.sharding = s;
    c.causal = true;
    c.seqlen_q = 45;
    c.seqlen_k = 30;
    c.diagonal_offset = -4;
    c.name = sh + " f32 causal Nq>Nk offset -4 (empty rows)";
    add(c);
  }
#ifdef FLASHATTN_RING_TEST_GPU_EMU
  for (Sharding s : {Sharding::contiguous, Sharding::zigzag}) {
    const std::string sh = s == Sharding::contiguous ? "contiguous" : "zigzag";
    RingCase c;
    c.gpu = true;
    c.sharding = s;
    c.dim = c.dim_v = 32;
    c.dtype = DType::bf16;
    c.causal = true;
    c.heads_q = 4;
    c.heads_k = 2;
    c.uneven = true;
    c.name = sh + " gpu-emulated bf16 causal GQA uneven";
    add(c);
    c.dtype = DType::f16;
    c.causal = false;
    c.window_left = 6;
    c.window_right = 2;
    c.alibi = true;
    c.softcap = 5.0f;
    c.sinks = true;
    c.bhsd = true;
    c.name = sh + " gpu-emulated f16 window+alibi+softcap+sinks bhsd";
    add(c);
  }
#endif
  const char* count = std::getenv("FLASHATTN_RING_RANDOM_CASES");
  for (const RingCase& c : random_cases(count ? std::atoi(count) : 24)) add(c);
  for (const RingCase& c : cases) {
    if (g_rank == 0) std::printf("case %s\n", c.name.c_str());
    try {
      run_case(c);
    } catch (const std::exception& e) {  // the ring throws on every rank alike: the tests go on
      check(false, c.name + ": threw " + e.what());
    }
  }
  error_cases();

  int failures = g_failures, all = 0, checks = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Reduce(&g_checks, &checks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf("ring tests, %d ranks: %zu cases, %d checks, %d failed\n", g_ranks, cases.size(), checks, all);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
