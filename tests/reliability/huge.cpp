// More than 2^31 elements: q, out and dq of 2·(2^24 + 32)·2·32 = 2^31 + 4096 bf16 elements each
// (4 GiB apiece), so every element offset past 2^31 and byte offset past 2^32 is used. Runs only
// with FLASHATTN_HUGE=1 (exit code 77, "skipped", otherwise); needs ~9 GiB for the forward, and
// the backward runs only where dq plus the CPU backward's workspace fit in memory (it says so).
//
// Checked: cpu::forward and cpu::backward on the whole problem; out and dq on sampled rows (spread
// over both sequences up to the last row) against the oracle run on a strided sub-problem view of
// the same buffers (so the oracle's own index math meets offsets past 2^31 as well); dk and dv
// against the sum of CPU backward calls over row chunks small enough for 32-bit offsets.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "flashattn/convert.hpp"
#include "flashattn/cpu.hpp"
#include "flashattn/reference.hpp"
#include "support.hpp"
#include "tolerance/judge.hpp"

namespace flashattn::reliability {
namespace {

constexpr int64_t kBatch = 2, kHq = 2, kHk = 1, kD = 32, kNk = 64;
constexpr int64_t kHugeNq = (int64_t{1} << 24) + 32;  // kBatch·kNq·kHq·kD = 2^31 + 4096
// Rows per sequence: kHugeNq, or FLASHATTN_HUGE_ROWS (a smaller dry run of the same checks).
const int64_t kNq = std::getenv("FLASHATTN_HUGE_ROWS") ? std::atoll(std::getenv("FLASHATTN_HUGE_ROWS")) : kHugeNq;
constexpr int64_t kSamples = 64;                   // sampled query rows per sequence
constexpr int64_t kChunk = int64_t{1} << 20;       // rows per chunk of the dk/dv cross-check
constexpr double kChunkTolerance = 2e-2;           // relative to max|dk|: bf16 rounding of 17 chunks
constexpr DType kType = DType::bf16;
constexpr double kMemoryFraction = 0.8;  // of physical memory the test lets itself use

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void fill(std::vector<uint16_t>& buf, uint32_t seed) {
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < static_cast<int64_t>(buf.size() >> 16) + 1; ++blk) {
    uint32_t x = seed ^ static_cast<uint32_t>(blk * 2654435761u) ^ 0x9e3779b9u;
    const size_t end = std::min(buf.size(), static_cast<size_t>(blk + 1) << 16);
    for (size_t i = static_cast<size_t>(blk) << 16; i < end; ++i) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      buf[i] = bf16_bits_from_float(static_cast<float>(x >> 8) * 0x1p-23f - 1.0f);
    }
  }
}

// Returns view t with its base pointer moved by `elements` 16-bit elements (Tensor or ConstTensor).
template <class View>
View advanced(View t, int64_t elements) {
  using Element = std::conditional_t<std::is_same_v<View, ConstTensor>, const uint16_t, uint16_t>;
  t.data = static_cast<Element*>(t.data) + elements;
  return t;
}

int run() {
  const auto t_all = std::chrono::steady_clock::now();
  const size_t nq_el = static_cast<size_t>(kBatch * kNq * kHq * kD), nk_el = static_cast<size_t>(kBatch * kNk * kHk * kD);
  std::printf("huge: q/out/dq [%lld, %lld, %lld, %lld] bf16 = %zu elements each (2^31 = %lld)\n", (long long)kBatch,
              (long long)kNq, (long long)kHq, (long long)kD, nq_el, 1LL << 31);
  std::vector<uint16_t> q(nq_el), out(nq_el), k(nk_el), v(nk_el), dk(nk_el), dv(nk_el);
  // dq: allocated but left uninitialised, so its pages cost memory only if the backward runs.
  const std::unique_ptr<uint16_t[]> dq(new uint16_t[nq_el]);
  std::vector<uint16_t> dout_row(static_cast<size_t>(kHq * kD));
  std::vector<float> lse(static_cast<size_t>(kBatch * kHq * kNq));
  fill(q, 1);
  fill(k, 2);
  fill(v, 3);
  fill(dout_row, 4);
  ForwardArgs f;
  f.q = bshd(q.data(), kType, kBatch, kNq, kHq, kD);
  f.k = bshd(k.data(), kType, kBatch, kNk, kHk, kD);
  f.v = bshd(v.data(), kType, kBatch, kNk, kHk, kD);
  f.out = bshd(out.data(), kType, kBatch, kNq, kHq, kD);
  f.lse = lse.data();
  BackwardArgs a = backward_args(f);
  // dout: one row broadcast to every query (stride 0 over batch and rows), so it costs no memory.
  a.dout = bshd(dout_row.data(), kType, kBatch, kNq, kHq, kD);
  a.dout.stride_batch = a.dout.stride_seq = 0;
  a.dq = bshd(dq.get(), kType, kBatch, kNq, kHq, kD);
  a.dk = bshd(dk.data(), kType, kBatch, kNk, kHk, kD);
  a.dv = bshd(dv.data(), kType, kBatch, kNk, kHk, kD);

  auto t0 = std::chrono::steady_clock::now();
  cpu::forward(f);
  std::printf("huge: cpu forward %.1f s (workspace_bytes %zu)\n", seconds_since(t0), cpu::workspace_bytes(f));
  // The backward needs dq (as large as q) and the CPU backend's workspace; run it only where the
  // machine has the memory, and say so when it does not.
  const size_t bwd_workspace = cpu::workspace_bytes(a);
  const double need_gib = static_cast<double>(3 * nq_el * sizeof(uint16_t) + bwd_workspace) / (1 << 30);
  const double have_gib = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE)) / (1 << 30);
  const bool backward = need_gib < kMemoryFraction * have_gib;
  if (backward) {
    t0 = std::chrono::steady_clock::now();
    cpu::backward(a);
    std::printf("huge: cpu backward %.1f s (workspace_bytes %zu)\n", seconds_since(t0), bwd_workspace);
  } else {
    std::printf("huge: backward NOT RUN: q, out, dq and the CPU backward's workspace (%.1f GiB) need %.1f GiB, "
                "this machine has %.1f GiB\n", static_cast<double>(bwd_workspace) / (1 << 30), need_gib, have_gib);
  }

  // Oracle on sampled rows: a view of the same buffers with kSamples rows per sequence, rows
  // first + r·step, reaching the last row. Without a mask every row's result is independent of
  // its position, so the sub-problem's rows are the full problem's rows.
  const int64_t first = 3, step = (kNq - 1 - first) / (kSamples - 1);
  BackwardArgs s = a;
  auto sample = [&](auto t, int64_t row0) {
    t = advanced(t, row0 * t.stride_seq);
    t.seq = kSamples;
    t.stride_seq *= step;
    return t;
  };
  s.q = sample(a.q, first);
  s.dout = a.dout;
  s.dout.seq = kSamples;
  // The sub-problem's out, lse and dq are the CPU's own sampled rows (out and dq as strided views of
  // its buffers, lse copied: the contract wants it contiguous), so the rule judges them directly,
  // the backward's contract term included (the CPU backward was given exactly this out and lse).
  std::vector<float> s_lse(static_cast<size_t>(kBatch * kHq * kSamples));
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHq; ++h)
      for (int64_t r = 0; r < kSamples; ++r)
        s_lse[static_cast<size_t>((b * kHq + h) * kSamples + r)] = lse[static_cast<size_t>((b * kHq + h) * kNq + first + r * step)];
  ForwardArgs sf;  // the forward of the sampled rows: the CPU's own out (a strided view) and lse
  static_cast<AttentionArgs&>(sf) = s;
  sf.out = sample(f.out, first);
  sf.lse = s_lse.data();
  s.out = sf.out;
  s.lse = sf.lse;
  std::vector<uint16_t> s_dk(nk_el), s_dv(nk_el);  // not judged: a sub-problem's dk, dv differ
  s.dq = sample(a.dq, first);
  s.dk = bshd(s_dk.data(), kType, kBatch, kNk, kHk, kD);
  s.dv = bshd(s_dv.data(), kType, kBatch, kNk, kHk, kD);
  t0 = std::chrono::steady_clock::now();
  const flashattn::tolerance::Judgement fwd = flashattn::tolerance::judge_forward(sf);
  const flashattn::tolerance::Judgement bwd = backward ? flashattn::tolerance::judge_backward(s) : flashattn::tolerance::Judgement{};
  std::printf("huge: oracle on %lld sampled rows %.1f s\n", (long long)(kBatch * kSamples), seconds_since(t0));
  const std::string out_check = fwd.find("out")->message();
  const std::string lse_check = fwd.find("lse")->message();
  const std::string dq_check = backward ? bwd.find("dq")->message() : "not run";
  std::printf("huge: sampled out %s, lse %s, dq %s\n", out_check.empty() ? "ok" : out_check.c_str(),
              lse_check.empty() ? "ok" : lse_check.c_str(), dq_check.empty() ? "ok" : dq_check.c_str());

  if (!backward) {
    const bool ok = out_check.empty() && lse_check.empty();
    std::printf("huge: forward %s (backward not run); total %.1f s\n", ok ? "PASSED" : "FAILED", seconds_since(t_all));
    return ok ? 0 : 1;
  }
  // dk, dv: the sum over row chunks (each a small call) must match the whole call's result.
  t0 = std::chrono::steady_clock::now();
  std::vector<double> dk_sum(nk_el, 0.0), dv_sum(nk_el, 0.0);
  std::vector<uint16_t> c_dq(static_cast<size_t>(kChunk * kHq * kD));
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t r0 = 0; r0 < kNq; r0 += kChunk) {
      const int64_t rows = std::min(kChunk, kNq - r0);
      BackwardArgs c = a;
      auto rows_of = [&](auto t) {
        t = advanced(t, b * t.stride_batch + r0 * t.stride_seq);
        t.batch = 1;
        t.seq = rows;
        return t;
      };
      auto one = [&](auto t) {
        t = advanced(t, b * t.stride_batch);
        t.batch = 1;
        return t;
      };
      c.q = rows_of(a.q);
      c.out = rows_of(a.out);
      c.dout = rows_of(a.dout);
      c.k = one(a.k);
      c.v = one(a.v);
      std::vector<float> c_lse(static_cast<size_t>(kHq * rows));
      for (int64_t h = 0; h < kHq; ++h)
        for (int64_t i = 0; i < rows; ++i) c_lse[static_cast<size_t>(h * rows + i)] = lse[static_cast<size_t>((b * kHq + h) * kNq + r0 + i)];
      c.lse = c_lse.data();
      std::vector<uint16_t> c_dk(static_cast<size_t>(kNk * kHk * kD)), c_dv(c_dk.size());
      c.dq = bshd(c_dq.data(), kType, 1, rows, kHq, kD);
      c.dk = bshd(c_dk.data(), kType, 1, kNk, kHk, kD);
      c.dv = bshd(c_dv.data(), kType, 1, kNk, kHk, kD);
      cpu::backward(c);
      for (size_t e = 0; e < c_dk.size(); ++e) {
        dk_sum[static_cast<size_t>(b) * c_dk.size() + e] += float_from_bf16_bits(c_dk[e]);
        dv_sum[static_cast<size_t>(b) * c_dv.size() + e] += float_from_bf16_bits(c_dv[e]);
      }
    }
  auto chunk_check = [&](const std::vector<uint16_t>& whole, const std::vector<double>& sum, const char* name) {
    double err = 0, mag = 0;
    bool finite = true;
    for (size_t e = 0; e < whole.size(); ++e) {
      const double w = float_from_bf16_bits(whole[e]);
      finite = finite && std::isfinite(w);
      err = std::max(err, std::fabs(w - sum[e]));
      mag = std::max(mag, std::fabs(sum[e]));
    }
    const bool ok = finite && err <= kChunkTolerance * mag;
    std::printf("huge: %s whole vs sum of chunks: max error %.3g, max |%s| %.3g: %s\n", name, err, name, mag, ok ? "ok" : "FAILED");
    return ok;
  };
  const bool dk_ok = chunk_check(dk, dk_sum, "dk"), dv_ok = chunk_check(dv, dv_sum, "dv");
  std::printf("huge: chunked cross-check %.1f s; total %.1f s\n", seconds_since(t0), seconds_since(t_all));
  const bool ok = out_check.empty() && lse_check.empty() && dq_check.empty() && dk_ok && dv_ok;
  std::printf("huge: %s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace flashattn::reliability

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines appear as they happen
  const char* env = std::getenv("FLASHATTN_HUGE");
  if (env == nullptr || std::string(env) != "1") {
    std::printf("huge: skipped (needs ~12.5 GiB; set FLASHATTN_HUGE=1 to run)\n");
    return 77;
  }
  return flashattn::reliability::run();
}
