// Merging partial attention results computed over disjoint key sets.
#pragma once

#include "flashattn/types.hpp"

namespace flashattn {

// Given (O1, LSE1) = attention over keys K1 and (O2, LSE2) over K2 for the same queries, writes
// (O, LSE) = attention over K1 ∪ K2:
//   m = max(LSE1, LSE2), w_t = exp(LSE_t - m), O = (w1 O1 + w2 O2) / (w1 + w2), LSE = m + log(w1 + w2),
// computed in fp32 and rounded to out's dtype; a row empty in both halves gives O = 0, LSE = -inf.
// All O views share one shape [B, N, H, d] and dtype; lse arrays are fp32 [B, H, N] contiguous.
// out and lse_out may be the same views/arrays as the first or second operand (in place).
// Throws flashattn::Error on mismatched shapes or dtypes, null or misaligned pointers.
void merge(const ConstTensor& o1, const float* lse1, const ConstTensor& o2, const float* lse2, const Tensor& out,
           float* lse_out);

}  // namespace flashattn
