// Case expansion, FLOP counting and the built-in default set.
#include "cases.hpp"

#include <algorithm>
#include <sstream>

#include "flashattn/mask.hpp"

namespace bench {

const char* pass_name(Pass p) { return p == Pass::fwd ? "fwd" : "bwd"; }

bool Problem::operator==(const Problem& o) const {
  return pass == o.pass && dtype == o.dtype && batch == o.batch && heads_q == o.heads_q &&
         heads_k == o.heads_k && seqlen_q == o.seqlen_q && seqlen_k == o.seqlen_k && head_dim == o.head_dim &&
         causal == o.causal && bias == o.bias && dbias == o.dbias && dropout == o.dropout;
}

std::string Problem::describe() const {
  std::ostringstream s;
  s << pass_name(pass) << ' ' << flashattn::dtype_name(dtype) << " B=" << batch << " H=" << heads_q << '/'
    << heads_k << " N=" << seqlen_q << 'x' << seqlen_k << " d=" << head_dim << (causal ? " causal" : " full");
  if (bias != "none") s << " bias=" << bias;
  if (dbias) s << " dbias";
  if (dropout != 0) s << " dropout=" << dropout;
  return s.str();
}

std::string Problem::mask_text() const {
  std::ostringstream s;
  s << (causal ? "causal" : "none");
  if (bias != "none") s << "+bias:" << bias;
  if (dbias) s << "+dbias";
  if (dropout != 0) s << "+drop" << dropout;
  return s.str();
}

double visible_pairs(const Problem& p) {
  const double nq = static_cast<double>(p.seqlen_q), nk = static_cast<double>(p.seqlen_k);
  if (!p.causal) return nq * nk;
  if (p.seqlen_q == p.seqlen_k) return 0.5 * nq * nk;  // docs/benchmarks.md: halved for causal when Nq = Nk
  const flashattn::Mask m = flashattn::Mask::make(p.seqlen_q, p.seqlen_k, true, -1, -1);
  double pairs = 0;
  for (int64_t i = 0; i < p.seqlen_q; ++i) pairs += static_cast<double>(m.key_end(i) - m.key_begin(i));
  return pairs;
}

double flops(const Problem& p) {
  constexpr double kFwdFlopsPerPairDim = 4.0;  // 2·d for S = q·k, 2·d for O += p·v
  constexpr double kBwdOverFwd = 2.5;          // docs/benchmarks.md, "FLOP convention"
  const double fwd = kFwdFlopsPerPairDim * static_cast<double>(p.batch * p.heads_q * p.head_dim) * visible_pairs(p);
  return p.pass == Pass::fwd ? fwd : kBwdOverFwd * fwd;
}

std::vector<Case> expand(const Grid& g) {
  std::vector<Case> out;
  const std::vector<int64_t> none{0};
  const auto& hk_list = g.heads_k.empty() ? none : g.heads_k;
  const auto& nq_list = g.seqlen_q.empty() ? g.seqlen : g.seqlen_q;
  const auto& nk_list = g.seqlen_k.empty() ? g.seqlen : g.seqlen_k;
  const std::vector<int> zero{0};
  const std::vector<std::string> no_bias{"none"};
  const std::vector<float> no_dropout{0.0f};
  const auto& bias_list = g.bias.empty() ? no_bias : g.bias;
  const auto& dbias_list = g.dbias.empty() ? zero : g.dbias;
  const auto& dropout_list = g.dropout.empty() ? no_dropout : g.dropout;
  const auto& bq_list = g.block_q.empty() ? zero : g.block_q;
  const auto& bk_list = g.block_k.empty() ? zero : g.block_k;
  // Outer loops: the problem; inner loops: implementation and tiles (share one trusted result).
  for (Pass pass : g.passes)
    for (int64_t d : g.head_dim)
      for (int causal : g.causal)
        for (flashattn::DType dt : g.dtypes)
          for (int64_t b : g.batch)
            for (int64_t h : g.heads)
              for (int64_t hk : hk_list)
                for (int64_t nk : nk_list)
                  for (int64_t nq : nq_list) {
                    // With one --seqlen list, Nq and Nk move together.
                    if (g.seqlen_q.empty() && g.seqlen_k.empty() && nq != nk) continue;
                    for (const std::string& bias : bias_list)
                      for (int dbias : dbias_list)
                        for (float dropout : dropout_list) {
                          if (dbias && (bias == "none" || pass != Pass::bwd)) continue;  // dbias: a backward with a bias
                          Problem p{pass, dt, b, h, hk == 0 ? h : hk, nq, nk, d, causal != 0, bias, dbias != 0, dropout};
                          for (const std::string& impl : g.impls) {
                            if (impl != "cpu") {
                              out.push_back(Case{impl, p, 0, 0});
                              continue;
                            }
                            for (int bq : bq_list)
                              for (int bk : bk_list) out.push_back(Case{impl, p, bq, bk});
                          }
                        }
                  }
  return out;
}

std::vector<Case> default_cases(const std::vector<std::string>& available) {
  auto has = [&](const char* name) { return std::find(available.begin(), available.end(), name) != available.end(); };
  std::vector<std::string> fast;  // every implementation except the oracle
  for (const char* name : {"cpu", "gpu", "standard"})
    if (has(name)) fast.push_back(name);
  std::vector<std::string> small = fast;
  small.insert(small.begin(), "reference");

  std::vector<Case> out;
  auto add = [&](Grid g) {
    const std::vector<Case> c = expand(g);
    out.insert(out.end(), c.begin(), c.end());
  };
  using flashattn::DType;
  // Small: every implementation including the oracle itself; checked against the fp64 oracle.
  add(Grid{small, {Pass::fwd, Pass::bwd}, {DType::f32, DType::bf16}, {1}, {4}, {}, {256}, {}, {}, {64}, {0, 1}, {}, {}});
  // GQA and Nq != Nk (decode-like chunk), oracle-checked.
  add(Grid{small, {Pass::fwd, Pass::bwd}, {DType::f16}, {2}, {4}, {2}, {}, {128}, {384}, {128}, {1}, {}, {}});
  // Medium and large: the fast implementations; checked against an fp32 implementation.
  add(Grid{fast, {Pass::fwd, Pass::bwd}, {DType::f32, DType::bf16}, {1}, {8}, {}, {1024}, {}, {}, {64}, {0, 1}, {}, {}});
  // Large: only with the CPU backend, the one trusted implementation that fits (the oracle is far too
  // slow here, and the standard baseline alone would have nothing independent to be checked by).
  if (has("cpu"))
    add(Grid{fast, {Pass::fwd, Pass::bwd}, {DType::f32}, {1}, {4}, {}, {4096}, {}, {}, {128}, {0, 1}, {}, {}});
  // The GPU has no f32 path: a larger bf16 problem for it, checked against the CPU backend at fp32.
  if (has("gpu"))
    add(Grid{{"gpu"}, {Pass::fwd, Pass::bwd}, {DType::bf16}, {2}, {16}, {}, {4096}, {}, {}, {128}, {0, 1}, {}, {}});
  // The GPU rejects f32 by contract: leave those rows out of the default table.
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const Case& c) { return c.impl == "gpu" && c.problem.dtype == DType::f32; }),
            out.end());
  return out;
}

}  // namespace bench
