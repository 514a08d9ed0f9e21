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
#include <type_traits>

#include "flashattn/types.hpp"
#include "hwy/highway.h"
#include "rows.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether this target loads dtype t as fp32 vectors exactly (LoadWide): f32 as is, bf16 (a 16-bit
// shift) on every vector target, f16 with F16C (AVX2 / AVX-512). Elsewhere rows go through the
// scalar flashattn/convert.hpp functions.
inline bool WidensInVectors(DType t) {
  if (t == DType::f32) return true;
#if HWY_TARGET == HWY_SCALAR
  return false;
#else
  return t == DType::bf16 || (t == DType::f16 && HWY_TARGET <= HWY_AVX2);
#endif
}

// Returns the fp32 vector of the Lanes(d) elements at p: f32 as is, bf16 / f16 widened (for the
// dtypes WidensInVectors allows on this target).
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadWide(D d, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, p);
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p));
  }
}

// Writes the n elements at element offset `off` of `data` (dtype t) to dst as floats: 16-bit rows
// by LoadWide where WidensInVectors, the rest (f32, row tails) by the scalar rows.h loop.
inline void WidenRow(const void* data, DType t, int64_t off, int64_t n, float* HWY_RESTRICT dst) {
  int64_t x = 0;
  if (t != DType::f32 && WidensInVectors(t)) {
    const hn::ScalableTag<float> df;
    const int64_t L = static_cast<int64_t>(hn::Lanes(df));
    auto widen = [&](const auto* s) {
      for (; x + L <= n; x += L) hn::StoreU(LoadWide(df, s + x), df, dst + x);
    };
    if (t == DType::bf16) {
      widen(static_cast<const hwy::bfloat16_t*>(data) + off);
    } else {
      widen(static_cast<const hwy::float16_t*>(data) + off);
    }
  }
  ::flashattn::cpu::detail::load_row(data, t, off + x, n - x, dst + x);
}

}  // namespace flashattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_CPU_WIDEN_INL_H_
