// A user's program: computes a small causal GQA attention with the installed flashattn (the oracle,
// and the CPU and GPU backends when the package has them), checks it against attention written out here
// in double precision, and checks that bad arguments throw flashattn::Error. Exit status 0 = pass.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <vector>

#include <flashattn/flashattn.hpp>
#include <flashattn/reference.hpp>
#ifdef CONSUMER_HAS_CPU
#include <flashattn/cpu.hpp>
#endif

namespace {

// q [1, 3, 2, 4], k and v [1, 5, 1, 4]: two query heads share one key/value head; causal,
// bottom-right aligned (row i sees keys j <= i + 2).
constexpr int64_t kNq = 3, kNk = 5, kHq = 2, kHk = 1, kD = 4;
constexpr double kTol = 1e-5;  // fp32 results of O(1) values against double

struct Data {
  std::vector<float> q, k, v;
};

Data make_data() {
  Data d;
  for (int64_t i = 0; i < kNq * kHq * kD; ++i) d.q.push_back(static_cast<float>((i * 5) % 11) / 5.0f - 1.0f);
  for (int64_t i = 0; i < kNk * kHk * kD; ++i) d.k.push_back(static_cast<float>((i * 3) % 7) / 3.0f - 1.0f);
  for (int64_t i = 0; i < kNk * kHk * kD; ++i) d.v.push_back(static_cast<float>((i * 7) % 13) / 4.0f - 1.5f);
  return d;
}

// Attention written out directly: softmax(q kᵀ / sqrt(d)) v over the causal keys, in double.
void expected(const Data& d, std::vector<double>& out, std::vector<double>& lse) {
  out.assign(kNq * kHq * kD, 0.0);
  lse.assign(kHq * kNq, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
  for (int64_t h = 0; h < kHq; ++h)
    for (int64_t i = 0; i < kNq; ++i) {
      std::vector<double> s;
      for (int64_t j = 0; j <= i + kNk - kNq; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < kD; ++x) dot += double{d.q[(i * kHq + h) * kD + x]} * d.k[j * kD + x];
        s.push_back(scale * dot);
      }
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (double e : s) m = std::fmax(m, e);
      for (double e : s) sum += std::exp(e - m);
      for (size_t j = 0; j < s.size(); ++j)
        for (int64_t x = 0; x < kD; ++x)
          out[(i * kHq + h) * kD + x] += std::exp(s[j] - m) / sum * d.v[j * kD + x];
      lse[h * kNq + i] = m + std::log(sum);
    }
}

// Runs `forward` on the problem and returns the number of mismatches against `expected`.
template <class Forward>
int check(const char* name, Forward forward) {
  Data d = make_data();
  std::vector<float> out(kNq * kHq * kD, -7.0f), lse(kHq * kNq, -7.0f);
  flashattn::ForwardArgs a;
  a.q = flashattn::bshd(d.q.data(), flashattn::DType::f32, 1, kNq, kHq, kD);
  a.k = flashattn::bshd(d.k.data(), flashattn::DType::f32, 1, kNk, kHk, kD);
  a.v = flashattn::bshd(d.v.data(), flashattn::DType::f32, 1, kNk, kHk, kD);
  a.out = flashattn::bshd(out.data(), flashattn::DType::f32, 1, kNq, kHq, kD);
  a.lse = lse.data();
  a.causal = true;
  forward(a);
  std::vector<double> want_out, want_lse;
  expected(d, want_out, want_lse);
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double err = std::fabs(out[i] - want_out[i]);
    worst = std::fmax(worst, err);
    bad += !(err <= kTol);
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    const double err = std::fabs(lse[i] - want_lse[i]);
    worst = std::fmax(worst, err);
    bad += !(err <= kTol);
  }
  std::printf("%s forward: %zu outputs + %zu lse, max |error| %.3g, %d over %.0e\n", name, out.size(), lse.size(),
              worst, bad, kTol);

  // A bad argument (3 key heads cannot serve 2 query heads) is rejected with flashattn::Error.
  a.k.heads = a.v.heads = 3;
  try {
    forward(a);
    std::printf("%s forward accepted k.heads = 3 for q.heads = 2\n", name);
    ++bad;
  } catch (const flashattn::Error& e) {
    std::printf("%s rejects bad arguments: %s\n", name, e.what());
  }
  return bad;
}

}  // namespace

#ifdef CONSUMER_HAS_GPU
int check_gpu();  // gpu_check.cpp
#endif

int main() {
  int bad = check("reference", [](const flashattn::ForwardArgs& a) { flashattn::reference::forward(a); });
#ifdef CONSUMER_HAS_CPU
  bad += check("cpu", [](const flashattn::ForwardArgs& a) { flashattn::cpu::forward(a); });
#else
  std::printf("cpu backend not in this package\n");
#endif
#ifdef CONSUMER_HAS_GPU
  bad += check_gpu();
#else
  std::printf("gpu backend not in this package\n");
#endif
  std::printf("%s\n", bad == 0 ? "consumer: PASS" : "consumer: FAIL");
  return bad == 0 ? 0 : 1;
}
