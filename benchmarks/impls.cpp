// Runners for the oracle, the CPU backend (when built), the GPU backend (when built) and the
// standard baseline.
#include "impls.hpp"

#include <omp.h>

#include <sstream>

#include "flashattn/reference.hpp"
#include "standard.hpp"
#ifdef FLASHATTN_HAVE_CPU
#include "flashattn/cpu.hpp"
#endif
#ifdef FLASHATTN_HAVE_GPU
#include "gpu_bench.hpp"
#endif

namespace bench {

namespace {

std::string gib(double bytes) {
  std::ostringstream s;
  s.precision(3);
  s << bytes / double(1 << 30) << " GiB";
  return s.str();
}

// The fp64 oracle as an implementation: timed only where its cost is below the oracle limit.
class ReferenceRunner : public Runner {
 public:
  std::string name() const override { return "reference"; }
  std::string refuse(const Case& c, const RunSettings& s) const override {
    if (oracle_cost(c.problem) <= s.oracle_limit) return "";
    std::ostringstream m;
    m << "oracle cost " << oracle_cost(c.problem) << " multiply-adds > --oracle-limit " << s.oracle_limit;
    return m.str();
  }
  void forward(const flashattn::ForwardArgs& a, const Case&, bool) override { flashattn::reference::forward(a); }
  void backward(const flashattn::BackwardArgs& a, const Case&) override { flashattn::reference::backward(a); }
  size_t declared_bytes(const Calls&, const Case&) const override { return 0; }
};

#ifdef FLASHATTN_HAVE_CPU
class CpuRunner : public Runner {
 public:
  explicit CpuRunner(const RunSettings& s) : threads_(s.threads) {}
  std::string name() const override { return "cpu"; }
  std::string refuse(const Case&, const RunSettings&) const override { return ""; }
  void forward(const flashattn::ForwardArgs& a, const Case& c, bool) override { flashattn::cpu::forward(a, config(c)); }
  void backward(const flashattn::BackwardArgs& a, const Case& c) override { flashattn::cpu::backward(a, config(c)); }
  size_t declared_bytes(const Calls& a, const Case& c) const override {
    if (c.problem.pass == Pass::fwd) return flashattn::cpu::workspace_bytes(a.forward, config(c));
    return flashattn::cpu::workspace_bytes(a.backward, config(c));
  }

 private:
  flashattn::cpu::Config config(const Case& c) const {
    flashattn::cpu::Config cfg;
    cfg.block_q = c.block_q;
    cfg.block_k = c.block_k;
    cfg.threads = threads_;
    return cfg;
  }
  int threads_ = 0;
};
#endif

class StandardRunner : public Runner {
 public:
  std::string name() const override { return "standard"; }
  std::string refuse(const Case& c, const RunSettings& s) const override {
    if (c.problem.bias != "none" || c.problem.dropout != 0) return "no bias or dropout in the materialised baseline";
    const double need = static_cast<double>(bytes_for(c.problem));
    if (need <= s.memory_budget) return "";
    return "out of memory: needs " + gib(need) + " of N² buffers > budget " + gib(s.memory_budget) + " (--mem-limit)";
  }
  void prepare(const Calls&) override { std_.release(); }
  void forward(const flashattn::ForwardArgs& a, const Case&, bool for_backward) override { std_.forward(a, for_backward); }
  void backward(const flashattn::BackwardArgs& a, const Case&) override { std_.backward(a); }
  size_t declared_bytes(const Calls& a, const Case& c) const override {
    const int threads = omp_get_max_threads();
    return c.problem.pass == Pass::fwd ? Standard::forward_bytes(a.forward, false, threads)
                                       : Standard::backward_bytes(a.backward, threads);
  }

 private:
  // Returns the buffer bytes of a case without building tensors (shape-only arguments).
  static size_t bytes_for(const Problem& p) {
    flashattn::AttentionArgs a;
    a.q = flashattn::bshd(nullptr, p.dtype, p.batch, p.seqlen_q, p.heads_q, p.head_dim);
    a.k = flashattn::bshd(nullptr, p.dtype, p.batch, p.seqlen_k, p.heads_k, p.head_dim);
    const int threads = omp_get_max_threads();
    return p.pass == Pass::fwd ? Standard::forward_bytes(a, false, threads) : Standard::backward_bytes(a, threads);
  }
  Standard std_;
};

}  // namespace

double oracle_cost(const Problem& p) {
  constexpr double kFwdProducts = 2;  // S = QKᵀ and O = PV
  constexpr double kBwdProducts = 6;  // forward again, then dV, dP, dQ, dK
  const double per = static_cast<double>(p.batch * p.heads_q * p.seqlen_q * p.seqlen_k * p.head_dim);
  return per * (p.pass == Pass::fwd ? kFwdProducts : kBwdProducts);
}

std::vector<std::string> available_impls() {
  std::vector<std::string> v{"reference"};
#ifdef FLASHATTN_HAVE_CPU
  v.push_back("cpu");
#endif
#ifdef FLASHATTN_HAVE_GPU
  if (!gpu_name().empty()) v.push_back("gpu");  // built, and a GPU is present
#endif
  v.push_back("standard");
  return v;
}

std::unique_ptr<Runner> make_runner(const std::string& name, const RunSettings& s) {
  if (name == "reference") return std::make_unique<ReferenceRunner>();
#ifdef FLASHATTN_HAVE_CPU
  if (name == "cpu") return std::make_unique<CpuRunner>(s);
#endif
#ifdef FLASHATTN_HAVE_GPU
  if (name == "gpu") return make_gpu_runner();
#endif
  if (name == "standard") return std::make_unique<StandardRunner>();
  (void)s;
  return nullptr;
}

}  // namespace bench
