// Trusted results and checks. See trusted.hpp.
#include "trusted.hpp"

#include <algorithm>

#include "flashattn/reference.hpp"
#include "tolerance/judge.hpp"

namespace bench {

namespace {
// How far past --oracle-limit the oracle may still be used when it is the only trusted result.
constexpr double kOracleFallbackFactor = 16;
}  // namespace

std::vector<std::string> checked_tensors(Pass p) {
  if (p == Pass::fwd) return {"out", "lse"};
  return {"dq", "dk", "dv"};
}

Trusted::Trusted(const ProblemData& data, const RunSettings& s, std::function<Runner*(const std::string&)> runner)
    : data_(data), settings_(s), runner_(std::move(runner)) {}

std::vector<std::vector<double>> Trusted::read(const Outputs& o, flashattn::DType t) const {
  if (data_.problem().pass == Pass::fwd)
    return {to_doubles(o.out, t, data_.q_elems()), to_doubles(o.lse, flashattn::DType::f32, data_.lse_elems())};
  return {to_doubles(o.dq, t, data_.q_elems()), to_doubles(o.dk, t, data_.k_elems()), to_doubles(o.dv, t, data_.k_elems())};
}

const Trusted::Values* Trusted::fp32_by(const std::string& name) {
  auto it = cache_.find(name);
  if (it != cache_.end()) return &it->second;
  if (refused_.count(name)) return nullptr;
  Runner* r = runner_(name);
  ProblemData wide = data_.widened();
  Case c{name, wide.problem(), 0, 0};
  const std::string why = r ? r->refuse(c, settings_) : "not built";
  if (!why.empty()) {
    refused_[name] = why;
    return nullptr;
  }
  Outputs o = wide.make_outputs();
  const Calls a = wide.calls(o);
  r->prepare(a);
  r->forward(a.forward, c, c.problem.pass == Pass::bwd);
  if (c.problem.pass == Pass::bwd) r->backward(a.backward, c);
  r->fetch(a, c.problem.pass);
  Values v;
  v.ref = read(o, flashattn::DType::f32);
  // read() uses data_'s element counts, which the widened copy shares.
  return &cache_.emplace(name, std::move(v)).first->second;
}

CheckResult Trusted::check(const std::string& impl, Outputs& o) {
  const Problem& p = data_.problem();
  const std::vector<std::string> names = checked_tensors(p.pass);
  const std::vector<std::vector<double>> got = read(o, p.dtype);
  CheckResult res;
  auto finish = [&]() {
    res.passed = true;
    double worst = -1;
    for (const TensorCheck& t : res.tensors) {
      res.passed = res.passed && t.passed;
      const double ratio = t.bound > 0 ? t.max_err / t.bound : (t.max_err > 0 ? 1e300 : 0);
      if (!t.passed) res.note += (res.note.empty() ? "" : "; ") + t.name + (t.detail.empty() ? " over bound" : ": " + t.detail);
      if (ratio > worst) {
        worst = ratio;
        res.max_err = t.max_err;
        res.bound = t.bound;
      }
    }
    return res;
  };
  auto against_oracle = [&]() {
    // The tests' rule (props/tolerance.hpp) on this implementation's outputs; for the backward,
    // o.out and o.lse hold the forward results its backward was given (the rule's contract term).
    const flashattn::tolerance::Judgement j =
        p.pass == Pass::fwd ? flashattn::tolerance::judge_forward(data_.forward_args(o)) : flashattn::tolerance::judge_backward(data_.backward_args(o));
    res.against = "oracle";
    for (const flashattn::tolerance::Verdict& v : j.verdicts) {
      TensorCheck t;
      t.name = v.output;
      t.max_err = v.result.max_error;
      t.bound = v.result.bound;
      t.passed = v.result.passed;
      if (!v.result.passed && v.result.reason != "error above the bound") t.detail = v.message();
      res.tensors.push_back(t);
    }
    return finish();
  };
  if (oracle_cost(p) <= settings_.oracle_limit) return against_oracle();
  // Too big for the oracle: another fp32 implementation; the CPU backend is checked by the
  // independent standard baseline, everything else by the CPU backend first.
  std::vector<std::string> order = impl == "cpu" ? std::vector<std::string>{"standard"} : std::vector<std::string>{"cpu", "standard"};
  order.erase(std::remove(order.begin(), order.end(), impl), order.end());
  for (const std::string& name : order) {
    const Values* v = fp32_by(name);
    if (!v) continue;
    res.against = name + "-f32";
    for (size_t t = 0; t < names.size(); ++t)
      res.tensors.push_back(check_vs_trusted_f32(names[t], got[t], v->ref[t], p.dtype, p.pass == Pass::fwd ? flashattn::tolerance::kOutFactor : flashattn::tolerance::kGradFactor,
                                                 p.seqlen_q, p.seqlen_k));
    return finish();
  }
  // No independent fp32 implementation here (e.g. the CPU backend not built): the oracle, slowly,
  // while it stays within kOracleFallbackFactor times the limit.
  if (oracle_cost(p) <= kOracleFallbackFactor * settings_.oracle_limit) return against_oracle();
  res.against = "none";
  res.passed = false;
  res.note = "no trusted implementation fits this size";
  for (const auto& [name, why] : refused_) res.note += "; " + name + ": " + why;
  res.note += " (use --no-check to time it unchecked)";
  return res;
}

}  // namespace bench
