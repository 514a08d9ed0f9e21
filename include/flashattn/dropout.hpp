// The dropout keep mask output (docs/semantics.md, "Keep mask"), written from the one definition
// of the keep decision (flashattn/philox.hpp) by the host backends.
#pragma once

#include "flashattn/args.hpp"

namespace flashattn {

// Writes a.dropout_mask of a validated plain call (no append: pass the call that attends) if it is
// set: for every sequence, query head and row, the keep bits of the keys below the sequence's key
// count, 0 past it. Reads host arrays (seqlens_k, cu_seqlens). Nothing else is written.
void write_dropout_mask(const ForwardArgs& a);

}  // namespace flashattn
