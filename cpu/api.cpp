// Entry points of flashattn::cpu (include/flashattn/cpu.hpp): validate, plan, dispatch once.
#include <string>

#include "flashattn/cpu.hpp"
#include "flashattn/error.hpp"
#include "flashattn/validate.hpp"
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
  if (target == detail::kTargetAvx3Bf16) detail::use_bf16_dot(p, a, backward);
  return p;
}

}  // namespace

void forward(const ForwardArgs& a, const Config& c) {
  validate(a);
  const int64_t target = choose_target(c);
  const detail::Plan p = plan_on(a, c, false, target);
  detail::forward_on_target(detail::hwy_target_of(target), a, p);
}

void backward(const BackwardArgs& a, const Config& c) {
  validate(a);
  const int64_t target = choose_target(c);
  const detail::Plan p = plan_on(a, c, true, target);
  detail::backward_on_target(detail::hwy_target_of(target), a, p);
}

size_t workspace_bytes(const ForwardArgs& a, const Config& c) {
  validate(a);
  const detail::Plan p = plan_on(a, c, false, choose_target(c));
  return (static_cast<size_t>(p.threads) * detail::forward_scratch_floats(p) + detail::forward_shared_floats(p)) *
         sizeof(float);
}

size_t workspace_bytes(const BackwardArgs& a, const Config& c) {
  validate(a);
  const detail::Plan p = plan_on(a, c, true, choose_target(c));
  return (static_cast<size_t>(p.threads) * detail::backward_scratch_floats(p) + detail::backward_partial_floats(p)) *
         sizeof(float);
}

}  // namespace flashattn::cpu
