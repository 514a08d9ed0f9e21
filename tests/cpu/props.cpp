// Property runner for flashattn::cpu. Registers one implementation per compiled Highway target
// this CPU supports, with the default tiles and with tiny tiles (forced so that small cases cross
// tile boundaries, partial vectors and key-block tails), each with an odd thread count on the tiny
// variant, the best target with exact scores on every tile (ScorePrecision::fp64), and the best
// target with the decode path off (Config.decode = false, default and tiny tiles). Every
// registered implementation then runs the shared cross-check properties.
#include <cstring>
#include <string>

#include "flashattn/cpu.hpp"
#include "props/registry.hpp"
#include "props.hpp"

namespace props_cpu {

std::vector<uint32_t> view_bits(const flashattn::Tensor& t) {
  std::vector<uint32_t> r;
  const size_t es = flashattn::dtype_size(t.dtype);
  const auto* base = static_cast<const unsigned char*>(t.data);
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t x = 0; x < t.dim; ++x) {
          uint32_t v = 0;
          std::memcpy(&v, base + (t.offset(b, s, h) + x) * es, es);
          r.push_back(v);
        }
  return r;
}

}  // namespace props_cpu

namespace {

// Odd, oversubscribed thread count of the tiny-tile variants (2 cores in CI).
constexpr int kTinyThreads = 3;
// Tiles of the tiny variant: 3 query rows (partial vectors on every target), 5 keys per block.
constexpr int kTinyBlockQ = 3;
constexpr int kTinyBlockK = 5;
// Query blocks per backward pass over the keys in the tiny variant (the default variant takes 1 at
// these sizes): passes of several blocks with partial last passes.
constexpr int kTinyBackwardBlocks = 3;

props::Implementation cpu_implementation(const flashattn::cpu::Target& t, bool tiny,
                                         flashattn::cpu::ScorePrecision scores = flashattn::cpu::ScorePrecision::adaptive,
                                         bool decode = true) {
  flashattn::cpu::Config c;
  c.target = t.bit;
  c.scores = scores;
  c.decode = decode;
  if (tiny) {
    c.block_q = kTinyBlockQ;
    c.block_k = kTinyBlockK;
    c.threads = kTinyThreads;
    c.backward_blocks = kTinyBackwardBlocks;
  }
  const bool fp64 = scores == flashattn::cpu::ScorePrecision::fp64;
  return {"cpu-" + t.name + (tiny ? "-tiny" : "") + (fp64 ? "-fp64-scores" : "") + (decode ? "" : "-general"),
          [c](const flashattn::ForwardArgs& a) { flashattn::cpu::forward(a, c); },
          [c](const flashattn::BackwardArgs& a) { flashattn::cpu::backward(a, c); },
          {}};
}

}  // namespace

int main(int argc, char** argv) {
  for (const flashattn::cpu::Target& t : flashattn::cpu::targets()) {
    props::add(cpu_implementation(t, false));
    props::add(cpu_implementation(t, true));
  }
  // Exact (fp64) scores on every tile, on the best target: the adaptive default takes that path
  // only for tiles with large scores.
  props::add(cpu_implementation(flashattn::cpu::targets().front(), false, flashattn::cpu::ScorePrecision::fp64));
  // The variants above send decode-shaped cases (few query rows per key head, cpu/decode.h) to the
  // decode path; these keep the general tiled forward checked on the same small cases.
  props::add(cpu_implementation(flashattn::cpu::targets().front(), false, flashattn::cpu::ScorePrecision::adaptive, false));
  props::add(cpu_implementation(flashattn::cpu::targets().front(), true, flashattn::cpu::ScorePrecision::adaptive, false));
  return props::run(argc, argv);
}
