// The dropout keep mask output (see flashattn/dropout.hpp).
#include "flashattn/dropout.hpp"

#include <cstdint>

#include "flashattn/philox.hpp"
#include "flashattn/problem.hpp"

namespace flashattn {

void write_dropout_mask(const ForwardArgs& a) {
  if (!a.dropout_mask) return;
  const int64_t row_bytes = dropout_mask_row_bytes(a);
  const uint32_t threshold = dropout_threshold(a.dropout_p);
  for (int64_t s = 0; s < num_sequences(a); ++s) {
    const Sequence seq = sequence(a, s);
    for (int64_t h = 0; h < a.q.heads; ++h) {
      const uint64_t stream = dropout_stream(a.dropout_offset, s, a.q.heads, h);
      for (int64_t i = 0; i < seq.mask.seqlen_q; ++i) {
        uint8_t* row = a.dropout_mask + lse_index(a, seq, h, i) * row_bytes;
        for (int64_t j8 = 0; j8 < row_bytes; ++j8)
          row[j8] = dropout_mask_byte(a.dropout_seed, stream, i, j8, threshold, seq.mask.seqlen_k);
      }
    }
  }
}

}  // namespace flashattn
