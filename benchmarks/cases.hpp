// Benchmark cases: one (implementation, problem) pair each, and how option lists expand into them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/types.hpp"

namespace bench {

enum class Pass { fwd, bwd };
const char* pass_name(Pass p);

// The problem a case computes: every field that changes the inputs or the work.
struct Problem {
  Pass pass = Pass::fwd;
  flashattn::DType dtype = flashattn::DType::f32;
  int64_t batch = 1, heads_q = 1, heads_k = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 64;
  bool causal = false;
  std::string bias = "none";  // additive bias: none, full [B, Nq, Hq, Nk], keys [1, 1, Hq, Nk], rows [1, Nq, 1, Nk]
  bool dbias = false;         // backward: also compute dbias
  float dropout = 0;          // dropout probability

  bool operator==(const Problem& o) const;
  // Returns "fwd f32 B=1 H=8/8 N=1024x1024 d=64 causal" (plus " bias=full dbias dropout=0.1" when
  // set) for messages.
  std::string describe() const;
  // Returns the mask column of the tables: "causal" or "none", with "+bias:<kind>", "+dbias" and
  // "+drop<p>" when set.
  std::string mask_text() const;
};

// One timed row: an implementation on a problem, with optional CPU tile sizes (0: library default).
struct Case {
  std::string impl;  // "reference", "cpu", "gpu" or "standard"
  Problem problem;
  int block_q = 0, block_k = 0;
};

// Returns the FLOPs of docs/benchmarks.md's convention: fwd = 4·B·Hq·Nq·Nk·d, halved for causal when
// Nq = Nk; bwd = 2.5 × fwd. For causal with Nq ≠ Nk, counts the visible (i, j) pairs exactly.
double flops(const Problem& p);

// Returns the number of visible (query, key) pairs of one head (exact, from flashattn::Mask).
double visible_pairs(const Problem& p);

// Option lists as the command line gives them; expand() makes their cartesian product.
struct Grid {
  std::vector<std::string> impls;
  std::vector<Pass> passes;
  std::vector<flashattn::DType> dtypes;
  std::vector<int64_t> batch, heads, heads_k, seqlen, seqlen_q, seqlen_k, head_dim;
  std::vector<int> causal;
  std::vector<int> block_q, block_k;  // CPU tile sizes; {0} means the library default
  std::vector<std::string> bias = {};   // none, full, keys, rows (empty: none)
  std::vector<int> dbias = {};          // 0, 1 (empty: 0)
  std::vector<float> dropout = {};      // probabilities (empty: 0)
};

// Returns one case per combination of grid values, grouped so that cases sharing a problem are
// adjacent (the trusted result is computed once per problem). heads_k empty: equal to heads;
// seqlen_q/seqlen_k empty: taken from seqlen.
std::vector<Case> expand(const Grid& g);

// Returns the built-in default set: every available implementation on small (oracle-checked),
// medium and large problems, sized to finish in about 1-2 minutes on a 2-core machine.
std::vector<Case> default_cases(const std::vector<std::string>& available_impls);

}  // namespace bench
