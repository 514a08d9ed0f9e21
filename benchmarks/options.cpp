// Command-line parsing. See options.hpp and docs/benchmarks.md.
#include "options.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>

namespace bench {

namespace {

template <class T>
std::vector<T> or_default(const std::vector<T>& v, std::vector<T> d) {
  return v.empty() ? d : v;
}

}  // namespace

int parse_options(int argc, char** argv, const std::vector<std::string>& available, Options& o) {
  std::string built;
  for (const auto& a : available) built += (built.empty() ? "" : ", ") + a;
  CLI::App app{
      "flashattn-bench: checks, then times, flashattn's implementations and the standard attention baseline.\n"
      "Without problem options it runs a built-in default set (about 1-2 minutes on 2 cores). Each case is\n"
      "first checked against the fp64 oracle (or, above --oracle-limit, against another fp32 implementation)\n"
      "and the program exits non-zero if any check fails. List options take comma lists; the cases are\n"
      "their cartesian product. FLOPs: fwd = 4*B*Hq*Nq*Nk*d (halved for causal when Nq = Nk), bwd = 2.5 x fwd.\n"
      "Implementations built here: " + built};
  app.option_defaults()->delimiter(',')->always_capture_default();
  std::vector<std::string> passes, dtypes;
  auto* g = &o.grid;
  std::vector<CLI::Option*> problem_opts{
      app.add_option("--impl", g->impls, "implementations: reference (fp64 oracle), cpu, gpu, standard (OpenBLAS baseline)")
          ->check(CLI::IsMember({"reference", "cpu", "gpu", "standard"})),
      app.add_option("--pass", passes, "fwd, bwd (bwd times the backward only; its forward runs untimed)")
          ->check(CLI::IsMember({"fwd", "bwd"})),
      app.add_option("--dtype", dtypes, "input/output dtype: f32, f16, bf16")->check(CLI::IsMember({"f32", "f16", "bf16"})),
      app.add_option("--batch", g->batch, "batch size B")->check(CLI::PositiveNumber),
      app.add_option("--heads", g->heads, "query heads Hq")->check(CLI::PositiveNumber),
      app.add_option("--heads-k", g->heads_k, "key/value heads Hk (must divide Hq; default Hq)")->check(CLI::PositiveNumber),
      app.add_option("--seqlen", g->seqlen, "sequence length for both queries and keys (Nq = Nk)")->check(CLI::PositiveNumber),
      app.add_option("--seqlen-q", g->seqlen_q, "query length Nq (overrides --seqlen for queries)")->check(CLI::PositiveNumber),
      app.add_option("--seqlen-k", g->seqlen_k, "key length Nk (overrides --seqlen for keys)")->check(CLI::PositiveNumber),
      app.add_option("--head-dim", g->head_dim, "head dimension d")->check(CLI::PositiveNumber),
      app.add_option("--causal", g->causal, "0: no mask, 1: causal (bottom-right aligned)")->check(CLI::Range(0, 1)),
      app.add_option("--bias", g->bias,
                     "additive bias (problem dtype): none, full [B,Nq,Hq,Nk], keys [1,1,Hq,Nk] (per-head key bias),\n"
                     "rows [1,Nq,1,Nk] (one table for every head)")
          ->check(CLI::IsMember({"none", "full", "keys", "rows"})),
      app.add_option("--dbias", g->dbias, "backward with a bias: 1 also computes dbias (same sizes as the bias)")
          ->check(CLI::Range(0, 1)),
      app.add_option("--dropout", g->dropout, "dropout probability p in [0, 1) (Philox keep mask; 0: off)")
          ->check(CLI::Range(0.0, 0.999)),
      app.add_option("--block-q", g->block_q, "CPU query rows per tile (0: library default); a list with --tile-sweep"),
      app.add_option("--block-k", g->block_k, "CPU key rows per tile (0: library default); a list with --tile-sweep"),
  };
  app.add_flag("--tile-sweep", o.tile_sweep,
               "time the cpu implementation for every --block-q x --block-k (default 16..256 x 32..512) and its\n"
               "default choice, and report the best tiles per shape against the default");
  app.add_option("--reps", o.reps, "minimum timed repetitions per case (min and median are reported)")->check(CLI::PositiveNumber);
  app.add_option("--min-seconds", o.min_seconds,
                 "per case: repeat beyond --reps (up to 200) until this much time was spent; short cases get more\n"
                 "repetitions, which makes the minimum stable on a shared host");
  app.add_option("--max-seconds", o.max_seconds, "per case: stop repeating after 2 reps once this much time was spent");
  app.add_option("--time-limit", o.time_limit,
                 "seconds one call may take: a case whose time, extrapolated by FLOPs from the same implementation's\n"
                 "previous (smaller) case of the same series, exceeds it is reported as out of time (0: no limit)");
  app.add_option("--threads", o.threads, "OpenMP threads for every implementation and the peak test (0: all cores)");
  app.add_flag("--no-check", o.no_check, "time without checking (for sizes where no trusted implementation fits)");
  app.add_option("--check-max-seqlen", o.check_max_seqlen,
                 "check only cases with at most this many keys; longer ones are timed unchecked (0: check all).\n"
                 "For sweeps whose longest cases fit no trusted implementation");
  app.add_option("--oracle-limit", o.oracle_limit,
                 "largest oracle cost (multiply-adds, B*Hq*Nq*Nk*d times 2 fwd / 6 bwd) used for checks and for\n"
                 "timing the reference implementation; above it checks use another fp32 implementation");
  app.add_option("--mem-limit", o.mem_limit_gib,
                 "GiB the standard baseline's N^2 buffers may take; bigger cases are reported as out of memory\n"
                 "(0: 70% of MemAvailable)");
  app.add_option("--peak-seconds", o.peak_seconds, "duration of each FMA peak measurement (before and after the timings)");
  app.add_option("--json", o.json, "write one JSON record per case to FILE");
  app.add_option("--csv", o.csv, "write one CSV line per case to FILE");
  app.add_option("--plot", o.plot, "draw PREFIX-throughput.png and PREFIX-memory.png (vs seqlen) with gnuplot");
  app.add_option("--openblas-coretype", o.openblas_coretype,
                 "force OpenBLAS's kernel choice (e.g. Haswell, SkylakeX); default: unset OPENBLAS_CORETYPE and let\n"
                 "OpenBLAS pick (this environment presets Haswell, ~1.5x slower sgemm)");
  app.add_option("--simd-target", o.simd_target,
                 "run every Highway kernel (flashattn's CPU backend, the FMA peak, the standard baseline's softmax)\n"
                 "at most this target, e.g. AVX2 on an AVX-512 host; pair with --openblas-coretype Haswell");
  app.add_flag("-q,--quiet", o.quiet, "no progress lines on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.custom = o.tile_sweep || std::any_of(problem_opts.begin(), problem_opts.end(), [](CLI::Option* op) { return op->count() > 0; });
  for (const auto& p : passes) g->passes.push_back(p == "fwd" ? Pass::fwd : Pass::bwd);
  for (const auto& d : dtypes)
    g->dtypes.push_back(d == "f32" ? flashattn::DType::f32 : d == "f16" ? flashattn::DType::f16 : flashattn::DType::bf16);
  g->impls = or_default(g->impls, o.tile_sweep ? std::vector<std::string>{"cpu"} : available);
  for (const auto& i : g->impls)
    if (std::find(available.begin(), available.end(), i) == available.end()) {
      std::cerr << "error: implementation '" << i << "' is not available here (not built, or no GPU visible; available: " << built << ")\n";
      return 2;
    }
  g->passes = or_default(g->passes, {Pass::fwd});
  g->dtypes = or_default(g->dtypes, {flashattn::DType::f32});
  g->batch = or_default<int64_t>(g->batch, {1});
  g->heads = or_default<int64_t>(g->heads, {8});
  g->head_dim = or_default<int64_t>(g->head_dim, {64});
  g->causal = or_default(g->causal, {0});
  if (g->seqlen.empty() && (g->seqlen_q.empty() || g->seqlen_k.empty())) g->seqlen = {1024};
  if (o.tile_sweep) {
    g->block_q = or_default(g->block_q, {16, 32, 64, 128, 256});
    g->block_k = or_default(g->block_k, {32, 64, 128, 256, 512});
  }
  return -1;
}

}  // namespace bench
