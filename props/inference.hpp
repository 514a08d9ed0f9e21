// props::InferenceProblem: a generated decode-shaped call with the inference options of
// docs/semantics.md ("Inference"): paged K/V (random page size, pages in a random order, a prefix of
// pages shared between sequences, unused pages and table entries holding garbage), a KV-cache
// append with rotary embeddings, sinks, dv != d and num_splits; and the same call in plain forms
// (contiguous caches, the appended rows and the rotation done by this file's own code) that the
// oracle properties and the CPU cross-check compare it with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "flashattn/args.hpp"

namespace props {

struct InferenceSpec {
  int64_t batch = 1, heads_k = 1, group = 1, seqlen_q = 1, dim = 8, dim_v = 8;
  flashattn::DType dtype = flashattn::DType::f32;
  bool causal = false;
  float softcap = 0;
  bool sinks = false;
  int64_t page_size = 0;  // 0: contiguous caches
  bool share_prefix = false;
  std::vector<int32_t> lengths;  // cache length of each sequence before the call
  int64_t new_rows = 0;          // rows appended (append used when `append`)
  bool append = false;
  int64_t rotary_dim = 0;  // 0: no rotary
  bool interleaved = false;
  int64_t num_splits = 0;
  uint64_t seed = 0;

  int64_t heads_q() const { return heads_k * group; }
  int64_t capacity() const;  // rows per sequence of the caches (a multiple of page_size when paged)
  std::string describe() const;
};

// Generates specs; `append` -1: sometimes, 0: never, 1: always. Only f32 when `f32_only`.
rc::Gen<InferenceSpec> gen_inference(int append = -1, bool f32_only = false);

// Owns the buffers of one problem. `call()` is the call under test (paged and/or append as the spec
// says; out and lse poisoned with NaN); `plain()` is the equivalent plain call: contiguous k and v
// holding each sequence's keys after the append (new keys rotated by this file), q rotated, the
// same options, seqlens_k the lengths after the append, its own out and lse.
class InferenceProblem {
 public:
  explicit InferenceProblem(const InferenceSpec& s);
  InferenceProblem(const InferenceProblem&) = delete;
  InferenceProblem& operator=(const InferenceProblem&) = delete;

  flashattn::ForwardArgs call();
  flashattn::ForwardArgs plain();
  const InferenceSpec& spec() const { return spec_; }

  // Returns "" if the caches hold, bitwise, the rows before the call everywhere except rows
  // [L_b, L_b + Nnew) of each sequence, which hold the rotated new keys and the new values; else
  // the first difference.
  std::string check_caches() const;

  // Restores the caches to their state before the call (to run another implementation).
  void reset_caches();

  // Returns the out and lse of call() / plain() as doubles (dense [B, Nq, Hq, dv], [B, Hq, Nq]).
  std::vector<double> out_of_call() const;
  std::vector<double> lse_of_call() const;
  std::vector<double> out_of_plain() const;
  std::vector<double> lse_of_plain() const;

 private:
  size_t es() const;
  InferenceSpec spec_;
  std::vector<unsigned char> q_, qrot_, kc_, vc_, kc0_, vc0_, kexp_, vexp_, knew_, vnew_, kflat_, vflat_, out_, pout_;
  std::vector<float> lse_, plse_, cos_, sin_, sinks_;
  std::vector<int32_t> table_, lengths_, after_;
  int64_t pages_ = 0, stride_ = 0;
};

}  // namespace props
