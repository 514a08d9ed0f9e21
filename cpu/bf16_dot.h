// The bf16 dot-product micro-kernel (AVX512_BF16 vdpbf16ps), compiled in its own translation unit
// (bf16_dot.cc) with the AVX512_BF16 flags, and the run-time check that the CPU has them. Plain
// declarations (no SIMD types): forward.cc's AVX-512 instantiation calls it for bf16 inputs when
// the call runs on kTargetAvx3Bf16 (plan.h).
#pragma once

#include <cstdint>

#include "matrix.h"

namespace flashattn::cpu::detail {

// Returns whether this CPU executes AVX512_BF16 (and the AVX-512 F/BW/VL the kernel also uses).
bool cpu_has_avx512_bf16();

// How GemmBf16Pairs multiplies: `fast` uses vdpbf16ps, which treats subnormal inputs as zero and
// flushes subnormal results (its DAZ/FTZ semantics, whatever MXCSR says); `exact` widens and uses
// FMAs that keep them (for tiles with a tiny input, bf16-inl.h).
enum class Bf16Products : bool { fast, exact };

// C (+)= A · B over "bf16 pairs": every uint32 holds two bf16 values (element 2t in the low half,
// 2t + 1 in the high half) of the reduction dimension, so
//   C(a, i) (+)= Σ_t A(a, t).lo · B(t, i).lo + A(a, t).hi · B(t, i).hi,   t < A.cols = B.rows,
// A read one pair at a time (a row-major PairMatrix or Transposed(one)), B row-major with 64-byte
// aligned rows and B.cols = C.cols a multiple of 16, C fp32 (aligned rows), C.rows = A.rows. Each
// pair is two fp32 FMAs in the order vdpbf16ps defines (high product first); products of bf16 are
// exact in fp32. col_max (C.cols floats, aligned, or null): col_max = max(col_max, max over C's rows).
void GemmBf16Pairs(const Matrix<float>& C, const PairOperand& A, const PairMatrix& B, Accumulate accumulate,
                   Bf16Products products, float* col_max = nullptr);

// A float buffer holding bf16 pairs (the packing functions below write them in place of floats).
inline PairMatrix pairs_of(const float* data, int64_t rows, int64_t cols, int64_t stride) {
  return {reinterpret_cast<const uint32_t*>(data), rows, cols, stride};
}
inline Bf16Products products_for(bool tiny) { return tiny ? Bf16Products::exact : Bf16Products::fast; }

// fp32 tiles rounded to bf16 pairs with vcvtne(2)ps2bf16 (nearest even; like vdpbf16ps it treats
// subnormal inputs as zero, so only for operands of GemmBf16Pairs with exact = false, where a
// subnormal would count as zero anyway; bf16-inl.h has the exact versions). src rows are 64-byte
// aligned with stride ld floats; W is a multiple of 16.
// Row j of dst (stride ldd) = row j of src as pairs of consecutive elements, for j < n.
void RoundRowsToBf16PairsFast(const float* src, int64_t ld, int64_t n, int64_t W, uint32_t* dst, int64_t ldd);
// Row t of dst (stride ld, 64-byte aligned) = pairs (src[2t][i], src[2t+1][i]), t < ceil(n/2) (a zero
// after an odd n): PackProbabilityPairs of bf16-inl.h.
void PairRowsToBf16Fast(const float* src, int64_t ld, int64_t n, int64_t W, uint32_t* dst);

}  // namespace flashattn::cpu::detail
