// Cross-check of the GPU kernels on the inference options (docs/semantics.md, "Inference"), run by
// the host emulator (gpu/emu) on host memory, for the GPU's head-dim pairs (32..256 with dv = d,
// 192/128, 576/512 forward only), f16 and bf16:
//   forward over paged K/V (any page size, pages permuted and shared) and/or a KV-cache append with
//   rotary, sinks, dv != d and any num_splits (split-KV + combine kernel) is judged by the tolerance
//   rule against the oracle on the equivalent plain call, and the caches hold exactly the
//   documented rows afterwards (bitwise: the append kernel rounds as documented);
//   a fixed num_splits gives the same bits on every call;
//   backward with sinks (the dsinks kernel) and dv != d is judged by the tolerance rule, with the
//   deterministic dQ kernel and with atomic dQ.
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "emu/emu_api.hpp"
#include "emu/props_calls.hpp"
#include "props/check.hpp"
#include "props/inference.hpp"

namespace {

constexpr int kCases = 20;  // emulation is slow; FLASHATTN_PROPS_CASES overrides

TEST_CASE("gpu-emulated inference forward: paged, append + rotary, sinks, dv, num_splits agree with the oracle") {
  props::check("gpu-emulated/inference-forward", [] {
    const props::InferenceSpec s = *props::gen_inference(-1, props::InferenceDims::gpu);
    props::InferenceProblem p(s);
    const std::string failure = props::check_inference_forward(p, flashattn::gpu_emu::forward);
    if (!failure.empty()) RC_FAIL(failure + " | " + s.describe());
  }, kCases);
}

TEST_CASE("gpu-emulated inference forward: repeated split-KV calls are bitwise identical") {
  props::check("gpu-emulated/inference-repeat", [] {
    props::InferenceSpec s = *props::gen_inference(0, props::InferenceDims::gpu);
    s.num_splits = *rc::gen::inRange<int64_t>(2, 6);
    props::InferenceProblem p(s);
    flashattn::gpu_emu::forward_in_gpu_layout(p.call());
    const auto out1 = p.out_of_call(), lse1 = p.lse_of_call();
    flashattn::gpu_emu::forward_in_gpu_layout(p.call());
    const auto out2 = p.out_of_call(), lse2 = p.lse_of_call();
    RC_ASSERT(std::memcmp(out1.data(), out2.data(), out1.size() * sizeof(double)) == 0);
    RC_ASSERT(std::memcmp(lse1.data(), lse2.data(), lse1.size() * sizeof(double)) == 0);
  }, kCases / 2);
}

TEST_CASE("gpu-emulated inference backward: sinks (dsinks) and dv != d agree with the oracle") {
  props::check("gpu-emulated/inference-backward", [] {
    props::InferenceSpec s = *props::gen_inference(0, props::InferenceDims::gpu);
    RC_PRE(flashattn::gpu_emu::unsupported(s.dtype, s.dim, s.dim_v, true).empty());  // 576/512: forward only
    s.page_size = 0;  // the backward takes contiguous k, v
    s.share_prefix = false;
    props::InferenceProblem p(s);
    const props::InferenceBackward b(p);
    for (const bool deterministic : {true, false}) {
      flashattn::gpu_emu::backward_in_gpu_layout(b.args(), deterministic);
      const std::string failure = b.judge();
      if (!failure.empty())
        RC_FAIL(std::string(deterministic ? "deterministic: " : "atomic dQ: ") + failure + " | " + s.describe());
    }
  }, kCases);
}

}  // namespace
