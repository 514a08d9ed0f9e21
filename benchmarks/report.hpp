// Results of a benchmark run and their table, JSON and CSV forms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cases.hpp"

namespace bench {

// One row of results: a case, its timing, memory and check.
struct Result {
  Case c;
  std::string status = "ok";  // "ok", "skipped: …", "error: …"
  int threads = 0;
  double ms_min = 0, ms_median = 0;
  int reps = 0;
  double flops = 0, gflops = 0;
  // The ceiling the case is judged against: the GPU's bf16 GEMM for gpu rows; on the CPU the bf16
  // dot product for bf16 inputs (when the CPU has one), else the fp32 FMA. peak_kind names it.
  std::string peak_kind;
  double peak_gflops = 0, efficiency = 0;
  double fp32_peak_gflops = 0, fp32_efficiency = 0;  // CPU rows: against the fp32 FMA peak, whatever the dtype
  std::string cpu;  // MachineInfo::cpu_model, repeated so that every CSV line names its machine
  size_t extra_bytes = 0;           // max(measured heap growth, declared)
  size_t extra_bytes_measured = 0;  // heap growth during the first call (alloc meter)
  size_t extra_bytes_declared = 0;  // what the implementation states (workspace_bytes, N² buffers)
  std::string check_against;        // "oracle", "cpu-f32", "standard-f32", "none", "skipped"
  double check_max_err = 0, check_bound = 0;
  bool check_passed = false;
  std::string check_note;
};

// Machine facts printed with the table and stored in JSON.
struct MachineInfo {
  std::string cpu_model, simd_target, blas_core, gpu;  // cpu_model: name, family and model (cpu_description)
  int64_t l1d_bytes = 0, l2_bytes = 0;     // per-core cache sizes (0: unknown)
  int threads = 0;
  double peak_before = 0, peak_after = 0;  // fp32 FMA GFLOP/s, measured right before and after the timings
  double bf16_peak_before = 0, bf16_peak_after = 0;  // bf16 dot-product GFLOP/s likewise (0: no AVX512_BF16)
  double load_average = 0;                 // 1-minute load average at the start (other processes)
  double gpu_copy_gbps = 0;                // GPU device-to-device copy, GB/s (0: no GPU)
  double gpu_gemm_before = 0, gpu_gemm_after = 0;  // cuBLAS bf16 GEMM GFLOP/s before and after
  double peak() const { return peak_before > peak_after ? peak_before : peak_after; }
  double bf16_peak() const { return bf16_peak_before > bf16_peak_after ? bf16_peak_before : bf16_peak_after; }
  double gpu_peak() const { return gpu_gemm_before > gpu_gemm_after ? gpu_gemm_before : gpu_gemm_after; }
};

// Prints the results as an aligned table.
void print_table(std::ostream& os, const std::vector<Result>& rs);

// Writes {"machine": {...}, "results": [...]} with one record per result.
void write_json(const std::string& path, const MachineInfo& m, const std::vector<Result>& rs);

// Writes a header line and one line per result.
void write_csv(const std::string& path, const std::vector<Result>& rs);

// Returns "1.23 MiB"-style text for a byte count.
std::string human_bytes(double bytes);

}  // namespace bench
