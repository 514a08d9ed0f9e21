// flashattn-bench --decode: see decode_bench.hpp. Every case is one decode step of B sequences:
// Nq = --new-rows query rows per sequence, Hq query heads over Hk key/value heads, a KV cache of
// --cache-len keys per sequence, contiguous [B, Nk, Hk, d] or (--paged) the same memory viewed as a
// pool of pages in shuffled order through a block table. The bytes a call must read are those of
// K and V (B·Hk·Nk·(d + dv)·element size, plus a quantized cache's per-token scales: 2·B·Nk·Hk·4);
// GB/s = those bytes / the call's time. A call is one
// decoding step: it yields Nq tokens per sequence, so tokens/s per sequence = Nq / the call's time
// (B·Nq / time for the batch).
#include "decode_bench.hpp"

#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/cpu.hpp"
#include "read_bandwidth.hpp"
#include "standard.hpp"
#include "tolerance/judge.hpp"

namespace bench {
namespace {

struct DecodeOptions {
  std::vector<int64_t> cache_len{4096, 8192, 16384, 32768, 65536};
  std::vector<int64_t> batch{1, 8};
  std::vector<std::string> dtypes{"f32", "bf16"};
  std::vector<int64_t> page_sizes{16, 256};
  bool paged = false;
  int64_t splits = 0;
  int64_t new_rows = 1;
  int64_t heads = 32, heads_k = 8, head_dim = 128;
  int threads = 0;
  int decode_heads = 0;  // cpu::Config::decode_heads
  int reps = 5;
  bool standard = true, general = true, check = true;
  double bandwidth_bytes_gib = 1.0;
  std::string csv;
};

flashattn::DType parse_dtype(const std::string& s) {
  for (flashattn::DType t : {flashattn::DType::f32, flashattn::DType::f16, flashattn::DType::bf16, flashattn::DType::i8,
                             flashattn::DType::e4m3, flashattn::DType::e5m2})
    if (s == flashattn::dtype_name(t)) return t;
  return flashattn::DType::f16;
}

// Fills n elements of dtype t with values in [-1, 1) from a cheap per-thread generator (the values
// do not change the work; they keep fp32 inputs on the fp32 score path).
void fill(void* data, flashattn::DType t, int64_t n, uint64_t seed) {
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t lo = n * id / nt, hi = n * (id + 1) / nt;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(id) * 0xBF58476D1CE4E5B9ull + 1;
    for (int64_t i = lo; i < hi; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const float v = static_cast<float>(x >> 40) / static_cast<float>(1 << 23) - 1.0f;
      if (t == flashattn::DType::f32) {
        static_cast<float*>(data)[i] = v;
      } else if (flashattn::is_quantized(t)) {  // a byte that is no NaN or infinity in any 8-bit format
        static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>((x >> 40) & 0xb7);
      } else if (t == flashattn::DType::bf16) {
        static_cast<uint16_t*>(data)[i] = flashattn::bf16_bits_from_float(v);
      } else {
        static_cast<uint16_t*>(data)[i] = flashattn::f16_bits_from_float(v);
      }
    }
  }
}

// A buffer of raw bytes, 64-byte aligned, freed on destruction.
struct Buffer {
  void* data = nullptr;
  explicit Buffer(size_t bytes) {
    data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!data) throw std::bad_alloc();
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// The times of `reps` calls: median and minimum wall seconds, and the process CPU seconds per call
// (all threads): on a shared host, wall ≫ cpu / threads says the call waited for a core.
struct Timing {
  double median = 0, min = 0, cpu = 0;
};

// Times `reps` calls of f (after one untimed warm-up call).
template <class F>
Timing time_calls(int reps, F&& f) {
  f();
  std::vector<double> t;
  const std::clock_t c0 = std::clock();
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC / reps;
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), cpu};
}

struct Row {
  std::string dtype, layout, impl;
  int64_t batch, nk;
  double median_s, min_s, cpu_s, gbps, percent, tokens_per_s_seq;
  std::string status;
};

}  // namespace

bool decode_mode_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--decode") == 0) return true;
    if (std::strcmp(argv[i], "--mode") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "decode") == 0) return true;
    if (std::strcmp(argv[i], "--mode=decode") == 0) return true;
  }
  return false;
}

int run_decode(int argc, char** argv) {
  DecodeOptions o;
  CLI::App app{
      "flashattn-bench --decode: decode-shaped forward calls against a long KV cache, reported as GB/s of\n"
      "K/V read and % of the measured read bandwidth, beside the standard baseline and the CPU's general\n"
      "path (Config.decode = false). Each case is first checked against the fp64 oracle at Nk <= 4096."};
  app.option_defaults()->delimiter(',')->always_capture_default();
  bool decode_flag = false;
  std::string mode;
  app.add_flag("--decode", decode_flag, "decode mode (this mode)");
  app.add_option("--mode", mode, "decode: this mode")->check(CLI::IsMember({"decode"}));
  app.add_option("--cache-len", o.cache_len, "keys per sequence in the KV cache (Nk)")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "sequences B")->check(CLI::PositiveNumber);
  app.add_option("--dtype", o.dtypes,
                 "K/V (and q, out) dtype: f32, bf16, f16; or quantized K/V i8, e4m3, e5m2 (scale per token and head; "
                 "q and out bf16)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "i8", "e4m3", "e5m2"}));
  app.add_flag("--paged", o.paged, "also time the cache as shuffled pages through a block table");
  app.add_option("--page-size", o.page_sizes, "page sizes for --paged")->check(CLI::PositiveNumber);
  app.add_option("--splits", o.splits, "ForwardArgs::num_splits (0: chosen from the shape)")->check(CLI::NonNegativeNumber);
  app.add_option("--new-rows", o.new_rows, "query rows per sequence in the step (Nq: 1 decoding, > 1 speculative)")
      ->check(CLI::PositiveNumber);
  app.add_option("--heads", o.heads, "query heads Hq")->check(CLI::PositiveNumber);
  app.add_option("--heads-k", o.heads_k, "key/value heads Hk")->check(CLI::PositiveNumber);
  app.add_option("--head-dim", o.head_dim, "head dim d (= dv)")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "OpenMP threads (0: all cores)");
  app.add_option("--decode-heads", o.decode_heads,
                 "cpu::Config::decode_heads: key/value heads a work item reads together (0: the library's choice)")
      ->check(CLI::Range(0, 16));
  app.add_option("--reps", o.reps, "timed calls per case (median and min reported)")->check(CLI::PositiveNumber);
  app.add_option("--bandwidth-gib", o.bandwidth_bytes_gib, "buffer of the read-bandwidth measurement (GiB)");
  app.add_flag("!--no-standard", o.standard, "skip the standard baseline");
  app.add_flag("!--no-general", o.general, "skip the CPU general path");
  app.add_flag("!--no-check", o.check, "skip the oracle checks");
  app.add_option("--csv", o.csv, "write one CSV line per timing to FILE");
  CLI11_PARSE(app, argc, argv);
  if (o.heads % o.heads_k != 0) {
    std::fprintf(stderr, "--heads must be a multiple of --heads-k\n");
    return 2;
  }
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  const size_t bw_bytes = static_cast<size_t>(o.bandwidth_bytes_gib * double(1 << 30));

  const double bw_before = measure_read_bandwidth_gbps(threads, bw_bytes, 1.0);
  std::printf("read bandwidth (%d threads, %.1f GiB buffer): %.1f GB/s before\n", threads, o.bandwidth_bytes_gib, bw_before);
  std::fflush(stdout);

  std::vector<Row> rows;
  bool failed = false;
  const int64_t hq = o.heads, hk = o.heads_k, d = o.head_dim, nq = o.new_rows;
  for (const std::string& ds : o.dtypes) {
    const flashattn::DType t = parse_dtype(ds);  // K/V
    const bool quantized = flashattn::is_quantized(t);
    const flashattn::DType qt = quantized ? flashattn::DType::bf16 : t;  // q, out
    const size_t es = flashattn::dtype_size(t), qes = flashattn::dtype_size(qt);
    for (int64_t B : o.batch) {
      for (int64_t nk : o.cache_len) {
        const size_t kv_elems = static_cast<size_t>(B * nk * hk * d);
        Buffer q(static_cast<size_t>(B * nq * hq * d) * qes), out(static_cast<size_t>(B * nq * hq * d) * qes);
        Buffer k(kv_elems * es), v(kv_elems * es);
        std::vector<float> lse(static_cast<size_t>(B * hq * nq));
        // Quantized: one scale per (token, key/value head), beside the rows as a serving cache keeps them
        // (the same flat index for the contiguous cache and the page pool over its memory).
        std::vector<float> scales(quantized ? static_cast<size_t>(B * nk * hk) : 0, 1.0f / 64);
        fill(q.data, qt, B * nq * hq * d, 1);
        fill(k.data, t, static_cast<int64_t>(kv_elems), 2);
        fill(v.data, t, static_cast<int64_t>(kv_elems), 3);
        flashattn::ForwardArgs a;
        a.q = flashattn::bshd(static_cast<const void*>(q.data), qt, B, nq, hq, d);
        a.k = flashattn::bshd(static_cast<const void*>(k.data), t, B, nk, hk, d);
        a.v = flashattn::bshd(static_cast<const void*>(v.data), t, B, nk, hk, d);
        if (quantized) a.kv_scales = {scales.data(), scales.data(), flashattn::ScaleGranularity::token};
        a.out = flashattn::bshd(out.data, qt, B, nq, hq, d);
        a.lse = lse.data();
        a.causal = nq > 1;  // a speculative step's rows see the cache and the rows before them
        a.num_splits = o.splits;
        const double bytes = 2.0 * (static_cast<double>(kv_elems) * static_cast<double>(es) +
                                    static_cast<double>(scales.size()) * sizeof(float));
        auto record = [&](const std::string& layout, const std::string& impl, Timing tm, const std::string& status) {
          Row r{ds, layout, impl, B, nk, tm.median, tm.min, tm.cpu, bytes / tm.min * 1e-9, 0, double(nq) / tm.min, status};
          r.percent = 100.0 * r.gbps / bw_before;
          std::printf(
              "%-5s B=%-2lld Nk=%-6lld %-10s %-8s median %9.3f ms  min %9.3f ms  cpu %9.3f ms  %6.1f GB/s  %5.1f %%  "
              "%8.0f tok/s/seq  %s\n",
              ds.c_str(), static_cast<long long>(B), static_cast<long long>(nk), layout.c_str(), impl.c_str(),
              tm.median * 1e3, tm.min * 1e3, tm.cpu * 1e3, r.gbps, r.percent, r.tokens_per_s_seq, status.c_str());
          std::fflush(stdout);
          rows.push_back(r);
        };
        // Layouts: contiguous, then each page size over the same memory with shuffled pages.
        std::vector<int64_t> layouts{0};
        if (o.paged) {
          for (int64_t ps : o.page_sizes) {
            if (nk % ps == 0) layouts.push_back(ps);
          }
        }
        for (int64_t ps : layouts) {
          flashattn::ForwardArgs f = a;
          std::vector<int32_t> table;
          std::string layout = "contiguous";
          if (ps > 0) {
            const int64_t pages = B * nk / ps, per_seq = nk / ps;
            table.resize(static_cast<size_t>(pages));
            std::iota(table.begin(), table.end(), 0);
            std::shuffle(table.begin(), table.end(), std::mt19937_64(ps));
            f.k = flashattn::bshd(static_cast<const void*>(k.data), t, pages, ps, hk, d);
            f.v = flashattn::bshd(static_cast<const void*>(v.data), t, pages, ps, hk, d);
            f.block_table = table.data();
            f.block_table_pages = per_seq;
            layout = "paged-" + std::to_string(ps);
          }
          std::string status = "ok";
          flashattn::cpu::Config cfg;
          cfg.threads = threads;
          cfg.decode_heads = o.decode_heads;
          if (o.check && nk <= 4096) {
            flashattn::cpu::forward(f, cfg);
            const flashattn::tolerance::Judgement j = flashattn::tolerance::judge_forward(f);
            if (!j.passed()) {
              status = "CHECK FAILED: " + j.first_failure();
              failed = true;
            }
          }
          status += ", scratch " + std::to_string(flashattn::cpu::workspace_bytes(f, cfg) >> 10) + " KiB";
          record(layout, "cpu", time_calls(o.reps, [&] { flashattn::cpu::forward(f, cfg); }), status);
        }
        if (o.general) {
          flashattn::cpu::Config cfg;
          cfg.threads = threads;
          cfg.decode = false;
          record("contiguous", "general", time_calls(std::max(o.reps / 2, 1), [&] { flashattn::cpu::forward(a, cfg); }), "ok");
        }
        if (o.standard && !quantized) {  // the materialised baseline takes no quantized K/V
          const double need = static_cast<double>(Standard::forward_bytes(a, false, threads));
          if (need > 4.0 * double(1 << 30)) {
            std::printf("%-5s B=%-2lld Nk=%-6lld standard skipped: needs %.1f GiB\n", ds.c_str(), static_cast<long long>(B),
                        static_cast<long long>(nk), need / double(1 << 30));
          } else {
            Standard s;
            record("contiguous", "standard", time_calls(std::max(o.reps / 2, 1), [&] { s.forward(a, false); }), "ok");
            s.release();
          }
        }
      }
    }
  }
  const double bw_after = measure_read_bandwidth_gbps(threads, bw_bytes, 1.0);
  std::printf("read bandwidth: %.1f GB/s before, %.1f after; %% uses the before value\n", bw_before, bw_after);
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    f << "dtype,batch,nk,new_rows,layout,impl,median_ms,min_ms,cpu_ms,gbps,percent_of_read_bw,tokens_per_s_per_seq,"
         "tokens_per_s,read_bw_before,read_bw_after,status\n";
    for (const Row& r : rows) {
      f << r.dtype << ',' << r.batch << ',' << r.nk << ',' << nq << ',' << r.layout << ',' << r.impl << ','
        << r.median_s * 1e3 << ',' << r.min_s * 1e3 << ',' << r.cpu_s * 1e3 << ',' << r.gbps << ',' << r.percent << ','
        << r.tokens_per_s_seq << ',' << r.tokens_per_s_seq * double(r.batch) << ',' << bw_before << ',' << bw_after
        << ",\"" << r.status << "\"\n";
    }
  }
  return failed ? 1 : 0;
}

}  // namespace bench
