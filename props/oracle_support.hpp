// Helpers of the oracle's own properties: dense copies of tensors and calls built from them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "flashattn/args.hpp"
#include "flashattn/reference.hpp"
#include "props/case.hpp"

namespace props {

// Dense values of a [batch, seq, heads, dim] tensor.
struct Dense {
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  std::vector<double> data;

  Dense() = default;
  Dense(int64_t b, int64_t s, int64_t h, int64_t d) : batch(b), seq(s), heads(h), dim(d), data(size_t(b * s * h * d)) {}
  double& at(int64_t b, int64_t s, int64_t h, int64_t x) { return data[size_t(((b * seq + s) * heads + h) * dim + x)]; }
  double at(int64_t b, int64_t s, int64_t h, int64_t x) const {
    return data[size_t(((b * seq + s) * heads + h) * dim + x)];
  }
};

// Returns the dense values of a view.
Dense dense_of(const flashattn::ConstTensor& t);

// Everything of a call but its tensors (owned copies of the host arrays).
struct Options : flashattn::MaskOptions, flashattn::ScoreOptions {
  std::vector<float> alibi_slopes;
  int64_t alibi_batch_stride = 0;
  std::vector<int32_t> seqlens_k, cu_seqlens_q, cu_seqlens_k;
  int64_t varlen_batch = 0;
};

// Returns the options of a call with `sequences` sequences.
Options options_of(const flashattn::AttentionArgs& a);

// A call built from dense q, k, v, dout in one dtype (contiguous bshd storage it owns).
class Call {
 public:
  Call(const Options& o, flashattn::DType dtype, const Dense& q, const Dense& k, const Dense& v, const Dense& dout);
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  flashattn::reference::ForwardValues forward(flashattn::reference::Precision p) const;
  flashattn::reference::BackwardValues backward(flashattn::reference::Precision p) const;
  // Runs reference::forward (fp64), writing out (in the call's dtype) and lse; returns the args.
  const flashattn::BackwardArgs& run_forward();
  const flashattn::BackwardArgs& args() const { return args_; }

 private:
  Options options_;
  std::vector<unsigned char> q_, k_, v_, out_, dout_, dq_, dk_, dv_;
  std::vector<float> lse_;
  flashattn::ForwardArgs forward_args_;  // q, k, v, out, lse and the options
  flashattn::BackwardArgs args_;         // the same views, out and lse as inputs, plus dout and gradients
};

// Returns "" if |a − b| ≤ tol·max(1, max|b|) elementwise (±inf must match exactly), else where not.
std::string close(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what);

// Fails the current RapidCheck property with message `e` unless it is empty.
inline void require(const std::string& e) {
  if (!e.empty()) RC_FAIL(e);
}

// Fails the current property unless calls a and b give bitwise identical fp64 oracle values: out,
// lse, dq, dk, dv, and dbias when `with_dbias`.
void require_same_values(const flashattn::BackwardArgs& a, const flashattn::BackwardArgs& b, const char* what,
                         bool with_dbias = false);

// Returns "" if no value is NaN, else which.
std::string no_nan(const std::vector<double>& x, const char* what);

// Finite differences of the oracle's fp64 head functions (reference::Head), shared by the gradient
// properties. L = Σ dout ∘ O of one head (out has h.vdim() columns).
double head_loss(const flashattn::reference::Head& h, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, const std::vector<double>& dout);

// Returns "" if grad[i] equals the central difference of l() in *x[i] for every i (step 1e-6,
// |analytic − numeric| <= 1e-6·max(1, max|grad|)), else the first element that does not.
std::string check_central_differences(const char* name, const std::vector<double*>& x, const std::vector<double>& grad,
                                      const std::function<double()>& l);

// Pointers to every element of x (the form check_central_differences takes).
std::vector<double*> element_pointers(std::vector<double>& x);

}  // namespace props
