// props::Instance: the tensors of one Case, materialised in guarded host buffers.
//
// Inputs (q, k, v, dout, seqlens_k, cu_seqlens, ALiBi slopes, bias) are filled deterministically from the
// case's seed in logical index order, so the same case in another layout holds the same values.
// Each *_args() call poisons the outputs with NaN and snapshots the inputs; check() then verifies
// canaries, untouched padding and bit-identical inputs.
#pragma once

#include <string>
#include <vector>

#include "flashattn/args.hpp"
#include "props/buffers.hpp"
#include "props/case.hpp"
#include "props/rng.hpp"

namespace props {

class Instance {
 public:
  explicit Instance(const Case& c);
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  const Case& problem() const { return case_; }

  // Returns forward arguments (out and lse poisoned with NaN; inputs snapshotted). With dropout the
  // keep mask is requested too (dropout_mask, poisoned with 0xA5 bytes).
  flashattn::ForwardArgs forward_args();

  // Returns backward arguments. out and lse hold the fp64 oracle's forward (rounded to their
  // dtypes) and are inputs here; dq, dk, dv (and dbias with a bias) are poisoned; inputs are
  // snapshotted.
  flashattn::BackwardArgs backward_args();

  // Returns "" if, since the last *_args() call, no canary or padding byte of any buffer changed
  // and every input is bit-identical; else a description of the first violation.
  std::string check() const;

  // Views (valid for the lifetime of the instance).
  const flashattn::Tensor& q() const { return q_.view; }
  const flashattn::Tensor& k() const { return k_.view; }
  const flashattn::Tensor& v() const { return v_.view; }
  const flashattn::Tensor& out() const { return out_.view; }
  const flashattn::Tensor& dout() const { return dout_.view; }
  const flashattn::Tensor& dq() const { return dq_.view; }
  const flashattn::Tensor& dk() const { return dk_.view; }
  const flashattn::Tensor& dv() const { return dv_.view; }
  const flashattn::Tensor& dbias() const { return dbias_.view; }
  const float* lse() const { return reinterpret_cast<const float*>(lse_.data()); }
  const uint8_t* dropout_mask() const { return mask_.data(); }
  int64_t dropout_mask_bytes() const { return static_cast<int64_t>(mask_.bytes()); }
  int64_t lse_count() const { return lse_count_; }
  // The block-sparse mask of the case (unused: blocks == off); its arrays are guarded inputs.
  const flashattn::BlockMask& block_mask() const { return block_mask_; }

 private:
  void fill_inputs();
  void fill_block_mask(Rng& rng);
  flashattn::ForwardArgs base_args();

  Case case_;
  GuardedTensor q_, k_, v_, out_, dout_, dq_, dk_, dv_, bias_, dbias_;
  Buffer lse_, key_lengths_, cu_q_, cu_k_, alibi_, mask_;
  Buffer full_count_, full_index_, partial_count_, partial_index_, bits_;  // block mask
  flashattn::BlockMask block_mask_;
  int64_t lse_count_ = 0;
  bool backward_ = false;  // whether the last call was backward (out and lse are then inputs)
};

// Returns the scale a case's call uses (its custom scale or 1/sqrt(dim)).
double effective_scale(const Case& c);

}  // namespace props
