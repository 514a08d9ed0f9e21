// In-register transpose of an L x L block of floats (L = the target's lane count), for moving rows
// between the row layout of the tensors and the transposed tiles (query rows in the lanes) the
// kernels compute in. log2(L) rounds of ConcatEven / ConcatOdd (a perfect shuffle), L·log2(L)
// shuffles per L² floats: a 64 x 128 tile in 0.47 µs on AVX3 against 1.9 µs for the scalar
// element loop (docs/cpu-design.md).
//
// Per-target include guard (Highway's toggle idiom): re-included once per target by foreach_target.
#if defined(FLASHATTN_CPU_TRANSPOSE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_TRANSPOSE_INL_H_
#undef FLASHATTN_CPU_TRANSPOSE_INL_H_
#else
#define FLASHATTN_CPU_TRANSPOSE_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Writes dst[c·ld_dst + r] = src[r·ld_src + c] for r < L and c < cols_out (L = Lanes(d), full
// vectors): rows c >= cols_out of the transposed block are not stored. Reads L rows of L floats
// from src (any alignment).
template <class D>
HWY_INLINE void TransposeBlock(D d, const float* HWY_RESTRICT src, int64_t ld_src, float* HWY_RESTRICT dst,
                               int64_t ld_dst, int64_t cols_out) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  (void)ld_src;
  (void)ld_dst;
  if (cols_out > 0) dst[0] = src[0];
#elif HWY_HAVE_SCALABLE
  // SVE vectors are sizeless types (no arrays of them) and their lane count is known only at run
  // time: the block element by element.
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c = 0; c < cols_out && c < L; ++c) {
    for (int64_t r = 0; r < L; ++r) dst[c * ld_dst + r] = src[r * ld_src + c];
  }
#else
  constexpr size_t L = hn::MaxLanes(d);
  static_assert((L & (L - 1)) == 0, "a power-of-two lane count");
  using V = hn::Vec<D>;
  V v[L];
  for (size_t r = 0; r < L; ++r) v[r] = hn::LoadU(d, src + static_cast<int64_t>(r) * ld_src);
  // Each round takes the even lanes of rows (2j, 2j+1) into row j and the odd ones into row j + L/2:
  // after log2(L) rounds row c holds column c.
  for (size_t round = L; round > 1; round /= 2) {
    V t[L];
    for (size_t j = 0; j < L / 2; ++j) {
      t[j] = hn::ConcatEven(d, v[2 * j + 1], v[2 * j]);
      t[j + L / 2] = hn::ConcatOdd(d, v[2 * j + 1], v[2 * j]);
    }
    for (size_t j = 0; j < L; ++j) v[j] = t[j];
  }
  for (int64_t c = 0; c < cols_out && c < static_cast<int64_t>(L); ++c) hn::StoreU(v[c], d, dst + c * ld_dst);
#endif
}

// Writes dst[c·ld_dst + r] = src[r·ld_src + c] for r < rows, c < cols: rows must be a multiple of
// Lanes(d), and src rows readable up to cols rounded up to Lanes(d).
template <class D>
HWY_INLINE void Transpose(D d, const float* HWY_RESTRICT src, int64_t ld_src, int64_t rows, int64_t cols,
                          float* HWY_RESTRICT dst, int64_t ld_dst) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r0 = 0; r0 < rows; r0 += L) {
    for (int64_t c0 = 0; c0 < cols; c0 += L) {
      TransposeBlock(d, src + r0 * ld_src + c0, ld_src, dst + c0 * ld_dst + r0, ld_dst, cols - c0);
    }
  }
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_TRANSPOSE_INL_H_
