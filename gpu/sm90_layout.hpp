// Shared-memory layouts of the sm_90a primitives (sm90.cuh), as plain constexpr functions that the
// device wrappers, the host emulator and the tests share:
//   - the 64-bit matrix descriptor of a wgmma operand in shared memory (PTX ISA, "Asynchronous
//     Warpgroup Level Matrix Shared Memory Layout": "Matrix Descriptor Format");
//   - the swizzle modes, applied to shared-memory byte addresses alike by TMA when it writes a box
//     and by wgmma when it reads an operand;
//   - the canonical layouts a descriptor describes for 16-bit elements (PTX ISA, "Shared Memory
//     Matrix Layout"; the same layouts CUTLASS/CuTe calls GMMA canonical layouts), as the byte
//     offset of element (mn, k) of one wgmma's K = 16 slice.
//
// Units: 16-byte chunks ("core matrix rows": 8 elements of 16 bits). Swizzle mode S has W = 1, 2,
// 4 or 8 chunks per row (none, 32 B, 64 B, 128 B); its pattern XORs address bits [4, 4 + log2 W)
// with bits [7, 7 + log2 W), so it repeats every 8 rows of W chunks (128·W bytes).
//
//   K-major (the operand's K index contiguous: Q and K rows for S = QKᵀ):
//     element (mn, k), mn = 8·m1 + m0, k = 8·k1 + k0:
//       none:     m0·16 + m1·SBO + k1·LBO + 2·k0
//       swizzled: m0·(16W) + m1·SBO + k1·16 + 2·k0            (LBO unused)
//   MN-major (the M or N index contiguous: V for O = P·V, whose rows run along K):
//     element (mn, k), mn = 8·(W·m2 + m1) + m0, k = 8·k1 + k0:
//       none:     2·m0 + m2·SBO + k0·16 + k1·LBO               (W = 1)
//       swizzled: 2·m0 + m1·16 + m2·LBO + k0·(16W) + k1·SBO
// The address read is swizzle(start + offset). A descriptor's 3-bit base offset must be 0 here: the
// start address of every 8-row group is then aligned to the pattern (checked by the emulator).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FLASHATTN_SM90_HD __host__ __device__
#else
#define FLASHATTN_SM90_HD
#endif

namespace flashattn::gpu::detail::sm90 {

// The N of wgmma.m64nNk16 the wrappers provide (the device ones are generated from this list by
// gpu/tools/gen_wgmma.py; other N fail a static_assert on the GPU and in the emulator).
#define FLASHATTN_SM90_WGMMA_SHAPES "16, 32, 64, 96, 128, 192, 256"

// Returns whether n is in FLASHATTN_SM90_WGMMA_SHAPES.
FLASHATTN_SM90_HD constexpr bool wgmma_shape_supported(int n) {
  int v = 0;
  for (const char* c = FLASHATTN_SM90_WGMMA_SHAPES;; ++c) {
    if (*c >= '0' && *c <= '9') {
      v = 10 * v + (*c - '0');
      continue;
    }
    if (v == n) return true;
    if (*c == '\0') return false;
    v = 0;
  }
}

// Returns how many N FLASHATTN_SM90_WGMMA_SHAPES lists.
FLASHATTN_SM90_HD constexpr int wgmma_shape_count() {
  int n = 1;
  for (const char* c = FLASHATTN_SM90_WGMMA_SHAPES; *c; ++c) n += *c == ',';
  return n;
}

// Swizzle mode, numbered as the descriptor's bits 62-63 encode it.
enum class Swizzle : uint32_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

// Returns log2 of the 16-byte chunks per row of mode s (0, 1, 2, 3 for none, 32, 64, 128 B).
FLASHATTN_SM90_HD constexpr int swizzle_log2(Swizzle s) {
  return s == Swizzle::b128 ? 3 : s == Swizzle::b64 ? 2 : s == Swizzle::b32 ? 1 : 0;
}
// Returns the row width in bytes of mode s (16 for none: one core-matrix row).
FLASHATTN_SM90_HD constexpr uint32_t swizzle_row_bytes(Swizzle s) { return 16u << swizzle_log2(s); }
// Returns the bytes after which the pattern of mode s repeats (8 rows).
FLASHATTN_SM90_HD constexpr uint32_t swizzle_repeat_bytes(Swizzle s) { return 8u * swizzle_row_bytes(s); }

// Returns shared-memory byte address a as mode s stores it: bits [4, 4 + B) ^= bits [7, 7 + B).
FLASHATTN_SM90_HD constexpr uint32_t swizzle(uint32_t a, Swizzle s) {
  const uint32_t mask = (1u << swizzle_log2(s)) - 1u;
  return a ^ (((a >> 7) & mask) << 4);
}

// The fields of a matrix descriptor, in bytes (the encoding drops the 4 low bits of each).
struct SmemDesc {
  uint32_t start = 0;        // shared-memory address of element (0, 0); 14 bits of start >> 4
  uint32_t lbo = 0;          // leading dimension byte offset; 14 bits of lbo >> 4
  uint32_t sbo = 0;          // stride dimension byte offset; 14 bits of sbo >> 4
  uint32_t base_offset = 0;  // 3 bits: the pattern's phase when start is not aligned to it
  Swizzle swizzle = Swizzle::none;
};

// Returns the descriptor word: bits 0-13 start >> 4, 16-29 lbo >> 4, 32-45 sbo >> 4, 49-51 base
// offset, 62-63 swizzle mode; every other bit 0.
FLASHATTN_SM90_HD constexpr uint64_t encode(const SmemDesc& d) {
  return uint64_t{(d.start >> 4) & 0x3FFFu} | uint64_t{(d.lbo >> 4) & 0x3FFFu} << 16 |
         uint64_t{(d.sbo >> 4) & 0x3FFFu} << 32 | uint64_t{d.base_offset & 7u} << 49 |
         uint64_t{static_cast<uint32_t>(d.swizzle) & 3u} << 62;
}

// Returns the fields of descriptor word w (the inverse of encode for encodable fields).
FLASHATTN_SM90_HD constexpr SmemDesc decode(uint64_t w) {
  SmemDesc d;
  d.start = static_cast<uint32_t>(w & 0x3FFFu) << 4;
  d.lbo = static_cast<uint32_t>((w >> 16) & 0x3FFFu) << 4;
  d.sbo = static_cast<uint32_t>((w >> 32) & 0x3FFFu) << 4;
  d.base_offset = static_cast<uint32_t>((w >> 49) & 7u);
  d.swizzle = static_cast<Swizzle>((w >> 62) & 3u);
  return d;
}

// Which index of a wgmma operand is contiguous in shared memory. For A (M x K) and B (N x K as
// stored): K-major is the instruction's default, MN-major its "transpose" (imm-trans = 1).
enum class Major { k, mn };

// Returns the byte offset from the descriptor's start of element (mn, k), k < 16, of a 16-bit
// operand in the canonical layout of (major, s) with byte offsets lbo and sbo (see the top).
FLASHATTN_SM90_HD constexpr uint32_t canonical_offset(Major major, Swizzle s, uint32_t lbo, uint32_t sbo, uint32_t mn,
                                                      uint32_t k) {
  const uint32_t w = 1u << swizzle_log2(s);
  const uint32_t k0 = k % 8, k1 = k / 8;
  if (major == Major::k) {
    const uint32_t m0 = mn % 8, m1 = mn / 8;
    return s == Swizzle::none ? m0 * 16 + m1 * sbo + k1 * lbo + 2 * k0 : m0 * 16 * w + m1 * sbo + k1 * 16 + 2 * k0;
  }
  const uint32_t m0 = mn % 8, m1 = (mn / 8) % w, m2 = mn / (8 * w);
  return s == Swizzle::none ? 2 * m0 + m2 * sbo + k0 * 16 + k1 * lbo
                            : 2 * m0 + m1 * 16 + m2 * lbo + k0 * 16 * w + k1 * sbo;
}

// The descriptor of a K-major operand stored as a TMA box with a swizzle (s != none): rows along
// MN, one swizzle row (K run of swizzle_row_bytes(s)) each, row r at r · swizzle_row_bytes(s), so
// 8-row groups lie swizzle_repeat_bytes(s) apart (SBO); LBO is unused (16 by convention). start:
// the group's first row plus 2·k bytes for the slice starting at K index k (a multiple of 16).
FLASHATTN_SM90_HD constexpr uint64_t k_major_desc(uint32_t start, Swizzle s) {
  return encode(SmemDesc{start, 16u, swizzle_repeat_bytes(s), 0, s});
}

// The descriptor of an MN-major operand stored as a TMA box with a swizzle (s != none): rows along
// K, each a run of swizzle_row_bytes(s) along MN, row k at k · swizzle_row_bytes(s), so a K = 16
// slice is two 8-row groups swizzle_repeat_bytes(s) apart (SBO), and the next run of MN (the next
// box, `mn_box_bytes` on) is LBO.
FLASHATTN_SM90_HD constexpr uint64_t mn_major_desc(uint32_t start, Swizzle s, uint32_t mn_box_bytes) {
  return encode(SmemDesc{start, mn_box_bytes, swizzle_repeat_bytes(s), 0, s});
}

}  // namespace flashattn::gpu::detail::sm90
