// The KV-cache append of a forward call (ForwardArgs::append, docs/semantics.md "Appending to a KV
// cache"): the step every backend runs before it attends, so that "rotate, write the cache, then a
// plain call" means the same bits everywhere.
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/args.hpp"

namespace flashattn {

// Returns the rotary embedding of element pair (x0, x1) at table entry (c, s), as documented: each
// result evaluated exactly in fp64 (products of two fp32 values are exact there, so contraction into
// an FMA cannot change it), rounded to fp32, then to `t` with round-to-nearest-even.
float rotary_first(float x0, float x1, float c, float s, DType t);
float rotary_second(float x0, float x1, float c, float s, DType t);

// Writes the rotary embedding at `position` of the `dim` elements at src + src_off (dtype t) to
// dst + dst_off (same dtype): the first ap.rotary_dim elements rotate in pairs (interleaved or
// half-split), the rest are copied. src and dst may be the same row.
void rotate_row(const KvAppend& ap, int64_t position, const void* src, int64_t src_off, void* dst, int64_t dst_off,
                int64_t dim, DType t);

// Returns each sequence's key count after the append of a validated call (seqlens_k read on the
// host): seqlens_k[b] + append.k_new.seq.
std::vector<int32_t> lengths_after_append(const ForwardArgs& a);

// Returns the plain call an append call attends with (docs/semantics.md step 3): keys and values
// the caches, append unused, seqlens_k = `lengths` (the key counts after the append) and, when the
// call has rotary tables, q = `q_rot` (the rotated queries, contiguous [B, Nq, Hq, d]). Pointers
// only: GPU callers pass device arrays.
ForwardArgs appended_call(const ForwardArgs& a, const int32_t* lengths, const void* q_rot);

// The plain call an append call becomes once its caches are written. Not copyable: args points into
// the owned arrays (moving keeps them in place).
struct AppendedCall {
  ForwardArgs args;                // k, v: the caches; seqlens_k: lengths after the append; append unused
  std::vector<int32_t> seqlens_k;  // owned lengths (empty: args.seqlens_k is the caller's)
  std::vector<unsigned char> q;    // the rotated queries, contiguous [B, Nq, Hq, d] (empty: a.q as given)

  AppendedCall() = default;
  AppendedCall(AppendedCall&&) = default;
  AppendedCall(const AppendedCall&) = delete;
  AppendedCall& operator=(const AppendedCall&) = delete;
};

// For a call that validate() accepted: without an append returns the call unchanged; with one,
// writes row t of k_new (rotated at seqlens_k[b] + t) and v_new to cache row seqlens_k[b] + t of each
// sequence b (through the block table if set) and returns the plain call over the caches, with q
// rotated at seqlens_k[b] + i when rotary tables are given. Writes nothing else.
AppendedCall apply_append(const ForwardArgs& a);

}  // namespace flashattn
