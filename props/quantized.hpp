// props::QuantizedProblem: a generated forward call over quantized K/V (docs/semantics.md,
// "Quantized K/V"): int8, e4m3 or e5m2 caches, contiguous or paged (pages in a random order), with
// scales per tensor, per head or per (row, head); rows past each sequence's key count, unused pages
// and their scales hold garbage (NaN patterns, NaN scales) that must never be read. Beside the call,
// the same problem over fp32 K/V holding the values dequantized by this file's own decoder (q
// widened to fp32), which the oracle must compute bit for bit alike. Sometimes the call appends new
// rows into the quantized caches (docs/semantics.md, "Appending to a quantized cache"); the fp32
// problem then holds them as this file quantizes them, by its own search for the nearest code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "flashattn/args.hpp"

namespace props {

struct QuantizedSpec {
  int64_t batch = 1, heads_k = 1, group = 1, seqlen_q = 1, dim = 8, dim_v = 8;
  flashattn::DType dtype = flashattn::DType::f32;  // q and out
  flashattn::DType quant = flashattn::DType::i8;   // k and v
  flashattn::ScaleGranularity granularity = flashattn::ScaleGranularity::tensor;
  bool causal = false;
  int64_t window_left = -1;
  float softcap = 0;
  bool sinks = false;
  int64_t page_size = 0;         // 0: contiguous caches
  std::vector<int32_t> lengths;  // keys of each sequence (seqlens_k)
  int64_t capacity = 1;          // rows per sequence of the caches (a multiple of page_size when paged)
  int64_t num_splits = 0;
  bool bias = false;       // an additive fp32 bias [B, Hq, Nq, capacity] (a few entries −inf)
  float dropout_p = 0;     // dropout (seed from `seed`)
  int64_t new_rows = 0;  // rows the call appends to every sequence (0: no append)
  bool raw_codes = false;  // cache elements are uniformly random finite codes (fp8: values over
                           // 30+ binades, whose dot products are one or two of their terms)
  uint64_t seed = 0;

  int64_t heads_q() const { return heads_k * group; }
  std::string describe() const;
};

rc::Gen<QuantizedSpec> gen_quantized();

// Returns the value of 8-bit pattern `byte` of quantized dtype t by the formats' definitions (int8,
// OCP E4M3FN, OCP E5M2), written here independently of flashattn/convert.hpp.
double decode_quantized(flashattn::DType t, uint8_t byte);

// Returns the code of quantized dtype t for fp32 value y as an append writes it: the nearest value,
// ties to the even code, saturating at the largest finite one (i8: +-127), NaN to the NaN pattern.
// Found by search over the patterns with decode_quantized.
uint8_t nearest_code(flashattn::DType t, float y);

class QuantizedProblem {
 public:
  explicit QuantizedProblem(const QuantizedSpec& s);
  QuantizedProblem(const QuantizedProblem&) = delete;
  QuantizedProblem& operator=(const QuantizedProblem&) = delete;

  // The call under test (out and lse poisoned first).
  flashattn::ForwardArgs call();
  // The same problem over fp32: q widened, K/V [B, capacity, Hk, d] dequantized by
  // decode_quantized · scale rounded to fp32, contiguous; its own out and lse.
  flashattn::ForwardArgs dequantized();
  const QuantizedSpec& spec() const { return spec_; }

 private:
  QuantizedSpec spec_;
  std::vector<unsigned char> q_, out_;
  std::vector<uint8_t> kc_, vc_;
  std::vector<unsigned char> knew_, vnew_;  // appended rows [B, new_rows, Hk, d / dv] in q's dtype
  std::vector<int32_t> after_;              // each sequence's keys after the append
  std::vector<float> ks_, vs_, q32_, k32_, v32_, out32_, lse_, lse32_, sinks_, bias_;
  std::vector<int32_t> table_;
  int64_t pages_ = 0, stride_ = 0;
};

// Runs `forward` on p.call() and returns "" if out and lse pass the tolerance rule against the
// oracle on that call (with an append: on the plain call over the caches it wrote), else the first
// failure.
std::string check_quantized_forward(QuantizedProblem& p, const std::function<void(const flashattn::ForwardArgs&)>& forward);

}  // namespace props
