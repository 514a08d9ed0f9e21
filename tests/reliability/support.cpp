// Helpers shared by the reliability tests (see support.hpp).
#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "flashattn/convert.hpp"
#include "tolerance/judge.hpp"

namespace flashattn::reliability {

namespace {

Shape varlen_shape(const std::vector<int32_t>& lq, const std::vector<int32_t>& lk, int64_t hq, int64_t hk, int64_t d,
                   DType dtype) {
  Shape s;
  s.batch = 1;
  s.nq = 0;
  s.nk = 0;
  for (int32_t x : lq) s.nq += x;
  for (int32_t x : lk) s.nk += x;
  s.hq = hq;
  s.hk = hk;
  s.d = d;
  s.dtype = dtype;
  return s;
}
}  // namespace

Problem::Problem(const Shape& s, uint32_t seed) : shape(s) { allocate(seed); }

Problem::Problem(const std::vector<int32_t>& lengths_q, const std::vector<int32_t>& lengths_k, int64_t hq, int64_t hk,
                 int64_t d, DType dtype, uint32_t seed)
    : shape(varlen_shape(lengths_q, lengths_k, hq, hk, d, dtype)) {
  cu_q.assign(1, 0);
  cu_k.assign(1, 0);
  for (int32_t x : lengths_q) cu_q.push_back(cu_q.back() + x);
  for (int32_t x : lengths_k) cu_k.push_back(cu_k.back() + x);
  allocate(seed);
}

void Problem::allocate(uint32_t seed) {
  const size_t es = dtype_size(shape.dtype);
  const size_t nq = static_cast<size_t>(shape.batch * shape.nq * shape.hq * shape.d);
  const size_t nk = static_cast<size_t>(shape.batch * shape.nk * shape.hk * shape.d);
  for (auto* b : {&q_, &out_, &dout_, &dq_}) b->assign(nq * es, 0);
  for (auto* b : {&k_, &v_, &dk_, &dv_}) b->assign(nk * es, 0);
  lse.assign(static_cast<size_t>(shape.batch * shape.hq * shape.nq), 0.0f);
  uint32_t x = seed * 2654435761u + 1u;
  for (auto* b : {&q_, &k_, &v_, &dout_}) {
    const int64_t n = static_cast<int64_t>(b->size() / es);
    for (int64_t i = 0; i < n; ++i) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      store_from_float(b->data(), shape.dtype, i, static_cast<float>(x >> 8) * 0x1p-23f - 1.0f);
    }
  }
}

std::vector<unsigned char>& Problem::storage(Which w) {
  switch (w) {
    case Which::q: return q_;
    case Which::k: return k_;
    case Which::v: return v_;
    case Which::out: return out_;
    case Which::dout: return dout_;
    case Which::dq: return dq_;
    case Which::dk: return dk_;
    default: return dv_;
  }
}

Tensor Problem::view(Which w) {
  const bool key_side = w == Which::k || w == Which::v || w == Which::dk || w == Which::dv;
  return bshd(storage(w).data(), shape.dtype, shape.batch, key_side ? shape.nk : shape.nq, key_side ? shape.hk : shape.hq,
              shape.d);
}

float Problem::get(Which w, int64_t b, int64_t s, int64_t h, int64_t x) {
  const Tensor t = view(w);
  return load_as_float(t.data, t.dtype, t.offset(b, s, h) + x);
}

void Problem::set(Which w, int64_t b, int64_t s, int64_t h, int64_t x, float value) {
  const Tensor t = view(w);
  store_from_float(t.data, t.dtype, t.offset(b, s, h) + x, value);
}

std::vector<unsigned char> Problem::bytes(Which w) const { return const_cast<Problem*>(this)->storage(w); }

std::vector<unsigned char> Problem::output_bytes() const {
  std::vector<unsigned char> r;
  for (Which w : {Which::out, Which::dq, Which::dk, Which::dv}) {
    const auto b = bytes(w);
    r.insert(r.end(), b.begin(), b.end());
  }
  const auto* l = reinterpret_cast<const unsigned char*>(lse.data());
  r.insert(r.end(), l, l + lse.size() * sizeof(float));
  return r;
}

ForwardArgs Problem::forward_args(const ForwardArgs& options) {
  ForwardArgs a = options;
  a.q = view(Which::q);
  a.k = view(Which::k);
  a.v = view(Which::v);
  a.out = view(Which::out);
  a.lse = lse.data();
  if (!cu_q.empty()) {
    a.cu_seqlens_q = cu_q.data();
    a.cu_seqlens_k = cu_k.data();
    a.varlen_batch = static_cast<int64_t>(cu_q.size()) - 1;
  }
  return a;
}

BackwardArgs Problem::backward_args(const ForwardArgs& options) {
  BackwardArgs a = flashattn::backward_args(forward_args(options));
  a.dout = view(Which::dout);
  a.dq = view(Which::dq);
  a.dk = view(Which::dk);
  a.dv = view(Which::dv);
  return a;
}

std::vector<double> read_dense(const ConstTensor& t) {
  std::vector<double> r;
  r.reserve(static_cast<size_t>(t.batch * t.seq * t.heads * t.dim));
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t x = 0; x < t.dim; ++x) r.push_back(load_as_float(t.data, t.dtype, t.offset(b, s, h) + x));
  return r;
}

std::string check_forward(const ForwardArgs& a) { return flashattn::tolerance::judge_forward(a).first_failure(); }

std::string check_backward(const BackwardArgs& a) { return flashattn::tolerance::judge_backward(a).first_failure(); }

}  // namespace flashattn::reliability
