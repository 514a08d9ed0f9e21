// TMA tensor maps of 16-bit tensors (host side): what a kernel's tma_load_Nd (sm90.cuh) reads.
// TensorMapSpec holds the arguments of the CUDA driver's cuTensorMapEncodeTiled that this library
// uses (tiled mode, no interleave, element strides 1, zero fill outside the tensor); its rules are
// checked here, once, for the device build (which then calls the driver) and the emulator (which
// stores the spec in the opaque map and applies it itself).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>
#include <string>

#include "sm90_layout.hpp"

namespace flashattn::gpu::detail::sm90 {

struct TensorMapSpec {
  const void* global = nullptr;  // element (0, ..., 0)
  int rank = 0;                  // 1..5 dimensions, innermost (contiguous) first
  uint64_t dims[5] = {};         // elements per dimension
  uint64_t strides[5] = {};      // bytes between consecutive indices of dimensions 1..rank-1 (strides[0]: 2, implied)
  uint32_t box[5] = {};          // elements per dimension of the box one load copies
  Swizzle swizzle = Swizzle::none;
};

// Returns "" if s satisfies cuTensorMapEncodeTiled's rules for 16-bit elements, else what breaks
// one (CUDA driver API, "Tensor Map Object Management"): rank 1..5; the base address 16-byte
// aligned; every dimension in [1, 2^32]; strides multiples of 16 below 2^40; box sizes in
// [1, 256]; the box's inner extent a multiple of 16 bytes and, with a swizzle, at most the swizzle
// row (this library asks for exactly one row, the layout sm90_layout.hpp's descriptors describe).
inline std::string tensor_map_problem(const TensorMapSpec& s) {
  auto at = [](const char* what, int i) { return std::string(what) + "[" + std::to_string(i) + "]"; };
  if (s.rank < 1 || s.rank > 5) return "rank " + std::to_string(s.rank) + " is not in [1, 5]";
  if (reinterpret_cast<uintptr_t>(s.global) % 16 != 0) return "global address is not 16-byte aligned";
  for (int i = 0; i < s.rank; ++i) {
    if (s.dims[i] < 1 || s.dims[i] > (uint64_t{1} << 32)) return at("dims", i) + " is not in [1, 2^32]";
    if (s.box[i] < 1 || s.box[i] > 256) return at("box", i) + " is not in [1, 256]";
    if (i > 0 && (s.strides[i] % 16 != 0 || s.strides[i] >= (uint64_t{1} << 40)))
      return at("strides", i) + " is not a multiple of 16 below 2^40";
  }
  const uint32_t inner = 2 * s.box[0];
  if (inner % 16 != 0) return "box[0] is not a multiple of 16 bytes";
  if (s.swizzle != Swizzle::none && inner != swizzle_row_bytes(s.swizzle))
    return "box[0] is " + std::to_string(inner) + " bytes, not the swizzle row of " +
           std::to_string(swizzle_row_bytes(s.swizzle));
  return "";
}

// Returns the bytes one load of s writes (the whole box, zero-filled parts included).
inline uint32_t box_bytes(const TensorMapSpec& s) {
  uint32_t n = 2;
  for (int i = 0; i < s.rank; ++i) n *= s.box[i];
  return n;
}

// Writes the tensor map of s to *map; throws std::invalid_argument naming the rule s breaks.
// Device build: cuTensorMapEncodeTiled (through the runtime's driver entry point, so nothing links
// libcuda); emulator: the spec itself, which the emulated tma_load_Nd reads back.
void encode_tensor_map(CUtensorMap* map, const TensorMapSpec& s);

}  // namespace flashattn::gpu::detail::sm90
