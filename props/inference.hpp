// props::InferenceProblem: a generated decode-shaped call with the inference options of
// docs/semantics.md ("Inference"): paged K/V (random page size, pages in a random order, a prefix of
// pages shared between sequences, unused pages and table entries holding garbage), a KV-cache
// append with rotary embeddings, sinks, dv != d and num_splits; and the same call in plain forms
// (contiguous caches, the appended rows and the rotation done by this file's own code) that the
// oracle properties and the CPU cross-check compare it with.
#pragma once

#include <cstdint>
#include <functional>
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

// Which problems gen_inference draws.
enum class InferenceDims {
  any,  // head dims 1..33 and dv from a small set, every dtype, caches of up to 13 rows
  f32,  // as any, f32 only
  gpu,  // the GPU kernels' (d, dv) pairs (32..256 with dv = d, 192/128, 576/512), f16/bf16, caches
        // of up to 300 rows (several key tiles, so split-KV splits), page sizes up to 64
};

// Generates specs; `append` -1: sometimes, 0: never, 1: always.
rc::Gen<InferenceSpec> gen_inference(int append = -1, InferenceDims dims = InferenceDims::any);

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

// Runs `forward` on p.call() (after restoring the caches) and returns "" if the caches then hold
// exactly the documented rows (bitwise) and out and lse pass the tolerance rule against the oracle
// on p.plain(); else the first failure.
std::string check_inference_forward(InferenceProblem& p, const std::function<void(const flashattn::ForwardArgs&)>& forward);

// The backward of a problem's plain call (its spec must have contiguous caches: page_size 0): the
// oracle's out and lse as the forward's, a random dout, gradient buffers, and dsinks when the spec
// has sinks.
class InferenceBackward {
 public:
  explicit InferenceBackward(InferenceProblem& p);
  InferenceBackward(const InferenceBackward&) = delete;
  InferenceBackward& operator=(const InferenceBackward&) = delete;

  const flashattn::BackwardArgs& args() const { return b_; }
  // Returns "" if dq, dk, dv (and dsinks) as the implementation wrote them pass the tolerance rule.
  std::string judge() const;

 private:
  bool sinks_;
  flashattn::BackwardArgs b_;
  std::vector<unsigned char> dout_, dq_, dk_, dv_;
  std::vector<float> dsinks_;
};

}  // namespace props
