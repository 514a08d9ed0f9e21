// Helpers shared by the reliability tests: an owned contiguous (bshd) problem with its buffers,
// reading views back, and the tolerance rule against the oracle (props/tolerance.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/args.hpp"
#include "flashattn/reference.hpp"

namespace flashattn::reliability {

struct Shape {
  int64_t batch = 1, nq = 1, nk = 1, hq = 1, hk = 1, d = 1;
  DType dtype = DType::f32;
};

// Which tensor of a Problem.
enum class Which { q, k, v, out, dout, dq, dk, dv };

// A problem that owns contiguous bshd buffers for every tensor (and lse), filled with values
// uniform in [-1, 1] from `seed`. Varlen problems have batch 1 and hold cu_seqlens arrays.
class Problem {
 public:
  Problem(const Shape& s, uint32_t seed);
  // A varlen problem: sequence i has lengths_q[i] queries and lengths_k[i] keys, packed.
  Problem(const std::vector<int32_t>& lengths_q, const std::vector<int32_t>& lengths_k, int64_t hq, int64_t hk,
          int64_t d, DType dtype, uint32_t seed);

  // Arguments whose outputs are this problem's out/lse (forward) or dq/dk/dv (backward); options
  // (mask, scale, ...) are copied from `options`.
  ForwardArgs forward_args(const ForwardArgs& options = {});
  BackwardArgs backward_args(const ForwardArgs& options = {});

  Tensor view(Which w);
  // Element (b, s, h, x) of tensor w, read as float / written rounded to the dtype.
  float get(Which w, int64_t b, int64_t s, int64_t h, int64_t x);
  void set(Which w, int64_t b, int64_t s, int64_t h, int64_t x, float value);

  // Returns a copy of the bytes of tensor w (for bitwise comparisons).
  std::vector<unsigned char> bytes(Which w) const;
  // Returns the bytes of every output after a pass: out, dq, dk, dv, then lse.
  std::vector<unsigned char> output_bytes() const;

  Shape shape;
  std::vector<float> lse;
  std::vector<int32_t> cu_q, cu_k;  // empty unless varlen

 private:
  std::vector<unsigned char>& storage(Which w);
  void allocate(uint32_t seed);
  std::vector<unsigned char> q_, k_, v_, out_, dout_, dq_, dk_, dv_;
};

// Returns every element of view t as double, dense in [batch, seq, heads, dim] order.
std::vector<double> read_dense(const ConstTensor& t);

// Judges an implementation's results against the fp64 oracle by the tolerance rule every test
// uses (props/tolerance.hpp, docs/semantics.md "How the tests judge a backend"): forward, a.out and
// a.lse; backward, a.dq, a.dk, a.dv, with a.out and a.lse holding what the backward was given.
// Returns "" when every output passes, else the first failing output's description.
std::string check_forward(const ForwardArgs& a);
std::string check_backward(const BackwardArgs& a);


}  // namespace flashattn::reliability
