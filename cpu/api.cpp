// Entry points of flashattn::cpu (include/flashattn/cpu.hpp): validate, plan, dispatch once.
#include <algorithm>
#include <string>

#include "flashattn/append.hpp"
#include "flashattn/cpu.hpp"
#include "flashattn/dropout.hpp"
#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"
#include "decode.h"
#include "options.h"
#include "plan.h"

namespace flashattn::cpu {
namespace {

// Returns the target a call runs on: the forced one (checked against targets()) or the best.
int64_t choose_target(const Config& c) {
  const std::vector<Target> available = targets();
  if (c.target == 0) return available.front().bit;
  for (const Target& t : available) {
    if (t.bit == c.target) return t.bit;
  }
  std::string names;
  for (const Target& t : available) names += (names.empty() ? "" : ", ") + t.name;
  throw Error("cpu::Config.target (" + std::to_string(c.target) +
              ") is not a compiled target this CPU supports (available: " + names + ")");
}

// The plan of a validated call on `target` (choose_target).
detail::Plan plan_on(const AttentionArgs& a, const Config& c, bool backward, int64_t target) {
  detail::Plan p = detail::make_plan(a, c, backward);
  if (target == detail::kTargetAvx3Bf16) detail::use_bf16_dot(p, a, c, backward);
  return p;
}

// The plan of a validated backward call on `target`, with its dbias pass when dbias is requested.
detail::Plan backward_plan(const BackwardArgs& a, const Config& c, int64_t target) {
  detail::Plan p = plan_on(a, c, true, target);
  p.dbias = view_set(a.dbias);
  return p;
}

}  // namespace

// The general path (docs/semantics.md, Inference): validate everything, then write the appended
// rows into the caches (apply_append), then attend. Paged K/V and sinks run in the kernels; dv != d
// by zero padding (options.h). num_splits is not used by this path: it computes every row unsplit,
// which the contract allows (any split count agrees within the rule) and is bitwise independent of
// the thread count.
void forward(const ForwardArgs& a, const Config& c) {
  validate(a);
  const int64_t target = choose_target(c);
  detail::check_config(c);  // a bad Config is rejected before the append writes the caches
  const AppendedCall call = apply_append(a);
  // Decode-shaped calls (cpu/decode.h: a rule on the shapes only) take the decode path, which reads
  // paged K/V, dv != d and sinks in place and honours num_splits.
  {
    const detail::Plan p = detail::make_plan(call.args, c, false);
    if (detail::decode_applies(call.args, c, p)) {
      detail::decode_on_target(detail::hwy_target_of(target), call.args, p,
                               detail::make_decode_plan(call.args, c, p, call.args.num_splits));
      write_dropout_mask(call.args);
      return;
    }
  }
  detail::forward_equal_dims(call.args, [&](const ForwardArgs& f) {
    detail::forward_on_target(detail::hwy_target_of(target), f, plan_on(f, c, false, target));
  });
  write_dropout_mask(call.args);
}

void backward(const BackwardArgs& a, const Config& c) {
  validate(a);
  const int64_t target = choose_target(c);
  detail::backward_equal_dims(a, [&](const BackwardArgs& f) {
    detail::backward_on_target(detail::hwy_target_of(target), f, backward_plan(f, c, target));
  });
  detail::sink_gradients(a);
}

// The kernels' scratch for the call as the general path runs it: over the caches with an append, with
// equal head dims (the padded copies of dv != d and the rotated queries are not counted).
size_t workspace_bytes(const ForwardArgs& a, const Config& c) {
  validate(a);
  ForwardArgs f = a.append.used() ? appended_call(a, a.seqlens_k, a.q.data) : a;
  {
    const detail::Plan p = detail::make_plan(f, c, false);
    if (detail::decode_applies(f, c, p)) {
      const detail::DecodePlan dp = detail::make_decode_plan(f, c, p, f.num_splits);
      return (static_cast<size_t>(p.threads) * detail::decode_scratch_floats(dp, p.exact_scores) +
              detail::decode_partial_floats(dp, p.sequences, f.k.heads, f.v.dim)) *
             sizeof(float);
    }
  }
  f.q.dim = f.k.dim = std::max(a.q.dim, f.v.dim);
  const detail::Plan p = plan_on(f, c, false, choose_target(c));
  return (static_cast<size_t>(p.threads) * detail::forward_scratch_floats(p) + detail::forward_shared_floats(p)) *
         sizeof(float);
}

size_t workspace_bytes(const BackwardArgs& a, const Config& c) {
  validate(a);
  BackwardArgs f = a;
  f.q.dim = f.k.dim = std::max(a.q.dim, a.v.dim);
  const detail::Plan p = backward_plan(f, c, choose_target(c));
  return (static_cast<size_t>(p.threads) * detail::backward_scratch_floats(p) + detail::backward_partial_floats(p)) *
         sizeof(float);
}

}  // namespace flashattn::cpu
