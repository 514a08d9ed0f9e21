// Validation of arguments, called first by every backend's entry point.
#pragma once

#include "flashattn/args.hpp"

namespace flashattn {

// Throws flashattn::Error naming the field and the offending values if `a` is not a valid forward
// call: shapes, dtypes, strides (non-negative, last dim contiguous, outputs not self-overlapping and
// not overlapping inputs), alignment, size overflow, scale/softcap/window values, seqlens_k and
// cu_seqlens contents (host arrays). Writes nothing.
void validate(const ForwardArgs& a);

// As above for a backward call: additionally out, dout, lse (required), dq, dk, dv.
void validate(const BackwardArgs& a);

// Checks only the inputs (q, k, v; quantized K/V allowed, as in a forward) and the options both
// passes share: what an oracle that reads no output needs (reference::forward_values).
void validate(const AttentionArgs& a);

}  // namespace flashattn
