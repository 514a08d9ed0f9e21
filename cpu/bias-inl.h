// The additive bias on transposed score tiles (Sᵀ[j][i]: key j of the tile, query row i in the
// lanes). The bias rows are contiguous in the keys, so a tile's rows are widened (exactly, from any
// of the three dtypes) into row-major scratch and transposed into the tile's layout; TransformScores
// adds that tile after soft-capping and ALiBi (score-inl.h, TileScores::bias).
//
// Per-target include guard (Highway's toggle idiom): re-included once per target by foreach_target.
#if defined(FLASHATTN_CPU_BIAS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_BIAS_INL_H_
#undef FLASHATTN_CPU_BIAS_INL_H_
#else
#define FLASHATTN_CPU_BIAS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "flashattn/args.hpp"
#include "hwy/highway.h"

#include "transpose-inl.h"
#include "widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Writes the bias of rows [r0, r0 + rows) and keys [c0, c0 + nk) of sequence s, query head h, as
// the transposed tile bt[j·ld + i] (lanes i in [rows, W) hold 0). `bv` is flashattn::bias_view (stride
// 0 in broadcast dims); `rowbuf` is scratch of W rows of ldr >= nk rounded up to the lane count
// floats. Returns the largest finite |entry| when `want_max` (the exact-score bound), else 0. Reads
// only the tile's entries.
template <class D>
HWY_INLINE float LoadBiasTile(D d, const ConstTensor& bv, int64_t s, int64_t h, int64_t r0, int64_t rows, int64_t W,
                              int64_t c0, int64_t nk, float* HWY_RESTRICT rowbuf, int64_t ldr, float* HWY_RESTRICT bt,
                              int64_t ld, bool want_max) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t nkv = (nk + L - 1) / L * L;
  auto big = hn::Zero(d);  // lane-wise max of the finite |entries| (a scalar loop cost 60 % of an fp32 forward)
  for (int64_t i = 0; i < W; ++i) {
    float* row = rowbuf + i * ldr;
    if (i < rows) {
      WidenRow(bv.data, bv.dtype, bv.offset(s, r0 + i, h) + c0, nk, row);
      std::fill(row + nk, row + nkv, 0.0f);
      if (want_max) {
        for (int64_t j = 0; j < nkv; j += L) {
          const auto v = hn::Load(d, row + j);
          big = hn::Max(big, hn::IfThenElseZero(hn::IsFinite(v), hn::Abs(v)));
        }
      }
    } else {
      std::fill(row, row + nkv, 0.0f);
    }
  }
  Transpose(d, rowbuf, ldr, W, nk, bt, ld);
  return want_max ? hn::GetLane(hn::MaxOfLanes(d, big)) : 0.0f;
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_BIAS_INL_H_
