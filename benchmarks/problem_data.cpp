// Input generation and argument assembly for one problem.
#include "problem_data.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

#include "flashattn/convert.hpp"

namespace bench {

namespace {
constexpr size_t kAlign = 64;  // cache line; also satisfies every SIMD load width
}

void Buffer::Free::operator()(void* p) const { std::free(p); }

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? kAlign : rounded);
  ptr_.reset(p);
}

size_t ProblemData::q_elems() const { return static_cast<size_t>(p_.batch * p_.seqlen_q * p_.heads_q * p_.head_dim); }
size_t ProblemData::k_elems() const { return static_cast<size_t>(p_.batch * p_.seqlen_k * p_.heads_k * p_.head_dim); }
size_t ProblemData::lse_elems() const { return static_cast<size_t>(p_.batch * p_.heads_q * p_.seqlen_q); }

ProblemData::ProblemData(const Problem& p, uint64_t seed) : p_(p) {
  const size_t es = flashattn::dtype_size(p.dtype);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](size_t n) {
    Buffer b(n * es);
    for (size_t i = 0; i < n; ++i) flashattn::store_from_float(b.data(), p.dtype, static_cast<int64_t>(i), normal(rng));
    return b;
  };
  q_ = fill(q_elems());
  k_ = fill(k_elems());
  v_ = fill(k_elems());
  if (p.pass == Pass::bwd) dout_ = fill(q_elems());
  const std::vector<int64_t> n = bias_sizes();
  if (p.bias != "none") bias_ = fill(static_cast<size_t>(n[0] * n[1] * n[2] * n[3]));
}

std::vector<int64_t> ProblemData::bias_sizes() const {
  if (p_.bias == "none") return {0, 0, 0, 0};
  if (p_.bias == "keys") return {1, 1, p_.heads_q, p_.seqlen_k};
  if (p_.bias == "rows") return {1, p_.seqlen_q, 1, p_.seqlen_k};
  return {p_.batch, p_.seqlen_q, p_.heads_q, p_.seqlen_k};
}

ProblemData ProblemData::widened() const {
  ProblemData w;
  w.p_ = p_;
  w.p_.dtype = flashattn::DType::f32;
  auto widen = [&](const Buffer& b, size_t n) {
    if (b.bytes() == 0) return Buffer();
    Buffer o(n * sizeof(float));
    for (size_t i = 0; i < n; ++i)
      static_cast<float*>(o.data())[i] = flashattn::load_as_float(b.data(), p_.dtype, static_cast<int64_t>(i));
    return o;
  };
  w.q_ = widen(q_, q_elems());
  w.k_ = widen(k_, k_elems());
  w.v_ = widen(v_, k_elems());
  w.dout_ = widen(dout_, q_elems());
  const std::vector<int64_t> n = bias_sizes();
  w.bias_ = widen(bias_, static_cast<size_t>(n[0] * n[1] * n[2] * n[3]));
  return w;
}

Outputs ProblemData::make_outputs() const {
  const size_t es = flashattn::dtype_size(p_.dtype);
  Outputs o;
  o.out = Buffer(q_elems() * es);
  o.lse = Buffer(lse_elems() * sizeof(float));
  if (p_.pass == Pass::bwd) {
    o.dq = Buffer(q_elems() * es);
    o.dk = Buffer(k_elems() * es);
    o.dv = Buffer(k_elems() * es);
    const std::vector<int64_t> n = bias_sizes();
    if (p_.dbias) o.dbias = Buffer(static_cast<size_t>(n[0] * n[1] * n[2] * n[3]) * es);
  }
  return o;
}

flashattn::ForwardArgs ProblemData::forward_args(Outputs& o) const {
  using flashattn::bshd;
  flashattn::ForwardArgs a;
  a.q = bshd(q_.data(), p_.dtype, p_.batch, p_.seqlen_q, p_.heads_q, p_.head_dim);
  a.k = bshd(k_.data(), p_.dtype, p_.batch, p_.seqlen_k, p_.heads_k, p_.head_dim);
  a.v = bshd(v_.data(), p_.dtype, p_.batch, p_.seqlen_k, p_.heads_k, p_.head_dim);
  a.out = bshd(o.out.data(), p_.dtype, p_.batch, p_.seqlen_q, p_.heads_q, p_.head_dim);
  a.lse = static_cast<float*>(o.lse.data());
  a.causal = p_.causal;
  if (p_.bias != "none") {  // stored [B, Hq, Nq, Nk] (PyTorch's attn_mask order)
    const std::vector<int64_t> n = bias_sizes();
    a.bias = flashattn::bhsd(static_cast<const void*>(bias_.data()), p_.dtype, n[0], n[1], n[2], n[3]);
  }
  a.dropout_p = p_.dropout;
  a.dropout_seed = 0x5eed;
  return a;
}

flashattn::BackwardArgs ProblemData::backward_args(Outputs& o) const {
  using flashattn::bshd;
  flashattn::BackwardArgs a = flashattn::backward_args(forward_args(o));
  a.dout = bshd(dout_.data(), p_.dtype, p_.batch, p_.seqlen_q, p_.heads_q, p_.head_dim);
  a.dq = bshd(o.dq.data(), p_.dtype, p_.batch, p_.seqlen_q, p_.heads_q, p_.head_dim);
  a.dk = bshd(o.dk.data(), p_.dtype, p_.batch, p_.seqlen_k, p_.heads_k, p_.head_dim);
  a.dv = bshd(o.dv.data(), p_.dtype, p_.batch, p_.seqlen_k, p_.heads_k, p_.head_dim);
  if (p_.dbias) {
    const std::vector<int64_t> n = bias_sizes();
    a.dbias = flashattn::bhsd(o.dbias.data(), p_.dtype, n[0], n[1], n[2], n[3]);
  }
  return a;
}

std::vector<double> to_doubles(const Buffer& b, flashattn::DType t, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = flashattn::load_as_float(b.data(), t, static_cast<int64_t>(i));
  return out;
}

}  // namespace bench
