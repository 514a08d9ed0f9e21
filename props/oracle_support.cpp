// Helpers of the oracle's own properties (see oracle_support.hpp).
#include "props/oracle_support.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "flashattn/convert.hpp"
#include "flashattn/problem.hpp"
#include "props/buffers.hpp"
#include "tolerance/compare.hpp"

namespace props {

using namespace ::flashattn::tolerance;  // NOLINT: the suite speaks the tolerance rule's vocabulary
namespace {

using flashattn::DType;
using flashattn::Tensor;

// Allocates contiguous bshd storage for `d` in `dtype`, stores its values, returns the view.
Tensor store(std::vector<unsigned char>& mem, DType dtype, const Dense& d) {
  mem.assign(std::max<size_t>(1, d.data.size()) * flashattn::dtype_size(dtype), 0);
  const Tensor t = flashattn::bshd(mem.data(), dtype, d.batch, d.seq, d.heads, d.dim);
  write_dense(t, d.data);
  return t;
}

}  // namespace

Dense dense_of(const flashattn::ConstTensor& t) {
  Dense d(t.batch, t.seq, t.heads, t.dim);
  d.data = read_dense(t);
  return d;
}

Options options_of(const flashattn::AttentionArgs& a) {
  Options o;
  flashattn::copy_value_options(o, a);
  const int64_t nseq = flashattn::num_sequences(a);
  if (a.alibi_slopes) {
    o.alibi_batch_stride = a.alibi_batch_stride;
    o.alibi_slopes.assign(a.alibi_slopes, a.alibi_slopes + (a.alibi_batch_stride ? nseq * a.alibi_batch_stride : a.q.heads));
  }
  if (a.seqlens_k) o.seqlens_k.assign(a.seqlens_k, a.seqlens_k + nseq);
  if (a.cu_seqlens_q) {
    o.cu_seqlens_q.assign(a.cu_seqlens_q, a.cu_seqlens_q + nseq + 1);
    o.cu_seqlens_k.assign(a.cu_seqlens_k, a.cu_seqlens_k + nseq + 1);
    o.varlen_batch = a.varlen_batch;
  }
  return o;
}

Call::Call(const Options& o, DType dtype, const Dense& q, const Dense& k, const Dense& v, const Dense& dout)
    : options_(o) {
  flashattn::ForwardArgs& a = forward_args_;
  a.q = store(q_, dtype, q);
  a.k = store(k_, dtype, k);
  a.v = store(v_, dtype, v);
  a.out = store(out_, dtype, Dense(q.batch, q.seq, q.heads, q.dim));
  lse_.assign(static_cast<size_t>(std::max<int64_t>(1, q.batch * q.heads * q.seq)), 0.0f);
  a.lse = lse_.data();
  flashattn::copy_value_options(a, options_);
  if (!options_.alibi_slopes.empty()) {
    a.alibi_slopes = options_.alibi_slopes.data();
    a.alibi_batch_stride = options_.alibi_batch_stride;
  }
  if (!options_.seqlens_k.empty()) a.seqlens_k = options_.seqlens_k.data();
  if (!options_.cu_seqlens_q.empty()) {
    a.cu_seqlens_q = options_.cu_seqlens_q.data();
    a.cu_seqlens_k = options_.cu_seqlens_k.data();
    a.varlen_batch = options_.varlen_batch;
  }
  args_ = flashattn::backward_args(a);
  args_.dout = store(dout_, dtype, dout);
  args_.dq = store(dq_, dtype, Dense(q.batch, q.seq, q.heads, q.dim));
  args_.dk = store(dk_, dtype, Dense(k.batch, k.seq, k.heads, k.dim));
  args_.dv = store(dv_, dtype, Dense(k.batch, k.seq, k.heads, k.dim));
}

flashattn::reference::ForwardValues Call::forward(flashattn::reference::Precision p) const {
  return flashattn::reference::forward_values(args_, p);
}

flashattn::reference::BackwardValues Call::backward(flashattn::reference::Precision p) const {
  return flashattn::reference::backward_values(args_, p);
}

const flashattn::BackwardArgs& Call::run_forward() {
  flashattn::reference::forward(forward_args_, flashattn::reference::Precision::fp64);
  return args_;
}

std::string close(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what) {
  if (a.size() != b.size()) return std::string(what) + ": sizes differ";
  const double limit = tol * std::max(1.0, max_abs_finite(b));
  for (size_t i = 0; i < a.size(); ++i) {
    const bool ok = std::isfinite(b[i]) ? std::isfinite(a[i]) && std::fabs(a[i] - b[i]) <= limit : a[i] == b[i];
    if (!ok) {
      std::ostringstream os;
      os.precision(17);
      os << what << "[" << i << "]: " << a[i] << " vs " << b[i] << " (allowed difference " << limit << ")";
      return os.str();
    }
  }
  return "";
}

std::string no_nan(const std::vector<double>& x, const char* what) {
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isnan(x[i])) return std::string(what) + "[" + std::to_string(i) + "] is NaN";
  return "";
}

double head_loss(const flashattn::reference::Head& h, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, const std::vector<double>& dout) {
  std::vector<double> out(size_t(h.nq * h.vdim())), lse(size_t(h.nq));
  flashattn::reference::head_forward(h, q.data(), k.data(), v.data(), out.data(), lse.data());
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += dout[i] * out[i];
  return l;
}

std::string check_central_differences(const char* name, const std::vector<double*>& x, const std::vector<double>& grad,
                                      const std::function<double()>& l) {
  // With fp64 the truncation error (~step²) and the cancellation error (~1e-16/step) are both
  // below 1e-9 at this step.
  constexpr double kStep = 1e-6, kTolerance = 1e-6;
  double scale = 1;
  for (double g : grad) scale = std::max(scale, std::fabs(g));
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = *x[i];
    *x[i] = saved + kStep;
    const double up = l();
    *x[i] = saved - kStep;
    const double down = l();
    *x[i] = saved;
    const double numeric = (up - down) / (2 * kStep);
    if (!(std::fabs(numeric - grad[i]) <= kTolerance * scale)) {
      std::ostringstream os;
      os.precision(12);
      os << name << "[" << i << "]: backward " << grad[i] << ", central difference " << numeric;
      return os.str();
    }
  }
  return "";
}

std::vector<double*> element_pointers(std::vector<double>& x) {
  std::vector<double*> r;
  for (double& e : x) r.push_back(&e);
  return r;
}

void require_same_values(const flashattn::BackwardArgs& a, const flashattn::BackwardArgs& b, const char* what,
                         bool with_dbias) {
  namespace ref = flashattn::reference;
  using ref::Precision;
  const auto fa = ref::forward_values(a, Precision::fp64), fb = ref::forward_values(b, Precision::fp64);
  const auto ga = ref::backward_values(a, Precision::fp64), gb = ref::backward_values(b, Precision::fp64);
  if (!same_bits(fa.out, fb.out) || !same_bits(fa.lse, fb.lse)) RC_FAIL(std::string(what) + ": out or lse differ");
  if (!same_bits(ga.dq, gb.dq) || !same_bits(ga.dk, gb.dk) || !same_bits(ga.dv, gb.dv))
    RC_FAIL(std::string(what) + ": dq, dk or dv differ");
  if (with_dbias && !same_bits(ga.dbias, gb.dbias)) RC_FAIL(std::string(what) + ": dbias differs");
}

}  // namespace props
