// Table, JSON and CSV output. See report.hpp.
#include "report.hpp"

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "flashattn/types.hpp"

namespace bench {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

namespace {

std::string fmt(double v, int prec) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::string tiles(const Case& c) {
  if (c.impl != "cpu") return "";
  if (c.block_q == 0 && c.block_k == 0) return "default";
  return std::to_string(c.block_q) + "x" + std::to_string(c.block_k);
}

std::string check_text(const Result& r) {
  if (r.check_against == "skipped") return "unchecked (--no-check / --check-max-seqlen)";
  std::string s = (r.check_passed ? "PASS " : "FAIL ") + r.check_against;
  if (r.check_against != "none") s += " err " + sci(r.check_max_err) + " <= " + sci(r.check_bound);
  if (!r.check_passed) s += " (" + r.check_note + ")";
  return s;
}

}  // namespace

void print_table(std::ostream& os, const std::vector<Result>& rs) {
  const std::vector<std::string> head{"impl", "pass", "dtype", "B", "Hq", "Hk", "Nq", "Nk", "d", "mask", "tiles",
                                      "min ms", "med ms", "GFLOP/s", "%peak", "%fp32", "extra mem", "check"};
  std::vector<std::vector<std::string>> rows;
  for (const Result& r : rs) {
    const Problem& p = r.c.problem;
    std::vector<std::string> row{r.c.impl, pass_name(p.pass), flashattn::dtype_name(p.dtype), std::to_string(p.batch),
                                 std::to_string(p.heads_q), std::to_string(p.heads_k), std::to_string(p.seqlen_q),
                                 std::to_string(p.seqlen_k), std::to_string(p.head_dim), p.mask_text(),
                                 tiles(r.c)};
    if (r.status != "ok") {
      row.insert(row.end(), {"-", "-", "-", "-", "-", "-", r.status});
    } else {
      row.insert(row.end(), {fmt(r.ms_min, 3), fmt(r.ms_median, 3), fmt(r.gflops, 1), fmt(100 * r.efficiency, 1),
                             r.fp32_peak_gflops > 0 ? fmt(100 * r.fp32_efficiency, 1) : "-",
                             human_bytes(static_cast<double>(r.extra_bytes)), check_text(r)});
    }
    rows.push_back(row);
  }
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (const auto& row : rows)
    for (size_t i = 0; i + 1 < row.size(); ++i) w[i] = std::max(w[i], row[i].size());
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) {
      const bool left = i <= 2 || i == 9 || i == 10 || i + 1 == row.size();
      if (i + 1 == row.size()) {
        os << row[i];
      } else {
        os << (left ? std::left : std::right) << std::setw(static_cast<int>(w[i])) << row[i] << "  ";
      }
    }
    os << '\n';
  };
  line(head);
  for (const auto& row : rows) line(row);
}

namespace {

nlohmann::ordered_json record(const Result& r) {
  const Problem& p = r.c.problem;
  return nlohmann::ordered_json{{"impl", r.c.impl},
                        {"pass", pass_name(p.pass)},
                        {"dtype", flashattn::dtype_name(p.dtype)},
                        {"batch", p.batch},
                        {"heads_q", p.heads_q},
                        {"heads_k", p.heads_k},
                        {"seqlen_q", p.seqlen_q},
                        {"seqlen_k", p.seqlen_k},
                        {"head_dim", p.head_dim},
                        {"causal", p.causal},
                        {"bias", p.bias},
                        {"dbias", p.dbias},
                        {"dropout", p.dropout},
                        {"block_q", r.c.block_q},
                        {"block_k", r.c.block_k},
                        {"threads", r.threads},
                        {"status", r.status},
                        {"reps", r.reps},
                        {"ms_min", r.ms_min},
                        {"ms_median", r.ms_median},
                        {"flops", r.flops},
                        {"gflops", r.gflops},
                        {"peak_kind", r.peak_kind},
                        {"peak_gflops", r.peak_gflops},
                        {"efficiency", r.efficiency},
                        {"fp32_peak_gflops", r.fp32_peak_gflops},
                        {"fp32_efficiency", r.fp32_efficiency},
                        {"extra_bytes", r.extra_bytes},
                        {"extra_bytes_measured", r.extra_bytes_measured},
                        {"extra_bytes_declared", r.extra_bytes_declared},
                        {"check_against", r.check_against},
                        {"check_max_err", r.check_max_err},
                        {"check_bound", r.check_bound},
                        {"check_passed", r.check_passed},
                        {"check_note", r.check_note},
                        {"cpu", r.cpu}};
}

std::ofstream open_or_throw(const std::string& path) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  return f;
}

}  // namespace

void write_json(const std::string& path, const MachineInfo& m, const std::vector<Result>& rs) {
  nlohmann::ordered_json j;
  j["machine"] = {{"cpu_model", m.cpu_model}, {"l1d_bytes", m.l1d_bytes}, {"l2_bytes", m.l2_bytes},
                  {"simd_target", m.simd_target}, {"blas_core", m.blas_core},
                  {"gpu", m.gpu},             {"threads", m.threads},         {"peak_gflops_before", m.peak_before},
                  {"peak_gflops_after", m.peak_after}, {"peak_gflops", m.peak()},
                  {"bf16_peak_gflops_before", m.bf16_peak_before}, {"bf16_peak_gflops_after", m.bf16_peak_after},
                  {"bf16_peak_gflops", m.bf16_peak()}, {"load_average", m.load_average},
                  {"gpu_copy_gbps", m.gpu_copy_gbps}, {"gpu_gemm_bf16_gflops_before", m.gpu_gemm_before},
                  {"gpu_gemm_bf16_gflops_after", m.gpu_gemm_after}};
  j["results"] = nlohmann::ordered_json::array();
  for (const Result& r : rs) j["results"].push_back(record(r));
  open_or_throw(path) << j.dump(2) << '\n';
}

void write_csv(const std::string& path, const std::vector<Result>& rs) {
  std::ofstream f = open_or_throw(path);
  bool header = true;
  for (const Result& r : rs) {
    const nlohmann::ordered_json j = record(r);
    if (header) {
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) f << (first ? "" : ",") << it.key(), first = false;
      f << '\n';
      header = false;
    }
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      f << (first ? "" : ",");
      first = false;
      if (it->is_string()) {
        std::string s = it->get<std::string>();
        std::string q;
        for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
        f << '"' << q << '"';
      } else {
        f << it->dump();
      }
    }
    f << '\n';
  }
}

}  // namespace bench
