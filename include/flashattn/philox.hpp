// The dropout keep decision (docs/semantics.md, "Dropout"): Philox4x32-10 (Salmon, Moraes, Dror,
// Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011) and the stream layout that maps an
// element (sequence s, query head h, row i, key j) to its 16 random bits. The one definition every
// backend uses; host and device (FLASHATTN_HD).
#pragma once

#include <cstdint>

#include "flashattn/config.hpp"

namespace flashattn {

// Four 32-bit words: a Philox counter or its output.
struct Philox4 {
  uint32_t x[4];
};

// Returns Philox4x32-10(counter, key (k0, k1)): 10 rounds, the key bumped between rounds.
FLASHATTN_HD constexpr Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = uint64_t{kM0} * c.x[0], p1 = uint64_t{kM1} * c.x[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = Philox4{{hi1 ^ c.x[1] ^ k0, lo1, hi0 ^ c.x[3] ^ k1, lo0}};
  }
  return c;
}

// Returns the threshold t = ⌊p · 65536⌋ of dropout probability p in [0, 1): a key is kept iff its
// 16 random bits are >= t. p · 65536 is exact (a power-of-two multiple of an fp32 value).
FLASHATTN_HD constexpr uint32_t dropout_threshold(float p) { return static_cast<uint32_t>(p * 65536.0f); }

// Returns the Philox stream of sequence s, query head h of a call with `heads_q` query heads:
// (offset + s·heads_q + h) mod 2^64.
FLASHATTN_HD constexpr uint64_t dropout_stream(uint64_t offset, int64_t s, int64_t heads_q, int64_t h) {
  return offset + static_cast<uint64_t>(s) * static_cast<uint64_t>(heads_q) + static_cast<uint64_t>(h);
}

// Returns the keep decisions of keys 8·j8 … 8·j8 + 7 of row i on stream `stream` as 8 bits (bit w:
// key 8·j8 + w), from one Philox call: counter (j8, i, stream mod 2^32, stream / 2^32), key the seed.
FLASHATTN_HD constexpr uint32_t dropout_keep_bits(uint64_t seed, uint64_t stream, int64_t i, int64_t j8,
                                                  uint32_t threshold) {
  const Philox4 r = philox4x32_10(
      Philox4{{static_cast<uint32_t>(j8), static_cast<uint32_t>(i), static_cast<uint32_t>(stream),
               static_cast<uint32_t>(stream >> 32)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  uint32_t bits = 0;
  for (int w = 0; w < 8; ++w) {
    const uint32_t word = (r.x[w / 2] >> (16 * (w % 2))) & 0xFFFFu;
    bits |= static_cast<uint32_t>(word >= threshold) << w;
  }
  return bits;
}

// Returns byte j8 of a keep-mask row (ForwardArgs::dropout_mask) of row i on `stream` for a sequence
// with `keys` keys: dropout_keep_bits for the keys below `keys`, 0 for the bits past it.
FLASHATTN_HD constexpr uint8_t dropout_mask_byte(uint64_t seed, uint64_t stream, int64_t i, int64_t j8,
                                                 uint32_t threshold, int64_t keys) {
  const int64_t valid = keys - 8 * j8;
  if (valid <= 0) return 0;
  const uint32_t bits = dropout_keep_bits(seed, stream, i, j8, threshold);
  return static_cast<uint8_t>(valid >= 8 ? bits : bits & ((1u << valid) - 1u));
}

// Returns what a kept P is multiplied by, 1/(1 − p) rounded once to fp32 (1 for p = 0): the one
// value every backend uses.
FLASHATTN_HD constexpr float dropout_keep_scale(float p) {
  return p > 0 ? static_cast<float>(1.0 / (1.0 - static_cast<double>(p))) : 1.0f;
}

// Returns whether P_ij of row i, key j on `stream` is kept (dropout_keep_bits, one bit of it).
FLASHATTN_HD constexpr bool dropout_keep(uint64_t seed, uint64_t stream, int64_t i, int64_t j, uint32_t threshold) {
  return (dropout_keep_bits(seed, stream, i, j / 8, threshold) >> (j % 8)) & 1u;
}

}  // namespace flashattn
