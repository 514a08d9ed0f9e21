// Entry points of flashattn::cpu (include/flashattn/cpu.hpp): validate, plan, dispatch once.
#include <string>

#include "flashattn/cpu.hpp"
#include "flashattn/error.hpp"
#include "flashattn/validate.hpp"
#include "decode.h"
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

}  // namespace

void forward(const ForwardArgs& a, const Config& c) {
  validate(a);
  const detail::Plan p = detail::make_plan(a, c, false);
  if (detail::decode_applies(a, c, p)) {
    detail::decode_on_target(choose_target(c), a, p, detail::make_decode_plan(a, c, p, 0));
    return;
  }
  detail::forward_on_target(choose_target(c), a, p);
}

void backward(const BackwardArgs& a, const Config& c) {
  validate(a);
  const detail::Plan p = detail::make_plan(a, c, true);
  detail::backward_on_target(choose_target(c), a, p);
}

size_t workspace_bytes(const ForwardArgs& a, const Config& c) {
  validate(a);
  const detail::Plan p = detail::make_plan(a, c, false);
  if (detail::decode_applies(a, c, p)) {
    const detail::DecodePlan dp = detail::make_decode_plan(a, c, p, 0);
    return (static_cast<size_t>(p.threads) * detail::decode_scratch_floats(dp, p.exact_scores) +
            detail::decode_partial_floats(dp, p.sequences, a.k.heads, a.v.dim)) *
           sizeof(float);
  }
  return (static_cast<size_t>(p.threads) * detail::forward_scratch_floats(p) + detail::forward_shared_floats(p)) *
         sizeof(float);
}

size_t workspace_bytes(const BackwardArgs& a, const Config& c) {
  validate(a);
  const detail::Plan p = detail::make_plan(a, c, true);
  return (static_cast<size_t>(p.threads) * detail::backward_scratch_floats(p) + detail::backward_partial_floats(p)) *
         sizeof(float);
}

}  // namespace flashattn::cpu
