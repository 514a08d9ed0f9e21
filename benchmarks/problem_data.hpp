// Host buffers of one problem: random inputs in the problem's dtype and the outputs of one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cases.hpp"
#include "flashattn/args.hpp"
#include "impls.hpp"

namespace bench {

// A 64-byte aligned, zero-initialised host buffer (contents untouched by the alloc meter's windows).
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> ptr_;
  size_t bytes_ = 0;
};

// Outputs of one implementation's run, dense bshd like the inputs; lse fp32 [B, Hq, Nq].
struct Outputs {
  Buffer out, lse, dq, dk, dv, dbias;
};

// Inputs of a problem, contiguous bshd, values ~ N(0, 1) rounded to the dtype, fixed seed.
class ProblemData {
 public:
  explicit ProblemData(const Problem& p, uint64_t seed = 0x5eed);
  // Returns a copy with every tensor widened to f32 (same values): what a trusted fp32 run reads.
  ProblemData widened() const;

  const Problem& problem() const { return p_; }
  Outputs make_outputs() const;
  flashattn::ForwardArgs forward_args(Outputs& o) const;
  flashattn::BackwardArgs backward_args(Outputs& o) const;
  // Returns both calls over the same outputs (the forward's out and lse are the backward's inputs).
  Calls calls(Outputs& o) const { return Calls{forward_args(o), backward_args(o)}; }

  size_t q_elems() const;
  size_t k_elems() const;
  size_t lse_elems() const;

 private:
  ProblemData() = default;
  // Returns the bias view's sizes [batch, seq, heads, dim] ([0, 0, 0, 0] without a bias).
  std::vector<int64_t> bias_sizes() const;

  Problem p_;
  Buffer q_, k_, v_, dout_, bias_;
};

// Returns the n elements of a dense buffer of dtype t as doubles.
std::vector<double> to_doubles(const Buffer& b, flashattn::DType t, size_t n);

}  // namespace bench
