// flashattn::gpu's argument checks that need no device: they run in CI without a GPU. Every case
// is rejected before the backend touches CUDA, so host buffers stand in for device memory (the
// checks read addresses and strides only).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/error.hpp"
#include "flashattn/gpu.hpp"

namespace {

using flashattn::DType;

constexpr int64_t B = 1, N = 64, H = 2, D = 64;

// Four buffers of B·N·H·D 32-bit elements (room for f32 views), 16-byte aligned by malloc.
struct Buffers {
  std::vector<float> q = std::vector<float>(B * N * H * D), k = q, v = q, out = q, dout = q, dq = q, dk = q, dv = q;
  std::vector<float> lse = std::vector<float>(B * H * N);
};

flashattn::BackwardArgs make_args(Buffers& b, DType t, int64_t dim = D) {
  flashattn::BackwardArgs a;
  a.q = flashattn::bshd(b.q.data(), t, B, N, H, dim);
  a.k = flashattn::bshd(b.k.data(), t, B, N, H, dim);
  a.v = flashattn::bshd(b.v.data(), t, B, N, H, dim);
  a.out = flashattn::bshd(b.out.data(), t, B, N, H, dim);
  a.lse = b.lse.data();
  a.dout = flashattn::bshd(b.dout.data(), t, B, N, H, dim);
  a.dq = flashattn::bshd(b.dq.data(), t, B, N, H, dim);
  a.dk = flashattn::bshd(b.dk.data(), t, B, N, H, dim);
  a.dv = flashattn::bshd(b.dv.data(), t, B, N, H, dim);
  return a;
}

// Returns the forward call over the backward's inputs, writing into its out and lse (the
// test's own buffers, so making them writable again is safe here).
flashattn::ForwardArgs forward_of(const flashattn::BackwardArgs& a) {
  flashattn::ForwardArgs f;
  static_cast<flashattn::AttentionArgs&>(f) = a;
  const flashattn::ConstTensor& o = a.out;
  f.out = flashattn::Tensor{const_cast<void*>(o.data), o.dtype,        o.batch,      o.seq,
                            o.heads,                  o.dim,          o.stride_batch, o.stride_seq, o.stride_head};
  f.lse = const_cast<float*>(a.lse);
  return f;
}

// Returns the flashattn::Error message of forward and of backward (they must agree), or "".
std::string message(const flashattn::BackwardArgs& a) {
  std::string f, b;
  try {
    flashattn::gpu::forward(forward_of(a));
  } catch (const flashattn::Error& e) {
    f = e.what();
  }
  try {
    flashattn::gpu::backward(a);
  } catch (const flashattn::Error& e) {
    b = e.what();
  }
  CHECK(f == b);
  return f;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("gpu rejects f32 naming the dtype") {
  Buffers b;
  const std::string m = message(make_args(b, DType::f32));
  CHECK(contains(m, "gpu: dtype f32 is not supported"));
  CHECK(flashattn::gpu::unsupported_reason(DType::f32, 64) != "");
}

TEST_CASE("gpu rejects head dims outside its set naming the head dim") {
  Buffers b;
  for (int64_t d : {8, 40, 48, 80}) {
    CAPTURE(d);
    CHECK(contains(message(make_args(b, DType::bf16, d)), "gpu: head dim " + std::to_string(d) + " is not supported"));
  }
  for (int64_t d : {32, 64, 96, 128, 256}) {
    const std::string why = flashattn::gpu::unsupported_reason(DType::f16, d);
    CAPTURE(why);
    CHECK((why.empty() || contains(why, "was not compiled into this build")));
  }
}

TEST_CASE("gpu rejects rows that are not 16-byte aligned") {
  Buffers b;
  flashattn::BackwardArgs a = make_args(b, DType::f16);
  a.k.seq = a.v.seq = N / 2;
  a.k.stride_seq = a.v.stride_seq = H * D + 4;  // 8 bytes past alignment
  a.dk.seq = a.dv.seq = N / 2;
  CHECK(contains(message(a), "gpu: k.stride_seq (132) must be a multiple of 8 elements"));

  a = make_args(b, DType::bf16);
  a.q.data = static_cast<const char*>(a.q.data) + 2;  // one element off
  a.q.seq = a.out.seq = a.dout.seq = a.dq.seq = N - 1;
  CHECK(contains(message(a), "must be 16-byte aligned"));
}

TEST_CASE("gpu applies the shared validation first") {
  Buffers b;
  flashattn::BackwardArgs a = make_args(b, DType::bf16);
  a.k.heads = a.v.heads = a.dk.heads = a.dv.heads = 3;
  a.k.stride_seq = a.v.stride_seq = a.dk.stride_seq = a.dv.stride_seq = 3 * D;
  a.k.stride_batch = a.v.stride_batch = a.dk.stride_batch = a.dv.stride_batch = N / 2 * 3 * D;
  a.k.seq = a.v.seq = a.dk.seq = a.dv.seq = N / 2;
  CHECK(contains(message(a), "k.heads (3) must divide q.heads (2)"));
}
