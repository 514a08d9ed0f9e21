// Shared helpers of the CPU property runner (tests/cpu/props*.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/cpu.hpp"
#include "flashattn/types.hpp"

namespace props_cpu {

// Tile sizes that reach every code path at small sizes: one-row and one-key tiles, row counts
// that leave partial vectors, key blocks that leave tails.
struct Tiles {
  int block_q, block_k;
  const char* name;
};
inline const std::vector<Tiles>& tiny_tiles() {
  static const std::vector<Tiles> t = {{1, 1, "1x1"}, {3, 5, "3x5"}, {16, 16, "16x16"}, {17, 7, "17x7"}};
  return t;
}

// Returns the bit patterns of every element of view t in logical [b, s, h, x] order.
std::vector<uint32_t> view_bits(const flashattn::Tensor& t);

}  // namespace props_cpu
