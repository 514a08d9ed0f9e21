// flashattn-ring-bench: times flashattn::ring forward and backward under MPI against the
// single-process CPU call on the same global problem (docs/benchmarks.md, "Ring attention").
//
//   mpiexec -n 2 flashattn-ring-bench --threads 1     # the ring: 2 ranks x 1 thread
//   mpiexec -n 1 flashattn-ring-bench --threads 2     # 1 rank x 2 threads; also times cpu::forward
//
// Each rank holds its shard (the standard split of shard_rows); a timed call is bracketed by
// barriers and its time is the slowest rank's. Reports per pass: median time of --reps calls,
// GFLOP/s of the global problem (causal: the visible half), and per rank the time blocked waiting
// for the ring's messages (Timings::wait), blocks computed and skipped. With one rank it also times
// the plain cpu::forward/backward with the same threads: the ring's own overhead at R = 1.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/cpu.hpp"
#include "flashattn/ring_mpi.hpp"
#include "machine.hpp"
#include "peak.hpp"

namespace {

using flashattn::DType;
using flashattn::ring::Sharding;

struct Settings {
  int64_t batch = 1, seq = 4096, heads = 8, dim = 64;
  DType dtype = DType::f32;
  bool causal = true;
  Sharding sharding = Sharding::zigzag;
  int threads = 1, reps = 5;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "flashattn-ring-bench: %s\n"
               "usage: flashattn-ring-bench [--batch B] [--seq N] [--heads H] [--dim d] [--dtype f32|f16|bf16]\n"
               "                            [--causal 0|1] [--sharding contiguous|zigzag] [--threads T] [--reps R]\n",
               why);
  std::exit(2);
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + k).c_str());
    const std::string v = argv[++i];
    if (k == "--batch") s.batch = std::stoll(v);
    else if (k == "--seq") s.seq = std::stoll(v);
    else if (k == "--heads") s.heads = std::stoll(v);
    else if (k == "--dim") s.dim = std::stoll(v);
    else if (k == "--dtype") s.dtype = v == "f32" ? DType::f32 : v == "f16" ? DType::f16 : v == "bf16" ? DType::bf16 : (usage("bad --dtype"), DType::f32);
    else if (k == "--causal") s.causal = v != "0";
    else if (k == "--sharding") s.sharding = v == "zigzag" ? Sharding::zigzag : v == "contiguous" ? Sharding::contiguous : (usage("bad --sharding"), Sharding::zigzag);
    else if (k == "--threads") s.threads = std::stoi(v);
    else if (k == "--reps") s.reps = std::stoi(v);
    else usage(("unknown option " + k).c_str());
  }
  return s;
}

// A [B, n, H, d] tensor of normal values in the dtype.
std::vector<unsigned char> random_tensor(int64_t count, DType t, uint32_t seed) {
  std::vector<unsigned char> b(static_cast<size_t>(count) * flashattn::dtype_size(t));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < count; ++i) flashattn::store_from_float(b.data(), t, i, normal(rng));
  return b;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// Times f over reps calls (after one warm-up): median over calls of the slowest rank's time.
template <class F>
double timed(int reps, F f) {
  std::vector<double> t;
  f();
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    f();
    double mine = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(slowest);
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Settings s = parse(argc, argv);
  const DType t = s.dtype;
  const flashattn::ring::ShardRows rows = flashattn::ring::shard_rows(s.seq, ranks, rank, s.sharding);
  const int64_t n = rows.rows(), elems = s.batch * n * s.heads * s.dim;

  std::vector<unsigned char> q = random_tensor(elems, t, 1 + rank), k = random_tensor(elems, t, 101 + rank),
                             v = random_tensor(elems, t, 201 + rank), dout = random_tensor(elems, t, 301 + rank);
  std::vector<unsigned char> out(q.size()), dq(q.size()), dk(q.size()), dv(q.size());
  std::vector<float> lse(static_cast<size_t>(s.batch * s.heads * n));
  auto view = [&](std::vector<unsigned char>& b) { return flashattn::bshd(b.data(), t, s.batch, n, s.heads, s.dim); };
  flashattn::ForwardArgs f;
  f.q = view(q);
  f.k = view(k);
  f.v = view(v);
  f.out = view(out);
  f.lse = lse.data();
  f.causal = s.causal;
  flashattn::BackwardArgs b = flashattn::backward_args(f);
  b.dout = view(dout);
  b.dq = view(dq);
  b.dk = view(dk);
  b.dv = view(dv);
  flashattn::ring::Options o;
  o.sharding = s.sharding;
  o.cpu.threads = s.threads;

  flashattn::ring::Timings tf, tb;
  const double fwd = timed(s.reps, [&] { flashattn::ring::forward(f, MPI_COMM_WORLD, o, &tf); });
  const double bwd = timed(s.reps, [&] { flashattn::ring::backward(b, MPI_COMM_WORLD, o, &tb); });
  double plain_fwd = 0, plain_bwd = 0;
  if (ranks == 1) {
    plain_fwd = timed(s.reps, [&] { flashattn::cpu::forward(f, o.cpu); });
    plain_bwd = timed(s.reps, [&] { flashattn::cpu::backward(b, o.cpu); });
  }
  // Per-rank details of the last timed calls, gathered to rank 0.
  double mine[8] = {tf.total, tf.compute, tf.wait, double(tf.blocks), tb.total, tb.compute, tb.wait, double(tb.blocks)};
  std::vector<double> all(8 * ranks);
  MPI_Gather(mine, 8, MPI_DOUBLE, all.data(), 8, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  // The peak of this configuration: every rank's threads run the FMA loop at once (under
  // mpiexec's core binding, as the timed calls ran); the sum over ranks.
  MPI_Barrier(MPI_COMM_WORLD);
  const double my_peak = bench::measure_fma_peak_gflops(s.threads, 0.3);
  double peak = 0;
  MPI_Reduce(&my_peak, &peak, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);

  if (rank == 0) {
    const double flops_f = 4.0 * s.batch * s.heads * double(s.seq) * s.seq * s.dim * (s.causal ? 0.5 : 1.0);
    const double flops_b = 2.5 * flops_f;
    std::printf("# flashattn-ring-bench on %s, %d rank(s) x %d thread(s); fp32 FMA peak (all ranks' threads at once) %.0f GFLOP/s\n",
                bench::cpu_description().c_str(), ranks, s.threads, peak);
    std::printf("# B=%lld N=%lld H=%lld d=%lld %s causal=%d sharding=%s reps=%d\n", (long long)s.batch,
                (long long)s.seq, (long long)s.heads, (long long)s.dim, flashattn::dtype_name(t), s.causal ? 1 : 0,
                s.sharding == Sharding::zigzag ? "zigzag" : "contiguous", s.reps);
    std::printf("ring forward   %8.4f s  %7.1f GFLOP/s\n", fwd, flops_f / fwd * 1e-9);
    std::printf("ring backward  %8.4f s  %7.1f GFLOP/s\n", bwd, flops_b / bwd * 1e-9);
    if (ranks == 1) {
      std::printf("cpu forward    %8.4f s  %7.1f GFLOP/s  (ring/plain %.3f)\n", plain_fwd, flops_f / plain_fwd * 1e-9, fwd / plain_fwd);
      std::printf("cpu backward   %8.4f s  %7.1f GFLOP/s  (ring/plain %.3f)\n", plain_bwd, flops_b / plain_bwd * 1e-9, bwd / plain_bwd);
    }
    for (int r = 0; r < ranks; ++r) {
      const double* x = &all[8 * r];
      std::printf("rank %d: forward total %.4f compute %.4f wait %.4f blocks %.0f | backward total %.4f compute %.4f wait %.4f blocks %.0f\n",
                  r, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]);
    }
    std::printf("csv,%d,%d,%lld,%lld,%lld,%s,%d,%s,%.6f,%.6f,%.6f,%.6f,%.0f\n", ranks, s.threads, (long long)s.seq,
                (long long)s.heads, (long long)s.dim, flashattn::dtype_name(t), s.causal ? 1 : 0,
                s.sharding == Sharding::zigzag ? "zigzag" : "contiguous", fwd, bwd, plain_fwd, plain_bwd, peak);
  }
  MPI_Finalize();
  return 0;
}
