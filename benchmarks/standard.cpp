// Standard (materialised) attention with OpenBLAS sgemm, OpenMP over heads. See standard.hpp.
#include "standard.hpp"

#include <cblas.h>
#include <omp.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "flashattn/convert.hpp"
#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"
#include "simd_kernels.hpp"

namespace bench {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;  // madvise(MADV_HUGEPAGE) granule on x86-64
constexpr size_t kCacheLine = 64;

// An f32 view of a tensor: the tensor itself when it is f32, else a dense converted copy.
// F32In reads an input; F32View is written (an output).
template <class Float>
struct F32ViewOf {
  Float* data = nullptr;
  int64_t sb = 0, ss = 0, sh = 0;  // element strides of batch, seq, head
  Float* at(int64_t b, int64_t s, int64_t h) const { return data + b * sb + s * ss + h * sh; }
};
using F32View = F32ViewOf<float>;
using F32In = F32ViewOf<const float>;

size_t elems(const flashattn::ConstTensor& t) { return static_cast<size_t>(t.batch * t.seq * t.heads * t.dim); }

void require_supported(const flashattn::AttentionArgs& a) {
  if (a.cu_seqlens_q || a.softcap != 0 || a.alibi_slopes || flashattn::has_bias(a) || a.dropout_p != 0)
    throw flashattn::Error("standard baseline: varlen, softcap, ALiBi, bias and dropout are not supported");
}

}  // namespace

struct Standard::Block {
  float* data = nullptr;
  size_t floats = 0;
};

Standard::Standard() { openblas_set_num_threads(1); }  // heads run in parallel: one BLAS thread each

Standard::~Standard() { release(); }

void Standard::release() {
  for (auto* pool : {&scratch_, &saved_, &copies_}) {
    for (Block& b : *pool) std::free(b.data);
    pool->clear();
  }
  saved_q_ = nullptr;
}

std::string Standard::blas_core() { return openblas_get_corename(); }

float* Standard::ensure(std::vector<Block>& pool, size_t index, size_t floats) {
  if (pool.size() <= index) pool.resize(index + 1);
  Block& b = pool[index];
  if (b.floats >= floats) return b.data;
  std::free(b.data);
  b = Block{};
  // Buffers of a huge page or more are huge-page aligned and advised (first touch of 4 KiB pages
  // costs ~10 µs each here); smaller ones are only cache-line aligned, so nothing is over-allocated.
  const bool huge = floats * sizeof(float) >= kHugePage;
  const size_t align = huge ? kHugePage : kCacheLine;
  const size_t bytes = (floats * sizeof(float) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, bytes);
  if (!p) throw std::bad_alloc();
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);          // touch now, outside any timed call
  b = Block{static_cast<float*>(p), floats};
  return b.data;
}

namespace {

// Returns an f32 view of the output t: t itself when it is f32, else the dense bshd buffer `copy`
// of t's shape (store_back rounds it into t).
F32View f32_view(const flashattn::Tensor& t, float* copy) {
  if (t.dtype == flashattn::DType::f32) return F32View{static_cast<float*>(t.data), t.stride_batch, t.stride_seq, t.stride_head};
  return F32View{copy, t.seq * t.heads * t.dim, t.heads * t.dim, t.dim};
}

// Returns a read-only f32 view of the input t: t itself when it is f32, else its values converted
// into the dense bshd buffer `copy`.
F32In f32_view(const flashattn::ConstTensor& t, float* copy) {
  if (t.dtype == flashattn::DType::f32)
    return F32In{static_cast<const float*>(t.data), t.stride_batch, t.stride_seq, t.stride_head};
  const F32View v{copy, t.seq * t.heads * t.dim, t.heads * t.dim, t.dim};
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t x = 0; x < t.dim; ++x) v.at(b, s, h)[x] = flashattn::load_as_float(t.data, t.dtype, t.offset(b, s, h) + x);
  return F32In{v.data, v.sb, v.ss, v.sh};
}

// Rounds the dense f32 copy v back into the 16-bit tensor t.
void store_back(const F32View& v, const flashattn::Tensor& t) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t x = 0; x < t.dim; ++x) flashattn::store_from_float(t.data, t.dtype, t.offset(b, s, h) + x, v.at(b, s, h)[x]);
}

}  // namespace

size_t Standard::forward_bytes(const flashattn::AttentionArgs& a, bool save_p, int threads) {
  const size_t nn = static_cast<size_t>(a.q.seq * a.k.seq);
  size_t bytes = save_p ? nn * static_cast<size_t>(a.q.batch * a.q.heads) * sizeof(float)
                        : nn * static_cast<size_t>(threads) * sizeof(float);
  if (a.q.dtype != flashattn::DType::f32) bytes += (2 * elems(a.q) + 2 * elems(a.k)) * sizeof(float);
  return bytes;
}

size_t Standard::backward_bytes(const flashattn::AttentionArgs& a, int threads) {
  const size_t nn = static_cast<size_t>(a.q.seq * a.k.seq);
  size_t bytes = nn * static_cast<size_t>(a.q.batch * a.q.heads) * sizeof(float)  // saved P
                 + nn * static_cast<size_t>(threads) * sizeof(float)             // dP per thread
                 + static_cast<size_t>(a.q.batch * a.q.heads * a.q.seq) * sizeof(float);  // D
  if (a.q.dtype != flashattn::DType::f32) bytes += (4 * elems(a.q) + 4 * elems(a.k)) * sizeof(float);  // q, out, dout, dq; k, v, dk, dv
  return bytes;
}

void Standard::forward(const flashattn::ForwardArgs& a, bool save_p) {
  flashattn::validate(a);
  require_supported(a);
  const int threads = omp_get_max_threads();
  const int64_t B = a.q.batch, Hq = a.q.heads, Hk = a.k.heads, Nq = a.q.seq, Nk = a.k.seq, d = a.q.dim;
  const size_t nn = static_cast<size_t>(Nq * Nk);
  const bool lowp = a.q.dtype != flashattn::DType::f32;
  const F32In q = f32_view(a.q, lowp ? ensure(copies_, 0, elems(a.q)) : nullptr);
  const F32In k = f32_view(a.k, lowp ? ensure(copies_, 1, elems(a.k)) : nullptr);
  const F32In v = f32_view(a.v, lowp ? ensure(copies_, 2, elems(a.v)) : nullptr);
  const F32View o = f32_view(a.out, lowp ? ensure(copies_, 3, elems(a.out)) : nullptr);
  float* saved = save_p ? ensure(saved_, 0, nn * static_cast<size_t>(B * Hq)) : nullptr;
  std::vector<float*> scratch(static_cast<size_t>(threads));
  if (!save_p)
    for (int t = 0; t < threads; ++t) scratch[static_cast<size_t>(t)] = ensure(scratch_, static_cast<size_t>(t), nn);
  std::vector<float> lse_rows(a.lse ? 0 : static_cast<size_t>(threads * Nq));
  const float scale = flashattn::effective_scale(a);

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * Hq; ++bh) {
    const int64_t b = bh / Hq, h = bh % Hq, hk = flashattn::kv_head(h, Hq, Hk);
    const int tid = omp_get_thread_num();
    float* S = save_p ? saved + static_cast<size_t>(bh) * nn : scratch[static_cast<size_t>(tid)];
    const flashattn::Mask mask = flashattn::sequence(a, b).mask;
    float* lse = a.lse ? a.lse + bh * Nq : lse_rows.data() + tid * Nq;
    // S = scale · Q Kᵀ
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(Nq), static_cast<int>(Nk), static_cast<int>(d),
                scale, q.at(b, 0, h), static_cast<int>(q.ss), k.at(b, 0, hk), static_cast<int>(k.ss), 0.0f, S,
                static_cast<int>(Nk));
    // P = softmax(mask(S)), LSE
    softmax_rows(S, Nq, Nk, mask, lse);
    // O = P V
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(Nq), static_cast<int>(d), static_cast<int>(Nk),
                1.0f, S, static_cast<int>(Nk), v.at(b, 0, hk), static_cast<int>(v.ss), 0.0f, o.at(b, 0, h),
                static_cast<int>(o.ss));
  }
  if (lowp) store_back(o, a.out);
  saved_q_ = save_p ? a.q.data : nullptr;
}

void Standard::backward(const flashattn::BackwardArgs& a) {
  flashattn::validate(a);
  require_supported(a);
  if (saved_q_ != a.q.data || saved_.empty())
    throw flashattn::Error("standard baseline: backward needs P saved by forward(args, save_p = true) on the same q");
  const int threads = omp_get_max_threads();
  const int64_t B = a.q.batch, Hq = a.q.heads, Hk = a.k.heads, Nq = a.q.seq, Nk = a.k.seq, d = a.q.dim;
  const size_t nn = static_cast<size_t>(Nq * Nk);
  const bool lowp = a.q.dtype != flashattn::DType::f32;
  auto copy = [&](size_t slot, const flashattn::ConstTensor& t) { return lowp ? ensure(copies_, slot, elems(t)) : nullptr; };
  const F32In q = f32_view(a.q, copy(0, a.q));
  const F32In k = f32_view(a.k, copy(1, a.k));
  const F32In v = f32_view(a.v, copy(2, a.v));
  const F32In o = f32_view(a.out, copy(3, a.out));
  const F32In dout = f32_view(a.dout, copy(4, a.dout));
  const F32View dq = f32_view(a.dq, copy(5, a.dq));
  const F32View dk = f32_view(a.dk, copy(6, a.dk));
  const F32View dv = f32_view(a.dv, copy(7, a.dv));
  float* D = ensure(copies_, 8, static_cast<size_t>(B * Hq * Nq));
  const float* saved = saved_[0].data;
  std::vector<float*> scratch(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) scratch[static_cast<size_t>(t)] = ensure(scratch_, static_cast<size_t>(t), nn);
  const float scale = flashattn::effective_scale(a);
  const int64_t group = Hq / Hk;
  const int nq = static_cast<int>(Nq), nk = static_cast<int>(Nk), dd = static_cast<int>(d);

  // Parallel over (batch, key head): the query heads of a group add into the same dK, dV.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bk = 0; bk < B * Hk; ++bk) {
    const int64_t b = bk / Hk, hk = bk % Hk;
    float* dP = scratch[static_cast<size_t>(omp_get_thread_num())];
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = hk * group + g;
      const float beta = g == 0 ? 0.0f : 1.0f;
      const float* P = saved + static_cast<size_t>(b * Hq + h) * nn;
      float* Dh = D + (b * Hq + h) * Nq;
      // D = rowsum(dO ∘ O)
      for (int64_t i = 0; i < Nq; ++i) {
        const float* x = dout.at(b, i, h);
        const float* y = o.at(b, i, h);
        float s = 0;
        for (int64_t c = 0; c < d; ++c) s += x[c] * y[c];
        Dh[i] = s;
      }
      // dV (+)= Pᵀ dO
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, dd, nq, 1.0f, P, nk, dout.at(b, 0, h),
                  static_cast<int>(dout.ss), beta, dv.at(b, 0, hk), static_cast<int>(dv.ss));
      // dP = dO Vᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, dd, 1.0f, dout.at(b, 0, h), static_cast<int>(dout.ss),
                  v.at(b, 0, hk), static_cast<int>(v.ss), 0.0f, dP, nk);
      // dS = P ∘ (dP − D)
      softmax_grad_rows(dP, P, Dh, Nq, Nk);
      // dQ = scale · dS K
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, dd, nk, scale, dP, nk, k.at(b, 0, hk),
                  static_cast<int>(k.ss), 0.0f, dq.at(b, 0, h), static_cast<int>(dq.ss));
      // dK (+)= scale · dSᵀ Q
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, dd, nq, scale, dP, nk, q.at(b, 0, h),
                  static_cast<int>(q.ss), beta, dk.at(b, 0, hk), static_cast<int>(dk.ss));
    }
  }
  if (lowp) {
    store_back(dq, a.dq);
    store_back(dk, a.dk);
    store_back(dv, a.dv);
  }
}

}  // namespace bench
