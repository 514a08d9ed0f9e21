// flashattn-bench: check, then time, every built implementation on a set of problems.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <memory>

#include "alloc_meter.hpp"
#ifdef FLASHATTN_HAVE_GPU
#include "gpu_bench.hpp"
#endif
#include "impls.hpp"
#include "machine.hpp"
#include "options.hpp"
#include "peak.hpp"
#include "decode_bench.hpp"
#include "plot.hpp"
#include "problem_data.hpp"
#include "report.hpp"
#include "simd_kernels.hpp"
#include "standard.hpp"
#include "trusted.hpp"

namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int kMinRepsBeforeCutoff = 2;
constexpr int kMaxReps = 200;

std::string fixed3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}
constexpr double kMemoryShare = 0.7;  // of MemAvailable, for the standard baseline's buffers

class Bench {
 public:
  Bench(const Options& o, const RunSettings& s) : o_(o), s_(s) {}

  Runner* runner(const std::string& name) {
    auto it = runners_.find(name);
    if (it == runners_.end()) it = runners_.emplace(name, make_runner(name, s_)).first;
    return it->second.get();
  }

  // Runs the cases of one problem (adjacent in `cases`, [first, last)) and appends their results.
  void run_problem(const std::vector<Case>& cases, size_t first, size_t last, std::vector<Result>& out) {
    const Problem& p = cases[first].problem;
    ProblemData data(p);
    Trusted trusted(data, s_, [this](const std::string& n) { return runner(n); });
    for (size_t i = first; i < last; ++i) {
      const auto t0 = Clock::now();
      Result r = run_case(cases[i], data, trusted);
      if (!o_.quiet)
        std::fprintf(stderr, "[%zu/%zu] %-9s %s%s: %s (%.1f s)\n", i + 1, cases.size(), cases[i].impl.c_str(),
                     p.describe().c_str(), tile_text(cases[i]).c_str(), progress_text(r).c_str(), seconds_since(t0));
      out.push_back(std::move(r));
    }
  }

 private:
  // Returns the progress line's outcome: "12.345 ms, check pass", or the status of a skipped case.
  static std::string progress_text(const Result& r) {
    if (r.status != "ok") return r.status;
    const char* check = r.check_against == "skipped" ? "unchecked" : r.check_passed ? "check pass" : "check FAIL";
    return fixed3(r.ms_min) + " ms, " + check;
  }

  static std::string tile_text(const Case& c) {
    return c.block_q || c.block_k ? " tiles " + std::to_string(c.block_q) + "x" + std::to_string(c.block_k) : "";
  }

  Result run_case(const Case& c, const ProblemData& data, Trusted& trusted) {
    Result r;
    r.c = c;
    r.threads = omp_get_max_threads();
    r.flops = flops(c.problem);
    Runner* run = runner(c.impl);
    const std::string why = run->refuse(c, s_);
    if (!why.empty()) {
      r.status = "skipped: " + why;
      return r;
    }
    const std::string series = series_key(c);
    if (o_.time_limit > 0) {
      const auto last = last_.find(series);
      if (last != last_.end()) {
        const double estimate = last->second.first * r.flops / last->second.second;
        if (estimate > o_.time_limit) {
          r.status = "skipped: out of time: estimated " + fixed3(estimate) + " s per call > --time-limit " + fixed3(o_.time_limit);
          return r;
        }
      }
    }
    const bool bwd = c.problem.pass == Pass::bwd;
    try {
      Outputs outs = data.make_outputs();
      const Calls a = data.calls(outs);
      run->prepare(a);
      // First call: result for the check, heap growth for the memory column.
      if (bwd) run->forward(a.forward, c, true);
      alloc_meter_start();
      if (bwd) {
        run->backward(a.backward, c);
      } else {
        run->forward(a.forward, c, false);
      }
      r.extra_bytes_measured = alloc_meter_peak_delta();
      run->fetch(a, c.problem.pass);
      r.extra_bytes_declared = run->declared_bytes(a, c);
      r.extra_bytes = std::max(r.extra_bytes_measured, r.extra_bytes_declared);
      if (o_.no_check || (o_.check_max_seqlen > 0 && c.problem.seqlen_k > o_.check_max_seqlen)) {
        r.check_against = "skipped";
        r.check_passed = true;
      } else {
        const CheckResult k = trusted.check(c.impl, outs);
        r.check_against = k.against;
        r.check_passed = k.passed;
        r.check_max_err = k.max_err;
        r.check_bound = k.bound;
        r.check_note = k.note;
      }
      if (bwd) run->forward(a.forward, c, true);  // the trusted run may have replaced a saved forward state
      std::vector<double> ms;
      const auto start = Clock::now();
      // At least --reps repetitions and --min-seconds (short cases repeat more: the host is shared
      // and the minimum of many runs is the stable statistic), at most kMaxReps; stop after
      // kMinRepsBeforeCutoff once --max-seconds is spent.
      for (int rep = 0; rep < kMaxReps; ++rep) {
        const auto t0 = Clock::now();
        if (bwd) {
          run->backward(a.backward, c);
        } else {
          run->forward(a.forward, c, false);
        }
        ms.push_back(seconds_since(t0) * 1e3);
        const double spent = seconds_since(start);
        if (rep + 1 >= kMinRepsBeforeCutoff && spent > o_.max_seconds) break;
        if (rep + 1 >= o_.reps && spent >= o_.min_seconds) break;
      }
      std::sort(ms.begin(), ms.end());
      r.reps = static_cast<int>(ms.size());
      r.ms_min = ms.front();
      r.ms_median = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
      r.gflops = r.flops / (r.ms_min * 1e-3) * 1e-9;
      last_[series] = {r.ms_min * 1e-3, r.flops};
    } catch (const std::exception& e) {
      r.status = std::string(o_.tile_sweep && (c.block_q || c.block_k) ? "rejected: " : "error: ") + e.what();
    }
    return r;
  }

  // Returns the series a case belongs to: everything but the sequence lengths.
  static std::string series_key(const Case& c) {
    const Problem& p = c.problem;
    return c.impl + ' ' + pass_name(p.pass) + ' ' + flashattn::dtype_name(p.dtype) + ' ' + std::to_string(p.batch) + ' ' +
           std::to_string(p.heads_q) + ' ' + std::to_string(p.heads_k) + ' ' + std::to_string(p.head_dim) + ' ' +
           std::to_string(p.causal) + ' ' + p.mask_text() + ' ' + std::to_string(c.block_q) + ' ' + std::to_string(c.block_k);
  }

  const Options& o_;
  RunSettings s_;
  std::map<std::string, std::pair<double, double>> last_;  // series -> (seconds per call, flops) of its last case
  std::map<std::string, std::unique_ptr<Runner>> runners_;
};

// Prints, per problem of a tile sweep, the fastest checked tiles against the library default.
void print_tile_summary(const std::vector<Result>& rs) {
  std::cout << "\nTile sweep (cpu): best tiles per shape vs the library default (0x0)\n";
  for (size_t i = 0; i < rs.size();) {
    size_t j = i;
    while (j < rs.size() && rs[j].c.problem == rs[i].c.problem) ++j;
    const Result* best = nullptr;
    const Result* def = nullptr;
    for (size_t k = i; k < j; ++k) {
      const Result& r = rs[k];
      if (r.status != "ok" || !r.check_passed) continue;
      if (r.c.block_q == 0 && r.c.block_k == 0 && (!def || r.ms_min < def->ms_min)) def = &r;
      if (!best || r.ms_min < best->ms_min) best = &r;
    }
    std::cout << "  " << rs[i].c.problem.describe() << ": ";
    if (!best) {
      std::cout << "no passing configuration\n";
    } else {
      std::printf("best %dx%d %.3f ms", best->c.block_q, best->c.block_k, best->ms_min);
      if (def) std::printf("; default %.3f ms (%+.1f%% vs best)", def->ms_min, 100.0 * (def->ms_min / best->ms_min - 1.0));
      std::printf("\n");
    }
    i = j;
  }
}

int run(int argc, char** argv) {
  ensure_openblas_coretype(argc, argv);
#ifdef FLASHATTN_HAVE_CPU
  if (decode_mode_requested(argc, argv)) return run_decode(argc, argv);  // decode_bench.hpp
#endif
  Options o;
  const std::vector<std::string> available = available_impls();
  if (const int code = parse_options(argc, argv, available, o); code >= 0) return code;
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (!o.simd_target.empty()) {
    if (const std::string why = limit_simd_target(o.simd_target); !why.empty()) {
      std::cerr << "flashattn-bench: --simd-target: " << why << "\n";
      return 2;
    }
  }
  RunSettings s;
  s.threads = o.threads;
  s.oracle_limit = o.oracle_limit;
  s.memory_budget = o.mem_limit_gib > 0 ? o.mem_limit_gib * double(1 << 30) : kMemoryShare * available_memory_bytes();

  const std::vector<Case> cases = o.custom ? expand(o.grid) : default_cases(available);
  std::vector<Case> ordered = cases;
  if (o.tile_sweep) {  // the library default first and last in each problem's group (the faster
                       // of the two counts, so warm-up and drift do not favour the other tiles)
    ordered.clear();
    for (size_t i = 0; i < cases.size(); ++i) {
      if (i == 0 || !(cases[i].problem == cases[i - 1].problem))
        ordered.push_back(Case{"cpu", cases[i].problem, 0, 0});
      ordered.push_back(cases[i]);
      if (i + 1 == cases.size() || !(cases[i + 1].problem == cases[i].problem))
        ordered.push_back(Case{"cpu", cases[i].problem, 0, 0});
    }
  }

  MachineInfo m;
  m.cpu_model = cpu_description();
  m.l1d_bytes = l1d_cache_bytes();
  m.l2_bytes = l2_cache_bytes();
  m.simd_target = simd_target_name();
  m.blas_core = Standard::blas_core();
  m.threads = omp_get_max_threads();
  m.gpu = "none";
  m.load_average = load_average();
#ifdef FLASHATTN_HAVE_GPU
  if (!gpu_name().empty()) m.gpu = gpu_name();
#endif
  const bool gpu_used = std::find(available.begin(), available.end(), "gpu") != available.end() &&
                        std::any_of(ordered.begin(), ordered.end(), [](const Case& c) { return c.impl == "gpu"; });
  std::cout << "flashattn-bench on " << m.cpu_model << " (L1d " << human_bytes(double(m.l1d_bytes)) << ", L2 "
            << human_bytes(double(m.l2_bytes)) << " per core), " << m.threads << " threads, SIMD " << m.simd_target
            << ", OpenBLAS core " << m.blas_core << "; implementations:";
  for (const auto& a : available) std::cout << ' ' << a;
  std::cout << "\n" << ordered.size() << " cases" << (o.custom ? "" : " (built-in default set)") << std::endl;
  if (m.load_average > m.threads)
    std::printf("warning: load average %.1f on %d threads: other processes compete for the cores; timings are noisy\n",
                m.load_average, m.threads);

  m.peak_before = measure_fma_peak_gflops(m.threads, o.peak_seconds);
  m.bf16_peak_before = measure_bf16_peak_gflops(m.threads, o.peak_seconds);
#ifdef FLASHATTN_HAVE_GPU
  if (gpu_used) {
    const GpuCeilings g = measure_gpu_ceilings();
    m.gpu_copy_gbps = g.copy_gbps;
    m.gpu_gemm_before = g.gemm_tflops * 1e3;
  }
#endif
  Bench bench(o, s);
  std::vector<Result> results;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < ordered.size();) {
    size_t j = i;
    while (j < ordered.size() && ordered[j].problem == ordered[i].problem) ++j;
    bench.run_problem(ordered, i, j, results);
    i = j;
  }
  m.peak_after = measure_fma_peak_gflops(m.threads, o.peak_seconds);
  m.bf16_peak_after = measure_bf16_peak_gflops(m.threads, o.peak_seconds);
#ifdef FLASHATTN_HAVE_GPU
  if (gpu_used) m.gpu_gemm_after = measure_gpu_ceilings().gemm_tflops * 1e3;
#endif
  for (Result& r : results) {
    const bool ok = r.status == "ok";
    r.cpu = m.cpu_model;
    if (r.c.impl == "gpu") {
      r.peak_kind = "gpu bf16 gemm";
      r.peak_gflops = m.gpu_peak();
    } else {
      r.fp32_peak_gflops = m.peak();
      r.fp32_efficiency = ok && m.peak() > 0 ? r.gflops / m.peak() : 0;
      const bool bf16 = r.c.problem.dtype == flashattn::DType::bf16 && m.bf16_peak() > 0;
      r.peak_kind = bf16 ? "bf16 dot" : "fp32 fma";
      r.peak_gflops = bf16 ? m.bf16_peak() : m.peak();
    }
    r.efficiency = ok && r.peak_gflops > 0 ? r.gflops / r.peak_gflops : 0;
  }

  std::printf("FMA peak (fp32, %d threads, %s): %.0f GFLOP/s before, %.0f after; %%peak uses %.0f\n", m.threads,
              m.simd_target.c_str(), m.peak_before, m.peak_after, m.peak());
  if (m.bf16_peak() > 0)
    std::printf("bf16 dot peak (vdpbf16ps, %d threads): %.0f GFLOP/s before, %.0f after; %%peak of bf16 cases uses %.0f, "
                "%%fp32 is against the fp32 FMA peak\n",
                m.threads, m.bf16_peak_before, m.bf16_peak_after, m.bf16_peak());
  else
    std::printf("bf16 dot peak: no AVX512_BF16 here (this CPU or --simd-target); bf16 cases use the fp32 FMA peak\n");
  if (gpu_used)
    std::printf("GPU %s: copy %.0f GB/s; cuBLAS bf16 GEMM %.0f GFLOP/s before, %.0f after; gpu %%peak uses %.0f\n",
                m.gpu.c_str(), m.gpu_copy_gbps, m.gpu_gemm_before, m.gpu_gemm_after, m.gpu_peak());
  print_table(std::cout, results);
  if (o.tile_sweep) print_tile_summary(results);

  int failed = 0, errors = 0;
  for (const Result& r : results) {
    if (r.status.rfind("error", 0) == 0) ++errors;
    if (r.status == "ok" && !r.check_passed) ++failed;
  }
  std::printf("%zu cases in %.1f s: %d check failures, %d errors\n", results.size(), seconds_since(t0), failed, errors);
  if (!o.json.empty()) write_json(o.json, m, results);
  if (!o.csv.empty()) write_csv(o.csv, results);
  if (!o.plot.empty()) plot(o.plot, m, results);
  return failed || errors ? 1 : 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  try {
    return bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "flashattn-bench: " << e.what() << '\n';
    return 2;
  }
}
