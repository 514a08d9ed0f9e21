// The standard attention baseline: what people write without a fused kernel, made a fair opponent.
//
// Per (batch, query head), in parallel over heads (OpenMP, OpenBLAS single-threaded inside):
//   S = scale·Q Kᵀ (OpenBLAS sgemm), P = softmax(mask(S)) row by row (vector exp), O = P V (sgemm).
// The forward used for training keeps P for every head ([B, Hq, Nq, Nk] fp32); the backward reads it:
//   dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − rowsum(dO ∘ O)), dQ = scale·dS K, dK = scale·dSᵀ Q (sgemm).
// f16/bf16 inputs are converted to f32 first and results rounded back. Buffers are kept between
// calls (like a framework's caching allocator) until release(), so timings do not include
// first-touch page faults; their sizes are reported by forward_bytes / backward_bytes. Supports masks (causal, window, key lengths); not
// varlen, softcap or ALiBi (throws flashattn::Error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/args.hpp"

namespace bench {

class Standard {
 public:
  Standard();
  ~Standard();
  Standard(const Standard&) = delete;
  Standard& operator=(const Standard&) = delete;

  // Computes out and lse. With save_p, keeps P of every head for a following backward().
  void forward(const flashattn::ForwardArgs& a, bool save_p);
  // Computes dq, dk, dv from the P saved by the last forward(a, true) on the same tensors.
  void backward(const flashattn::BackwardArgs& a);

  // Returns the bytes the pass needs beyond inputs and outputs: the N² buffers (per thread for S or
  // dP; per head for the saved P, which the backward needs), f32 copies of 16-bit tensors, row sums.
  static size_t forward_bytes(const flashattn::AttentionArgs& a, bool save_p, int threads);
  static size_t backward_bytes(const flashattn::AttentionArgs& a, int threads);

  // Frees every buffer (the next call allocates and first-touches again, untimed by the benchmark's
  // protocol). Called between cases so one case's N² buffers never add to the next one's.
  void release();

  // Returns OpenBLAS's core type (openblas_get_corename), e.g. "SkylakeX".
  static std::string blas_core();

 private:
  struct Block;  // a grow-only, huge-page-advised float buffer
  float* ensure(std::vector<Block>& pool, size_t index, size_t floats);

  std::vector<Block> scratch_;  // per thread: S (forward) or dP (backward)
  std::vector<Block> saved_;    // [0]: P of every head from the last forward(…, true)
  std::vector<Block> copies_;   // f32 copies of 16-bit tensors and the row sums D
  const void* saved_q_ = nullptr;  // the q tensor whose P is saved
};

}  // namespace bench
