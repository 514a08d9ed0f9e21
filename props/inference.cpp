// Inference problems and their plain equivalents (see inference.hpp).
#include "props/inference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "flashattn/convert.hpp"
#include "flashattn/reference.hpp"
#include "props/rng.hpp"
#include "tolerance/judge.hpp"

namespace props {

using namespace ::flashattn::tolerance;  // NOLINT: the suite speaks the tolerance rule's vocabulary
namespace {

using flashattn::DType;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The documented rotation of one pair, written here independently of the library (fp64 products of
// fp32 values are exact; one rounding to fp32, then RNE to the dtype).
float rotate0(float x0, float x1, float c, float s, DType t) {
  return flashattn::round_to(t, static_cast<float>(double(x0) * double(c) - double(x1) * double(s)));
}
float rotate1(float x0, float x1, float c, float s, DType t) {
  return flashattn::round_to(t, static_cast<float>(double(x0) * double(s) + double(x1) * double(c)));
}

}  // namespace

int64_t InferenceSpec::capacity() const {
  int64_t m = 1;
  for (int32_t l : lengths) m = std::max<int64_t>(m, l + (append ? new_rows : 0));
  m += 1;  // one row past every sequence's keys: garbage that must never be read
  return page_size > 0 ? (m + page_size - 1) / page_size * page_size : m;
}

std::string InferenceSpec::describe() const {
  std::ostringstream os;
  os << "B=" << batch << " Hk=" << heads_k << " group=" << group << " Nq=" << seqlen_q << " d=" << dim
     << " dv=" << dim_v << " dtype=" << flashattn::dtype_name(dtype) << " causal=" << causal << " softcap=" << softcap
     << " sinks=" << sinks << " page=" << page_size << " share=" << share_prefix << " lengths=";
  for (int32_t l : lengths) os << l << ",";
  os << " append=" << append << " new=" << new_rows << " rotary_dim=" << rotary_dim << " interleaved=" << interleaved
     << " splits=" << num_splits << " seed=" << seed;
  return os.str();
}

rc::Gen<InferenceSpec> gen_inference(int append, InferenceDims dims) {
  return rc::gen::exec([append, dims] {
    const bool gpu = dims == InferenceDims::gpu;
    InferenceSpec s;
    s.batch = *rc::gen::inRange<int64_t>(1, 4);
    s.heads_k = *rc::gen::inRange<int64_t>(1, 3);
    s.group = *rc::gen::inRange<int64_t>(1, 4);
    s.seqlen_q = *rc::gen::inRange<int64_t>(1, 5);
    if (gpu) {
      const auto pair = *rc::gen::elementOf(std::vector<std::pair<int64_t, int64_t>>{
          {32, 32}, {64, 64}, {96, 96}, {128, 128}, {256, 256}, {192, 128}, {192, 128}, {576, 512}});
      s.dim = pair.first;
      s.dim_v = pair.second;
      s.dtype = *rc::gen::elementOf(std::vector<DType>{DType::f16, DType::bf16});
    } else {
      s.dim = *rc::gen::elementOf(std::vector<int64_t>{1, 2, 3, 5, 8, 12, 16, 33});
      s.dim_v = *rc::gen::elementOf(std::vector<int64_t>{s.dim, s.dim, 1, 4, 7, 16, 40});
      s.dtype = dims == InferenceDims::f32 ? DType::f32
                                           : *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f16, DType::bf16});
    }
    s.causal = *rc::gen::arbitrary<bool>();
    s.softcap = *rc::gen::elementOf(std::vector<float>{0, 0, 0, 5});
    s.sinks = *rc::gen::arbitrary<bool>();
    s.page_size = gpu ? *rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 3, 16, 64})
                      : *rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 2, 3, 5, 16});
    s.share_prefix = s.page_size > 0 && s.batch > 1 && *rc::gen::arbitrary<bool>();
    s.append = append < 0 ? *rc::gen::arbitrary<bool>() : append == 1;
    s.new_rows = s.append ? *rc::gen::inRange<int64_t>(0, 4) : 0;
    for (int64_t b = 0; b < s.batch; ++b) {
      int32_t l = gpu ? *rc::gen::elementOf(std::vector<int32_t>{0, 1, 7, 33, 64, 65, 130, 299})
                      : *rc::gen::inRange<int32_t>(0, 13);
      if (s.share_prefix) l = std::max<int32_t>(l, static_cast<int32_t>(s.page_size));
      s.lengths.push_back(l);
    }
    if (s.append && s.dim >= 2 && *rc::gen::arbitrary<bool>()) {
      s.rotary_dim = 2 * *rc::gen::inRange<int64_t>(1, s.dim / 2 + 1);
      s.interleaved = *rc::gen::arbitrary<bool>();
    }
    s.num_splits = *rc::gen::inRange<int64_t>(0, 6);
    s.seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);
    return s;
  });
}

size_t InferenceProblem::es() const { return flashattn::dtype_size(spec_.dtype); }

InferenceProblem::InferenceProblem(const InferenceSpec& s) : spec_(s) {
  const DType t = s.dtype;
  const int64_t B = s.batch, hk = s.heads_k, hq = s.heads_q(), d = s.dim, e = s.dim_v, nq = s.seqlen_q;
  const int64_t cap = s.capacity(), nnew = s.new_rows;
  Rng rng(s.seed);
  auto fill = [&](std::vector<unsigned char>& buf, int64_t n, double sigma) {
    buf.assign(static_cast<size_t>(n) * es(), 0);
    for (int64_t i = 0; i < n; ++i) flashattn::store_from_float(buf.data(), t, i, static_cast<float>(sigma * rng.normal()));
  };
  fill(q_, B * nq * hq * d, 1);
  fill(knew_, B * nnew * hk * d, 1);
  fill(vnew_, B * nnew * hk * e, 1);
  // Each sequence's keys before the call, [B, cap, hk, d] dense (rows past the length: NaN).
  std::vector<unsigned char> kold, vold;
  fill(kold, B * cap * hk * d, 1);
  fill(vold, B * cap * hk * e, 1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < cap; ++j)
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t rk = ((b * cap + j) * hk + h), src = ((0 * cap + j) * hk + h);
        if (j >= s.lengths[b]) {
          for (int64_t x = 0; x < d; ++x) flashattn::store_from_float(kold.data(), t, rk * d + x, kNaN);
          for (int64_t x = 0; x < e; ++x) flashattn::store_from_float(vold.data(), t, rk * e + x, kNaN);
        } else if (s.share_prefix && b > 0 && j < s.page_size) {  // the shared first page holds sequence 0's rows
          std::memcpy(&kold[rk * d * es()], &kold[src * d * es()], d * es());
          std::memcpy(&vold[rk * e * es()], &vold[src * e * es()], e * es());
        }
      }
  lengths_ = s.lengths;
  after_ = lengths_;
  if (s.append)
    for (int32_t& l : after_) l += static_cast<int32_t>(nnew);
  // The caches of the call: contiguous copies of kold, or pages in a random order.
  if (s.page_size == 0) {
    kc_ = kold;
    vc_ = vold;
  } else {
    const int64_t ps = s.page_size, per = cap / ps;
    pages_ = B * per + 2;  // two pages no sequence uses (NaN)
    stride_ = per + 1;     // one table column past the pages (-1)
    std::vector<int32_t> order(static_cast<size_t>(pages_));
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = pages_ - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    table_.assign(static_cast<size_t>(B * stride_), -1);
    kc_.assign(static_cast<size_t>(pages_ * ps * hk * d) * es(), 0);
    vc_.assign(static_cast<size_t>(pages_ * ps * hk * e) * es(), 0);
    for (int64_t i = 0; i < pages_ * ps * hk * d; ++i) flashattn::store_from_float(kc_.data(), t, i, kNaN);
    for (int64_t i = 0; i < pages_ * ps * hk * e; ++i) flashattn::store_from_float(vc_.data(), t, i, kNaN);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t used = (after_[b] + ps - 1) / ps;
      for (int64_t c = 0; c < per; ++c) {
        const int32_t page = (s.share_prefix && b > 0 && c == 0) ? table_[0] : order[b * per + c];
        if (c < used || (s.share_prefix && c == 0)) table_[b * stride_ + c] = page;
        for (int64_t r = 0; r < ps; ++r)
          for (int64_t h = 0; h < hk; ++h) {
            const int64_t j = c * ps + r, src = (b * cap + j) * hk + h, dst = (int64_t{page} * ps + r) * hk + h;
            if (j >= lengths_[b]) continue;  // garbage stays NaN
            std::memcpy(&kc_[dst * d * es()], &kold[src * d * es()], d * es());
            std::memcpy(&vc_[dst * e * es()], &vold[src * e * es()], e * es());
          }
      }
    }
  }
  kc0_ = kc_;
  vc0_ = vc_;
  // Rotary tables over every position used.
  const int64_t positions = cap + nq;
  if (s.rotary_dim > 0) {
    const int64_t half = s.rotary_dim / 2;
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t r = 0; r < half; ++r) {
        const double angle = double(p) * std::pow(100.0, -double(r) / double(half));
        cos_.push_back(static_cast<float>(std::cos(angle)));
        sin_.push_back(static_cast<float>(std::sin(angle)));
      }
  }
  auto rotate = [&](const unsigned char* src, unsigned char* dst, int64_t pos) {  // one head row of d
    std::vector<float> x(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) x[i] = flashattn::load_as_float(src, t, i);
    std::vector<float> y(x);
    const int64_t half = s.rotary_dim / 2;
    for (int64_t r = 0; r < half; ++r) {
      const int64_t i0 = s.interleaved ? 2 * r : r, i1 = s.interleaved ? 2 * r + 1 : r + half;
      const float c = cos_[pos * half + r], sn = sin_[pos * half + r];
      y[i0] = rotate0(x[i0], x[i1], c, sn, t);
      y[i1] = rotate1(x[i0], x[i1], c, sn, t);
    }
    for (int64_t i = 0; i < d; ++i) flashattn::store_from_float(dst, t, i, y[i]);
  };
  // The plain call's keys: old rows, then the new ones (rotated), [B, cap, hk, d].
  kexp_ = kold;
  vexp_ = vold;
  for (int64_t b = 0; b < B && s.append; ++b)
    for (int64_t r = 0; r < nnew; ++r)
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t j = lengths_[b] + r, dst = (b * cap + j) * hk + h, src = (b * nnew + r) * hk + h;
        rotate(&knew_[src * d * es()], &kexp_[dst * d * es()], j);
        std::memcpy(&vexp_[dst * e * es()], &vnew_[src * e * es()], e * es());
      }
  qrot_ = q_;
  if (s.append)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t h = 0; h < hq; ++h) {
          const int64_t o = ((b * nq + i) * hq + h) * d;
          rotate(&q_[o * es()], &qrot_[o * es()], lengths_[b] + i);
        }
  for (int64_t h = 0; h < hq; ++h) sinks_.push_back(static_cast<float>(2 * rng.normal()));
  out_.assign(static_cast<size_t>(B * nq * hq * e) * es(), 0xFF);
  pout_ = out_;
  lse_.assign(static_cast<size_t>(B * hq * nq), kNaN);
  plse_ = lse_;
}

flashattn::ForwardArgs InferenceProblem::call() {
  const InferenceSpec& s = spec_;
  const int64_t B = s.batch, hk = s.heads_k, hq = s.heads_q(), d = s.dim, e = s.dim_v, nq = s.seqlen_q;
  flashattn::ForwardArgs a;
  a.q = flashattn::bshd(static_cast<const void*>(q_.data()), s.dtype, B, nq, hq, d);
  const bool paged = s.page_size > 0;
  const int64_t cb = paged ? pages_ : B, cs = paged ? s.page_size : s.capacity();
  const flashattn::Tensor kc = flashattn::bshd(static_cast<void*>(kc_.data()), s.dtype, cb, cs, hk, d);
  const flashattn::Tensor vc = flashattn::bshd(static_cast<void*>(vc_.data()), s.dtype, cb, cs, hk, e);
  if (s.append) {
    a.append.k_cache = kc;
    a.append.v_cache = vc;
    a.append.k_new = flashattn::bshd(static_cast<const void*>(knew_.data()), s.dtype, B, s.new_rows, hk, d);
    a.append.v_new = flashattn::bshd(static_cast<const void*>(vnew_.data()), s.dtype, B, s.new_rows, hk, e);
    if (s.rotary_dim > 0) {
      a.append.rotary_cos = cos_.data();
      a.append.rotary_sin = sin_.data();
      a.append.rotary_dim = s.rotary_dim;
      a.append.rotary_positions = static_cast<int64_t>(cos_.size()) / (s.rotary_dim / 2);
      a.append.rotary_interleaved = s.interleaved;
    }
  } else {
    a.k = kc;
    a.v = vc;
  }
  if (paged) {
    a.block_table = table_.data();
    a.block_table_stride = stride_;
    a.block_table_pages = s.capacity() / s.page_size;
  }
  a.seqlens_k = lengths_.data();
  a.causal = s.causal;
  a.softcap = s.softcap;
  if (s.sinks) a.sinks = sinks_.data();
  a.num_splits = s.num_splits;
  std::fill(out_.begin(), out_.end(), 0xFF);
  std::fill(lse_.begin(), lse_.end(), kNaN);
  a.out = flashattn::bshd(static_cast<void*>(out_.data()), s.dtype, B, nq, hq, e);
  a.lse = lse_.data();
  return a;
}

flashattn::ForwardArgs InferenceProblem::plain() {
  const InferenceSpec& s = spec_;
  const int64_t B = s.batch, hk = s.heads_k, hq = s.heads_q(), d = s.dim, e = s.dim_v, nq = s.seqlen_q;
  flashattn::ForwardArgs a;
  a.q = flashattn::bshd(static_cast<const void*>(qrot_.data()), s.dtype, B, nq, hq, d);
  a.k = flashattn::bshd(static_cast<const void*>(kexp_.data()), s.dtype, B, s.capacity(), hk, d);
  a.v = flashattn::bshd(static_cast<const void*>(vexp_.data()), s.dtype, B, s.capacity(), hk, e);
  a.seqlens_k = after_.data();
  a.causal = s.causal;
  a.softcap = s.softcap;
  if (s.sinks) a.sinks = sinks_.data();
  std::fill(pout_.begin(), pout_.end(), 0xFF);
  std::fill(plse_.begin(), plse_.end(), kNaN);
  a.out = flashattn::bshd(static_cast<void*>(pout_.data()), s.dtype, B, nq, hq, e);
  a.lse = plse_.data();
  return a;
}

std::string InferenceProblem::check_caches() const {
  // Expected: the caches before the call with rows [L_b, L_b + Nnew) of each sequence replaced.
  std::vector<unsigned char> kx = kc0_, vx = vc0_;
  const InferenceSpec& s = spec_;
  const int64_t hk = s.heads_k, d = s.dim, e = s.dim_v, cap = s.capacity();
  for (int64_t b = 0; b < s.batch && s.append; ++b)
    for (int64_t r = 0; r < s.new_rows; ++r) {
      const int64_t j = lengths_[b] + r;
      const int64_t row = s.page_size > 0 ? int64_t{table_[b * stride_ + j / s.page_size]} * s.page_size + j % s.page_size
                                          : b * cap + j;
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t src = (b * cap + j) * hk + h, dst = row * hk + h;
        std::memcpy(&kx[dst * d * es()], &kexp_[src * d * es()], d * es());
        std::memcpy(&vx[dst * e * es()], &vexp_[src * e * es()], e * es());
      }
    }
  for (size_t i = 0; i < kx.size(); ++i)
    if (kx[i] != kc_[i]) return "k_cache byte " + std::to_string(i) + " differs from the documented append";
  for (size_t i = 0; i < vx.size(); ++i)
    if (vx[i] != vc_[i]) return "v_cache byte " + std::to_string(i) + " differs from the documented append";
  return "";
}

void InferenceProblem::reset_caches() {
  kc_ = kc0_;
  vc_ = vc0_;
}

namespace {
std::vector<double> to_doubles(const std::vector<unsigned char>& b, DType t) {
  std::vector<double> r(b.size() / flashattn::dtype_size(t));
  for (size_t i = 0; i < r.size(); ++i) r[i] = flashattn::load_as_float(b.data(), t, static_cast<int64_t>(i));
  return r;
}
}  // namespace

std::vector<double> InferenceProblem::out_of_call() const { return to_doubles(out_, spec_.dtype); }
std::vector<double> InferenceProblem::out_of_plain() const { return to_doubles(pout_, spec_.dtype); }
std::vector<double> InferenceProblem::lse_of_call() const { return {lse_.begin(), lse_.end()}; }
std::vector<double> InferenceProblem::lse_of_plain() const { return {plse_.begin(), plse_.end()}; }

std::string check_inference_forward(InferenceProblem& p, const std::function<void(const flashattn::ForwardArgs&)>& forward) {
  p.reset_caches();
  const flashattn::ForwardArgs a = p.call();
  forward(a);
  const std::string caches = p.check_caches();
  if (!caches.empty()) return caches;
  flashattn::ForwardArgs judged = p.plain();  // the oracle's plain call, holding the results under test
  judged.out = a.out;
  judged.lse = a.lse;
  return judge_forward(judged).first_failure();
}

InferenceBackward::InferenceBackward(InferenceProblem& p) : sinks_(p.spec().sinks) {
  const InferenceSpec& s = p.spec();
  flashattn::ForwardArgs f = p.plain();
  flashattn::reference::forward(f);
  b_ = flashattn::backward_args(f);
  const size_t es = flashattn::dtype_size(s.dtype);
  auto bytes = [&](const flashattn::ConstTensor& t) { return static_cast<size_t>(t.batch * t.seq * t.heads * t.dim) * es; };
  dout_.resize(bytes(f.out));
  dq_.resize(bytes(f.q));
  dk_.resize(bytes(f.k));
  dv_.resize(bytes(f.v));
  Rng rng(s.seed + 1);
  for (int64_t i = 0; i < static_cast<int64_t>(dout_.size() / es); ++i)
    flashattn::store_from_float(dout_.data(), s.dtype, i, static_cast<float>(rng.normal()));
  dsinks_.assign(static_cast<size_t>(s.heads_q()), kNaN);
  b_.dout = flashattn::bshd(static_cast<const void*>(dout_.data()), s.dtype, f.out.batch, f.out.seq, f.out.heads, f.out.dim);
  b_.dq = flashattn::bshd(static_cast<void*>(dq_.data()), s.dtype, f.q.batch, f.q.seq, f.q.heads, f.q.dim);
  b_.dk = flashattn::bshd(static_cast<void*>(dk_.data()), s.dtype, f.k.batch, f.k.seq, f.k.heads, f.k.dim);
  b_.dv = flashattn::bshd(static_cast<void*>(dv_.data()), s.dtype, f.v.batch, f.v.seq, f.v.heads, f.v.dim);
  if (s.sinks) b_.dsinks = dsinks_.data();
}

std::string InferenceBackward::judge() const {
  const Judgement j = judge_backward(b_);
  if (!j.passed()) return j.first_failure();
  if (sinks_ && j.find("dsinks") == nullptr) return "dsinks was not judged";
  return "";
}

}  // namespace props
