// The general path's handling of the options that reshape a call before the kernels run (see
// docs/cpu-design.md): a value head dim dv != d by zero padding, and the backward's dsinks.
// The kernels themselves handle paged K/V (kv.h copy_head gathers through the block table) and
// sinks (the forward's initial softmax state; the backward's P comes from the LSE, which holds them).
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/args.hpp"
#include "flashattn/problem.hpp"

namespace flashattn::cpu::detail {

// A contiguous bshd copy of a view with `dim` columns: the view's elements, then zeros.
struct PaddedCopy {
  std::vector<unsigned char> bytes;
  Tensor view;
};

// Returns t with its last dimension padded by zeros to dim (>= t.dim), all rows copied.
PaddedCopy pad_columns(const ConstTensor& t, int64_t dim);

// Returns an uninitialised contiguous buffer shaped like t with `dim` columns.
PaddedCopy scratch_like(const ConstTensor& t, int64_t dim);

// Copies the first dst.dim columns of every row of src (same batch, seq, heads, dtype) into dst.
void copy_columns(const ConstTensor& src, const Tensor& dst);

// Runs `run` on a forward call whose value head dim differs from its key head dim as one whose
// dims are equal: zero columns added to v (dv < d, out computed with d columns then cropped) or to
// q and k (dv > d); the scale stays 1/sqrt(d) (or the given one). Exact: the added columns add only
// zero products to the scores and zero output columns. Calls `run` directly when dv == d.
template <class Run>
void forward_equal_dims(const ForwardArgs& a, Run run);

// The same for a backward call: v, out, dout padded and dv cropped (dv < d), or q, k padded and dq,
// dk cropped (dv > d). The zero columns contribute nothing to D, dP or the scores.
template <class Run>
void backward_equal_dims(const BackwardArgs& a, Run run);

// Writes dsinks[h] = −Σ exp(sinks[h] − LSE_i)·D_i over every row i of head h of every sequence, with
// D_i = dout_i·out_i, accumulated in fp64 in a fixed order (docs/semantics.md, Backward).
void sink_gradients(const BackwardArgs& a);

template <class Run>
void forward_equal_dims(const ForwardArgs& a, Run run) {
  const int64_t d = a.q.dim, e = a.v.dim;
  if (d == e) return run(a);
  ForwardArgs f = a;
  f.scale = a.scale ? *a.scale : default_scale(d);
  if (e < d) {
    const PaddedCopy v = pad_columns(a.v, d);
    PaddedCopy out = scratch_like(a.out, d);
    f.v = v.view;
    f.out = out.view;
    run(f);
    copy_columns(out.view, a.out);
  } else {
    const PaddedCopy q = pad_columns(a.q, e), k = pad_columns(a.k, e);
    f.q = q.view;
    f.k = k.view;
    run(f);
  }
}

template <class Run>
void backward_equal_dims(const BackwardArgs& a, Run run) {
  const int64_t d = a.q.dim, e = a.v.dim;
  if (d == e) return run(a);
  BackwardArgs f = a;
  f.scale = a.scale ? *a.scale : default_scale(d);
  if (e < d) {
    const PaddedCopy v = pad_columns(a.v, d), out = pad_columns(a.out, d), dout = pad_columns(a.dout, d);
    PaddedCopy dv = scratch_like(a.dv, d);
    f.v = v.view;
    f.out = out.view;
    f.dout = dout.view;
    f.dv = dv.view;
    run(f);
    copy_columns(dv.view, a.dv);
  } else {
    const PaddedCopy q = pad_columns(a.q, e), k = pad_columns(a.k, e);
    PaddedCopy dq = scratch_like(a.dq, e), dk = scratch_like(a.dk, e);
    f.q = q.view;
    f.k = k.view;
    f.dq = dq.view;
    f.dk = dk.view;
    run(f);
    copy_columns(dq.view, a.dq);
    copy_columns(dk.view, a.dk);
  }
}

}  // namespace flashattn::cpu::detail
