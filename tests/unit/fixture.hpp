// Shared by the validation tests: a small valid call whose buffers can be snapshotted, and checks
// that a bad call throws flashattn::Error with the expected words and writes nothing.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/flashattn.hpp"
#include "flashattn/reference.hpp"
#ifdef FLASHATTN_UNIT_HAS_CPU
#include "flashattn/cpu.hpp"
#endif

namespace unit {

// Byte written to every output element before a call that must be rejected.
constexpr unsigned char kSentinelByte = 0xA5;
// Extra elements after each buffer, so shifted (misaligned, overlapping) views stay in bounds.
constexpr size_t kSlack = 64;

// Sizes of the default call: GQA (4 query heads over 2 key heads), Nq != Nk, batch 2.
struct Shape {
  int64_t batch = 2, nq = 4, nk = 5, hq = 4, hk = 2, d = 8;
  flashattn::DType dtype = flashattn::DType::f32;
};

// Owns the buffers of one forward and backward call (contiguous bshd views) and the optional host
// arrays. Inputs hold small deterministic values; outputs hold the sentinel byte.
struct Fixture {
  Shape shape;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<int32_t> cu_q, cu_k, seqlens_k;
  std::vector<float> alibi;
  flashattn::ForwardArgs fwd;
  flashattn::BackwardArgs bwd;

  explicit Fixture(Shape s = {}) : shape(s) {
    using flashattn::bshd;
    const int64_t nq_elems = s.batch * s.nq * s.hq * s.d, nk_elems = s.batch * s.nk * s.hk * s.d;
    fill_input(q, nq_elems, 1);
    fill_input(k, nk_elems, 2);
    fill_input(v, nk_elems, 3);
    fill_input(out, nq_elems, 4);  // an input of the backward pass
    fill_input(dout, nq_elems, 5);
    fill_output(lse, s.batch * s.hq * s.nq);
    fill_output(dq, nq_elems);
    fill_output(dk, nk_elems);
    fill_output(dv, nk_elems);
    fwd.q = bshd(q.data(), s.dtype, s.batch, s.nq, s.hq, s.d);
    fwd.k = bshd(k.data(), s.dtype, s.batch, s.nk, s.hk, s.d);
    fwd.v = bshd(v.data(), s.dtype, s.batch, s.nk, s.hk, s.d);
    fwd.out = bshd(out.data(), s.dtype, s.batch, s.nq, s.hq, s.d);
    fwd.lse = lse.data();
    bwd = flashattn::backward_args(fwd);
    bwd.dout = bshd(dout.data(), s.dtype, s.batch, s.nq, s.hq, s.d);
    bwd.dq = bshd(dq.data(), s.dtype, s.batch, s.nq, s.hq, s.d);
    bwd.dk = bshd(dk.data(), s.dtype, s.batch, s.nk, s.hk, s.d);
    bwd.dv = bshd(dv.data(), s.dtype, s.batch, s.nk, s.hk, s.d);
  }
  Fixture(const Fixture&) = delete;  // views point into this object's buffers
  Fixture& operator=(const Fixture&) = delete;

  // Forward args whose out is pre-filled with the sentinel (out is an input of the backward).
  flashattn::ForwardArgs forward() {
    std::memset(out.data(), kSentinelByte, out.size() * sizeof(float));
    return fwd;
  }

  // Returns every byte the fixture owns, to compare before and after a rejected call.
  std::vector<unsigned char> snapshot() const {
    std::vector<unsigned char> r;
    for (const auto* b : {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &alibi}) append(r, *b);
    for (const auto* b : {&cu_q, &cu_k, &seqlens_k}) append(r, *b);
    return r;
  }

 private:
  template <class T>
  static void append(std::vector<unsigned char>& r, const std::vector<T>& b) {
    const auto* p = reinterpret_cast<const unsigned char*>(b.data());
    r.insert(r.end(), p, p + b.size() * sizeof(T));
  }
  void fill_input(std::vector<float>& b, int64_t n, int seed) const {
    b.assign(static_cast<size_t>(n) + kSlack, 0.0f);
    for (int64_t i = 0; i < n; ++i)
      flashattn::store_from_float(b.data(), shape.dtype, i, static_cast<float>((i * 7 + seed * 13) % 17 - 8) / 8.0f);
  }
  static void fill_output(std::vector<float>& b, int64_t n) {
    b.assign(static_cast<size_t>(n) + kSlack, 0.0f);
    std::memset(b.data(), kSentinelByte, b.size() * sizeof(float));
  }
};

// Runs `call`, which must throw flashattn::Error; returns its message ("" and a failed check if not).
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const flashattn::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw a non-flashattn exception: " << e.what());
    return "";
  }
  FAIL_CHECK("accepted invalid arguments");
  return "";
}

// Checks that `message` contains every word of `words`.
inline void check_words(const std::string& message, std::initializer_list<const char*> words) {
  for (const char* w : words)
    CHECK_MESSAGE(message.find(w) != std::string::npos, "message \"" << message << "\" lacks \"" << std::string(w) << "\"");
}

// Checks that every entry point of a forward call rejects `a` with `words` and writes nothing.
inline void reject(Fixture& fx, const flashattn::ForwardArgs& a, std::initializer_list<const char*> words) {
  const auto before = fx.snapshot();
  check_words(error_of([&] { flashattn::validate(a); }), words);
  for (auto p : {flashattn::reference::Precision::fp64, flashattn::reference::Precision::same_as_input})
    check_words(error_of([&] { flashattn::reference::forward(a, p); }), words);
#ifdef FLASHATTN_UNIT_HAS_CPU
  check_words(error_of([&] { flashattn::cpu::forward(a); }), words);
#endif
  CHECK_MESSAGE(fx.snapshot() == before, "a rejected forward call wrote to memory");
}

// Checks that every entry point of a backward call rejects `a` with `words` and writes nothing.
inline void reject(Fixture& fx, const flashattn::BackwardArgs& a, std::initializer_list<const char*> words) {
  const auto before = fx.snapshot();
  check_words(error_of([&] { flashattn::validate(a); }), words);
  for (auto p : {flashattn::reference::Precision::fp64, flashattn::reference::Precision::same_as_input})
    check_words(error_of([&] { flashattn::reference::backward(a, p); }), words);
#ifdef FLASHATTN_UNIT_HAS_CPU
  check_words(error_of([&] { flashattn::cpu::backward(a); }), words);
#endif
  CHECK_MESSAGE(fx.snapshot() == before, "a rejected backward call wrote to memory");
}

}  // namespace unit
