// flashattn-block-sparse-bench: how the CPU backend's time scales with a block-sparse mask's density
// (docs/semantics.md, "Block-sparse masks"; docs/benchmarks.md). For each pattern and density it
// first checks a small instance of the pattern against the fp64 oracle (tolerance rule, forward and
// backward), then times cpu::forward and cpu::backward at the benchmark size with the block mask
// and without any mask (the dense call), and reports
//   density rho = listed blocks / all blocks (the work a backend that skips unlisted blocks does),
//   t / t_dense and the ratio (t / t_dense) / rho (the target: <= 1.25 for rho >= 10 %).
// Patterns (block_q = block_k = --block):
//   random   each block listed full with probability rho (per head);
//   banded   the diagonal band of blocks |qb - kb| <= w, w chosen for rho;
//   document causal attention inside documents of random lengths (mean --doc-len): blocks inside
//            one document full, blocks a document boundary or the diagonal cuts partial with bits;
//   global   --global-tokens global keys (every row sees them) and rows that see them, plus a
//            sliding window of blocks of half-width w chosen for rho.
// The machine's fp32 FMA peak is measured before and after; times are medians of --reps calls.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "flashattn/block_mask_build.hpp"
#include "flashattn/convert.hpp"
#include "flashattn/cpu.hpp"
#include "flashattn/reference.hpp"
#include "machine.hpp"
#include "peak.hpp"
#include "tolerance/judge.hpp"

namespace {

using flashattn::DType;

struct Settings {
  int64_t seq = 4096, heads = 8, dim = 128, block = 128, check_seq = 384, doc_len = 512, global_tokens = 128;
  DType dtype = DType::f32;
  int threads = 0, reps = 3;
  std::vector<std::string> patterns = {"random", "banded", "document", "global"};
  std::vector<double> densities = {0.1, 0.25, 0.5};
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "flashattn-block-sparse-bench: %s\n"
               "usage: flashattn-block-sparse-bench [--seq N] [--heads H] [--dim d] [--dtype f32|f16|bf16] [--block b]\n"
               "         [--patterns random,banded,document,global] [--densities 0.1,0.25,0.5] [--threads T]\n"
               "         [--reps R] [--check-seq n] [--doc-len L] [--global-tokens G]\n",
               why);
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> r;
  size_t b = 0;
  for (size_t e; (e = s.find(',', b)) != std::string::npos; b = e + 1) r.push_back(s.substr(b, e - b));
  r.push_back(s.substr(b));
  return r;
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + k).c_str());
    const std::string v = argv[++i];
    if (k == "--seq") s.seq = std::stoll(v);
    else if (k == "--heads") s.heads = std::stoll(v);
    else if (k == "--dim") s.dim = std::stoll(v);
    else if (k == "--block") s.block = std::stoll(v);
    else if (k == "--check-seq") s.check_seq = std::stoll(v);
    else if (k == "--doc-len") s.doc_len = std::stoll(v);
    else if (k == "--global-tokens") s.global_tokens = std::stoll(v);
    else if (k == "--threads") s.threads = std::stoi(v);
    else if (k == "--reps") s.reps = std::stoi(v);
    else if (k == "--dtype") s.dtype = v == "f32" ? DType::f32 : v == "f16" ? DType::f16 : v == "bf16" ? DType::bf16 : (usage("bad --dtype"), DType::f32);
    else if (k == "--patterns") s.patterns = split(v);
    else if (k == "--densities") {
      s.densities.clear();
      for (const std::string& d : split(v)) s.densities.push_back(std::stod(d));
    } else usage(("unknown option " + k).c_str());
  }
  return s;
}

// The visibility predicate of a pattern at sequence length n, block size b, target density rho
// (the same for every head but `random`, which draws per head).
flashattn::VisibleFn pattern(const std::string& name, int64_t n, int64_t b, double rho, const Settings& s) {
  const int64_t nb = (n + b - 1) / b;
  if (name == "random") {
    auto listed = std::make_shared<std::vector<uint8_t>>();
    std::mt19937 rng(1234);
    std::bernoulli_distribution coin(rho);
    listed->resize(static_cast<size_t>(s.heads * nb * nb));
    for (auto& x : *listed) x = coin(rng);
    return [listed, nb, b](int64_t, int64_t h, int64_t i, int64_t j) { return (*listed)[(h * nb + i / b) * nb + j / b] != 0; };
  }
  if (name == "banded") {
    // 2w + 1 of nb blocks per row (less at the edges): w = rho·nb/2 about.
    const int64_t w = std::max<int64_t>(0, std::llround((rho * nb - 1) / 2));
    return [w, b](int64_t, int64_t, int64_t i, int64_t j) { return std::llabs(i / b - j / b) <= w; };
  }
  if (name == "document") {
    // Causal inside documents; the density follows from the lengths (rho is not used).
    auto doc = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(n));
    std::mt19937 rng(99);
    std::uniform_int_distribution<int64_t> len(s.doc_len / 2, s.doc_len * 3 / 2);
    for (int64_t i = 0, d = 0; i < n; ++d)
      for (int64_t e = std::min(n, i + len(rng)); i < e; ++i) (*doc)[i] = static_cast<int32_t>(d);
    return [doc](int64_t, int64_t, int64_t i, int64_t j) { return j <= i && (*doc)[i] == (*doc)[j]; };
  }
  if (name == "global") {
    // Global tokens (first G keys for every row, every key for the first G rows) and a window of
    // blocks of half-width w around the diagonal.
    const int64_t g = s.global_tokens;
    const int64_t w = std::max<int64_t>(0, std::llround((rho * nb - 1) / 2));
    return [g, w, b](int64_t, int64_t, int64_t i, int64_t j) { return i < g || j < g || std::llabs(i / b - j / b) <= w; };
  }
  usage(("unknown pattern " + name).c_str());
}

// The tensors of one problem [1, n, H, d] and its outputs.
struct Problem {
  int64_t n, heads, dim;
  DType dtype;
  std::vector<unsigned char> q, k, v, out, dout, dq, dk, dv;
  std::vector<float> lse;

  Problem(int64_t n_, int64_t h, int64_t d, DType t) : n(n_), heads(h), dim(d), dtype(t) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const size_t count = static_cast<size_t>(n * h * d), es = flashattn::dtype_size(t);
    for (auto* b : {&q, &k, &v, &dout}) {
      b->resize(count * es);
      for (size_t i = 0; i < count; ++i) flashattn::store_from_float(b->data(), t, static_cast<int64_t>(i), normal(rng));
    }
    for (auto* b : {&out, &dq, &dk, &dv}) b->assign(count * es, 0);
    lse.assign(static_cast<size_t>(n * h), 0.0f);
  }
  flashattn::ForwardArgs forward() {
    flashattn::ForwardArgs a;
    a.q = flashattn::bshd(static_cast<const void*>(q.data()), dtype, 1, n, heads, dim);
    a.k = flashattn::bshd(static_cast<const void*>(k.data()), dtype, 1, n, heads, dim);
    a.v = flashattn::bshd(static_cast<const void*>(v.data()), dtype, 1, n, heads, dim);
    a.out = flashattn::bshd(static_cast<void*>(out.data()), dtype, 1, n, heads, dim);
    a.lse = lse.data();
    return a;
  }
  flashattn::BackwardArgs backward(const flashattn::ForwardArgs& f) {
    flashattn::BackwardArgs g = flashattn::backward_args(f);
    g.dout = flashattn::bshd(static_cast<const void*>(dout.data()), dtype, 1, n, heads, dim);
    g.dq = flashattn::bshd(static_cast<void*>(dq.data()), dtype, 1, n, heads, dim);
    g.dk = flashattn::bshd(static_cast<void*>(dk.data()), dtype, 1, n, heads, dim);
    g.dv = flashattn::bshd(static_cast<void*>(dv.data()), dtype, 1, n, heads, dim);
    return g;
  }
};

// Builds the block mask of a pattern for a problem of n rows (per head only for `random`).
flashattn::BlockMaskBuffers build(const std::string& name, int64_t n, double rho, const Settings& s) {
  const int64_t heads = name == "random" ? s.heads : 1;
  return flashattn::block_mask_from_predicate(1, heads, n, n, s.block, s.block, pattern(name, n, s.block, rho, s));
}

double seconds_of(const std::function<void()>& f, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Checks a small instance of the pattern against the oracle; returns "" or the first failure.
std::string check_small(const std::string& name, double rho, const Settings& s, const flashattn::cpu::Config& cfg) {
  Problem p(s.check_seq, 2, std::min<int64_t>(s.dim, 64), s.dtype);
  Settings small = s;
  small.heads = 2;
  small.block = std::max<int64_t>(16, s.block / 4);
  small.doc_len = std::max<int64_t>(16, s.doc_len * s.check_seq / s.seq);
  small.global_tokens = std::max<int64_t>(1, s.global_tokens * s.check_seq / s.seq);
  const flashattn::BlockMaskBuffers m = build(name, p.n, rho, small);
  flashattn::ForwardArgs f = p.forward();
  f.block_mask = m.view();
  flashattn::cpu::forward(f, cfg);
  if (std::string e = flashattn::tolerance::judge_forward(f).first_failure(); !e.empty()) return "forward: " + e;
  const flashattn::BackwardArgs g = p.backward(f);
  flashattn::cpu::backward(g, cfg);
  if (std::string e = flashattn::tolerance::judge_backward(g).first_failure(); !e.empty()) return "backward: " + e;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const Settings s = parse(argc, argv);
  flashattn::cpu::Config cfg;
  cfg.threads = s.threads;
  const int threads = s.threads > 0 ? s.threads : omp_get_max_threads();
  const double peak0 = bench::measure_fma_peak_gflops(threads, 0.5);
  std::printf("# flashattn-block-sparse-bench: %s, %d threads, fp32 FMA peak %.0f GFLOP/s (before)\n",
              bench::cpu_description().c_str(), threads, peak0);
  std::printf("# B=1 H=%lld N=%lld d=%lld %s block=%lld, cpu::forward/backward, median of %d; dense = no mask\n",
              static_cast<long long>(s.heads), static_cast<long long>(s.seq), static_cast<long long>(s.dim),
              flashattn::dtype_name(s.dtype), static_cast<long long>(s.block), s.reps);
  Problem p(s.seq, s.heads, s.dim, s.dtype);
  flashattn::ForwardArgs dense = p.forward();
  const double fwd_dense = seconds_of([&] { flashattn::cpu::forward(dense, cfg); }, s.reps);
  const flashattn::BackwardArgs dense_b = p.backward(dense);
  const double bwd_dense = seconds_of([&] { flashattn::cpu::backward(dense_b, cfg); }, s.reps);
  std::printf("dense: fwd %.1f ms, bwd %.1f ms\n", fwd_dense * 1e3, bwd_dense * 1e3);
  std::printf("%-9s %6s %8s %10s %10s %9s %9s %12s %12s\n", "pattern", "target", "rho", "fwd ms", "bwd ms", "fwd/dense",
              "bwd/dense", "fwd/(rho)", "bwd/(rho)");
  int failures = 0;
  for (const std::string& name : s.patterns)
    for (double rho : s.densities) {
      if (name == "document" && rho != s.densities.front()) continue;  // its density follows from the lengths
      if (std::string e = check_small(name, rho, s, cfg); !e.empty()) {
        std::printf("%-9s %6.2f CHECK FAILED: %s\n", name.c_str(), rho, e.c_str());
        ++failures;
        continue;
      }
      const flashattn::BlockMaskBuffers m = build(name, s.seq, rho, s);
      const int64_t nb = (s.seq + s.block - 1) / s.block;
      const double density = static_cast<double>(m.listed()) / static_cast<double>(m.heads * nb * nb);
      flashattn::ForwardArgs f = p.forward();
      f.block_mask = m.view();
      const double fwd = seconds_of([&] { flashattn::cpu::forward(f, cfg); }, s.reps);
      const flashattn::BackwardArgs g = p.backward(f);
      const double bwd = seconds_of([&] { flashattn::cpu::backward(g, cfg); }, s.reps);
      std::printf("%-9s %6.2f %8.3f %10.1f %10.1f %9.3f %9.3f %12.2f %12.2f\n", name.c_str(), name == "document" ? 0.0 : rho,
                  density, fwd * 1e3, bwd * 1e3, fwd / fwd_dense, bwd / bwd_dense, fwd / fwd_dense / density,
                  bwd / bwd_dense / density);
    }
  const double peak1 = bench::measure_fma_peak_gflops(threads, 0.5);
  std::printf("# fp32 FMA peak %.0f GFLOP/s (after)\n", peak1);
  return failures ? 1 : 0;
}
