// Fixed forward cases aimed at the GPU forward's online softmax (gpu/forward_kernel.cuh), run by
// the host emulator: the kernel skips the rescale of O when no row of a warp raised its maximum in
// a key tile, so the vote must count every row of the warp. Random scores almost never leave the
// maxima of half a warp's rows still while the other half keep rising, which is the case here:
// rows 8-15 of every 16 (or rows 0-7) see a score that grows by 0.5 with every 32 keys, the other
// rows see their maximum at key 0 and nothing larger afterwards.
// Also: the plain forward variant takes each row's maximum before scaling, valid only for a positive
// scale (params.cuh, plain_forward_scale); zero, negative and subnormal scales must run the variant
// with the options' code and still agree with the oracle, in causal tiles (masked −inf scores)
// and full ones.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "emu/props_calls.hpp"
#include "flashattn/convert.hpp"
#include "props/buffers.hpp"
#include "props/case.hpp"
#include "props/check.hpp"
#include "props/crosscheck.hpp"
#include "props/instance.hpp"
#include "props/registry.hpp"
#include "tolerance/judge.hpp"

namespace {

// Runs the emulated forward, then the backward in each dQ mode of `modes` (deterministic or not),
// on case c; checks each against the fp64 oracle by the tolerance rule, and the inputs, canaries
// and padding intact after each call.
void check_forward_backward(const props::Case& c, std::initializer_list<bool> modes = {false, true}) {
  CAPTURE(props::to_string(c));
  props::Instance inst(c);
  const flashattn::ForwardArgs a = inst.forward_args();
  flashattn::gpu_emu::forward_in_gpu_layout(a);
  const flashattn::tolerance::Judgement f = flashattn::tolerance::judge_forward(a);
  CHECK_MESSAGE(f.passed(), "forward: " << f.first_failure());
  CHECK(inst.check() == "");
  for (bool deterministic : modes) {
    const flashattn::BackwardArgs g = inst.backward_args();
    flashattn::gpu_emu::backward_in_gpu_layout(g, deterministic);
    const flashattn::tolerance::Judgement b = flashattn::tolerance::judge_backward(g);
    CHECK_MESSAGE(b.passed(), (deterministic ? "deterministic" : "atomic") << " backward: " << b.first_failure());
    CHECK(inst.check() == "");
  }
}

TEST_CASE("gpu-emulated forward: O is rescaled when only some rows of a warp raise their maximum") {
  for (int dim : {64, 128})
    for (int rising_half : {0, 1}) {  // rows 16t + 8·rising_half + [0, 8) keep raising their maximum
      props::Case c;
      c.seqlen_q = 64;
      c.seqlen_k = 512;
      c.dim = dim;
      c.dtype = flashattn::DType::bf16;
      c.seed = 3;
      props::Instance inst(c);
      const int64_t nq = c.seqlen_q, nk = c.seqlen_k, d = dim;
      std::vector<double> q(nq * d, 0.0), k(nk * d, 0.0), v(nk * d);
      for (int64_t i = 0; i < nq; ++i) q[i * d + ((i % 16) / 8 == rising_half ? 1 : 0)] = 1.0;
      const double unit = std::sqrt(static_cast<double>(d));  // a key entry of `unit` scores 1 (scale 1/√d)
      for (int64_t j = 0; j < nk; ++j) {
        k[j * d] = j == 0 ? 2 * unit : 0.0;           // the still rows: score 2 at key 0, 0 after
        k[j * d + 1] = 0.5 * unit * (j / 32);         // the rising rows: 0.5 more every 32 keys
        for (int64_t x = 0; x < d; ++x) v[j * d + x] = std::sin(0.37 * static_cast<double>(j) + 1.3 * x);
      }
      props::write_dense(inst.q(), q);
      props::write_dense(inst.k(), k);
      props::write_dense(inst.v(), v);
      const flashattn::ForwardArgs a = inst.forward_args();
      flashattn::gpu_emu::forward_in_gpu_layout(a);
      const flashattn::tolerance::Judgement j = flashattn::tolerance::judge_forward(a);
      CHECK_MESSAGE(j.passed(), "d=" << dim << " rising half " << rising_half << ": " << j.first_failure());
      const std::string intact = inst.check();  // inputs unchanged, canaries and padding intact
      CHECK_MESSAGE(intact.empty(), intact);
    }
}

TEST_CASE("gpu-emulated forward and backward: zero, negative and subnormal scales agree with the oracle") {
  for (int dim : {64, 128})
    for (float scale : {-0.25f, -1.0f, 0.0f, -0.0f, 1e-40f, 0.125f})
      for (bool causal : {false, true}) {
        props::Case c;
        c.seqlen_q = 70;
        c.seqlen_k = 150;
        c.dim = dim;
        c.dtype = flashattn::DType::f16;
        c.causal = causal;
        c.scale = scale;
        c.seed = 7;
        check_forward_backward(c, {true});
      }
}

}  // namespace

// The plain variants' tile shapes: the forward's 64-key tiles (full tiles found by full_tiles, cut
// ones by the element tests) and the dK/dV kernel's 128-key blocks up to d = 128 (one warp per
// 16-key slab, dQ added once per 128 keys). Random cases rarely reach several key blocks at these dims; here every
// case has three or more, a last block cut by the sequence's end, and queries past the last whole
// query block; window edges and the causal diagonal cut tiles in the middle of the key range.
TEST_CASE("gpu-emulated forward and backward: several 64-key tiles and 128-key blocks, d = 32 to 128") {
  struct Shape {
    int64_t nq, nk, group, left, right;
    bool causal;
    std::vector<int32_t> varlen_q, varlen_k;
  };
  const std::vector<Shape> shapes = {
      {200, 300, 1, -1, -1, false, {}, {}},   // full tiles only, but for the last (cut at key 300)
      {200, 300, 2, -1, -1, true, {}, {}},    // causal, bottom-right: the diagonal cuts tiles 2-4
      {130, 390, 1, 70, 40, false, {}, {}},   // a window: full tiles between two cut edges
      {0, 0, 1, -1, -1, true, {150, 40}, {270, 130}},  // varlen: a block spans no sequence end
  };
  for (int dim : {32, 64, 96, 128})
    for (const Shape& sh : shapes) {
      props::Case c;
      c.dim = dim;
      c.dtype = dim % 64 == 32 ? flashattn::DType::f16 : flashattn::DType::bf16;
      c.heads_k = 2;
      c.group = sh.group;
      c.causal = sh.causal;
      c.window_left = sh.left;
      c.window_right = sh.right;
      if (sh.varlen_q.empty()) {
        c.seqlen_q = sh.nq;
        c.seqlen_k = sh.nk;
      } else {
        c.batch = static_cast<int64_t>(sh.varlen_q.size());
        c.varlen_q = sh.varlen_q;
        c.varlen_k = sh.varlen_k;
        c.seqlen_q = c.seqlen_k = 0;
        for (size_t s = 0; s < sh.varlen_q.size(); ++s) {
          c.seqlen_q += sh.varlen_q[s];
          c.seqlen_k += sh.varlen_k[s];
        }
      }
      c.seed = 11;
      check_forward_backward(c);
    }
}

// Mask edges at the tiles' edges: the fast paths take a tile the mask leaves full for every row
// without per-element tests (the forward's full_tiles over 128-row blocks of 64-key tiles, the
// dK/dV kernel's and dq kernel's `partial`), so a classification one key off at a tile's first or
// last column passes every case whose edges fall elsewhere. Here the causal diagonal and the window's
// two edges of a block's first and last rows sit one key before, at and after a 64-key boundary.
TEST_CASE("gpu-emulated forward and backward: mask edges one key either side of a tile boundary") {
  struct Shape {
    int64_t nq, nk, left, right;
    bool causal;
  };
  std::vector<Shape> shapes;
  for (int64_t delta : {62, 63, 64, 65}) shapes.push_back({128, 128 + delta, -1, -1, true});  // row 0 sees keys 0..delta
  // Row i (aligned with key i + 128) sees from key i + 128 − left: the last row of a 128-row block
  // from 193, 192, 191 (64-key tiles) and 129, 128, 127 (128-key blocks).
  for (int64_t left : {62, 63, 64, 126, 127, 128})
    for (int64_t right : {-1, 0}) shapes.push_back({128, 256, left, right, false});
  for (int dim : {64, 128})
    for (const Shape& sh : shapes) {
      props::Case c;
      c.dim = dim;
      c.dtype = flashattn::DType::f16;  // f16's finer rounding: one key's weight in one row stands out
      c.seqlen_q = sh.nq;
      c.seqlen_k = sh.nk;
      c.causal = sh.causal;
      c.window_left = sh.left;
      c.window_right = sh.right;
      c.seed = 13;
      check_forward_backward(c);
    }
}

// Generated problems over several key tiles: the shared generator fits each case into a work
// budget that, at the GPU's head dims, leaves most sequences within one or two 64-key tiles, so
// the double-buffered pipeline's steady state (a third tile's loads over a second tile's products,
// the end-of-loop barrier) ran in few CI cases. Here every case has 129-300 keys (3-5 tiles of 64)
// and one to three 64-row query blocks, with every other option of the generator (masks, windows,
// softcap, ALiBi, GQA, layouts, values), for every registered emulated implementation.
TEST_CASE("gpu-emulated forward and backward: generated problems over three or more key tiles agree with the oracle") {
  props::CaseSpace space;
  space.varlen = 0;
  space.max_work = int64_t{1} << 24;
  for (const props::Implementation* impl : props::implementations())
    props::check(impl->name + "/multi-tile", [impl, space] {
      props::Case c = *props::gen_case(space);
      c.batch = 1;
      c.heads_k = 1;
      c.group = std::min<int64_t>(c.group, 2);
      c.seqlen_k = *rc::gen::inRange<int64_t>(129, 301);
      const int64_t self = std::min<int64_t>(c.seqlen_k, 130), other = *rc::gen::inRange<int64_t>(1, 131);
      c.seqlen_q = *rc::gen::element(self, other);
      c.key_lengths.clear();
      if (impl->unsupported) RC_PRE(impl->unsupported(c).empty());
      RC_LOG() << props::to_string(c) << "\n";
      const std::string f = props::crosscheck_forward(*impl, c);
      if (!f.empty()) RC_FAIL(f);
      if (impl->backward) {
        const std::string b = props::crosscheck_backward(*impl, c);
        if (!b.empty()) RC_FAIL(b);
      }
    }, 10);
}

// A NaN query row: every score of the row is NaN, which fmaxf drops, so the row's maximum stays −∞
// as for a row that sees no key; it must still come out NaN (O and LSE), never as the empty row's
// O = 0, LSE = −∞, in the plain and the options' forward;
// the other rows keep their oracle values.
TEST_CASE("gpu-emulated forward: a NaN query row gives NaN O and LSE, not an empty row") {
  for (int dim : {64, 128})
    for (bool options : {false, true}) {
      props::Case c;
      c.dim = dim;
      c.dtype = flashattn::DType::bf16;
      c.seqlen_q = 70;
      c.seqlen_k = 150;
      c.causal = true;
      if (options) c.softcap = 5;
      c.seed = 17;
      CAPTURE(props::to_string(c));
      props::Instance inst(c);
      const flashattn::ForwardArgs a = inst.forward_args();
      const int64_t row = 33;
      for (int64_t x = 0; x < dim; ++x)
        flashattn::store_from_float(const_cast<void*>(a.q.data), a.q.dtype, a.q.offset(0, row, 0) + x, NAN);
      flashattn::gpu_emu::forward_in_gpu_layout(a);
      const std::vector<double> out = props::read_dense(inst.out());
      CHECK(std::isnan(out[static_cast<size_t>(row * dim)]));
      CHECK(std::isnan(inst.lse()[row]));
      CHECK(std::isfinite(out[static_cast<size_t>((row + 1) * dim)]));
      CHECK(std::isfinite(inst.lse()[row + 1]));
    }
}
