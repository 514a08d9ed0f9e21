// Widening rows of 16-bit inputs to fp32 with vector instructions where the conversion is exact:
// bf16 -> f32 is a 16-bit shift on every vector target; f16 -> f32 uses F16C on AVX2/AVX-512
// (exact for every value, subnormals included). Other targets, and row tails, use the scalar
// flashattn/convert.hpp functions (rows.h), so every target widens to the same values.
#if defined(FLASHATTN_CPU_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_CPU_WIDEN_INL_H_
#undef FLASHATTN_CPU_WIDEN_INL_H_
#else
#define FLASHATTN_CPU_WIDEN_INL_H_
#endif

#include <cstdint>

#include "flashattn/types.hpp"
#include "hwy/highway.h"
#include "rows.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Writes the n elements at element offset `off` of `data` (dtype t) to dst as floats.
inline void WidenRow(const void* data, DType t, int64_t off, int64_t n, float* HWY_RESTRICT dst) {
  int64_t x = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  if (t == DType::bf16) {
    const hn::Rebind<hwy::bfloat16_t, decltype(df)> dbf;
    const auto* s = static_cast<const hwy::bfloat16_t*>(data) + off;
    for (; x + L <= n; x += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dbf, s + x)), df, dst + x);
  }
#if HWY_TARGET <= HWY_AVX2
  if (t == DType::f16) {
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const auto* s = static_cast<const hwy::float16_t*>(data) + off;
    for (; x + L <= n; x += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, s + x)), df, dst + x);
  }
#endif
#endif
  ::flashattn::cpu::detail::load_row(data, t, off + x, n - x, dst + x);
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_WIDEN_INL_H_
