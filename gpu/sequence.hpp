// The one call sequence of the GPU backend: which kernels a validated forward or backward call
// launches, in which order, with which scratch (docs/gpu.md, "Call sequence"). The CUDA entry
// points (api.cu, CudaLauncher) and the host emulator (emu/emu_api.cpp, EmuLauncher) both run it,
// so the emulated properties check the orchestration that ships; a launcher only says how a kernel
// runs and where scratch lives. Host code, no CUDA headers.
//
// A launcher L provides:
//   L::Buffer                       scratch of a byte count, freed with the object; get() (float*),
//                                   bytes() (void*), null for 0 bytes
//   Buffer buffer(size_t bytes, const char* name)   (name: for diagnostics)
//   const E* upload(Buffer&, const std::vector<E>&)   host values into the buffer, returned as
//                                   the pointer the kernels read (E: int32_t, CUtensorMap)
//   void zero(float*, size_t count)
//   void check_backward(const BackwardParams&)   limits of the backward's grids (throws before
//                                   anything is launched)
//   dispatch<kBackward>(d, dv, dtype, f)  f(integral_constant<D>, integral_constant<DV>, Tag<T>)
//                                   for the kernel variant (only those with a backward if kBackward)
//   by_dtype(dtype, f)              f(Tag<T>) for the 16-bit element type
//   append<T>(AppendParams, batch, heads_k, heads_q, q_rows), dropout_mask(ForwardParams, max_q),
//   forward<D, DV, T>(ForwardParams, max_q), combine<T>(ForwardParams, max_q),
//   quantized_forward<T>(ForwardParams, DType kv, max_q) (the quantized K/V forward),
//   bool sm90() (the sm_90a kernels are to be used), forward_sm90<D, T>(Sm90ForwardParams, max_q),
//   dot<T>(BackwardParams, max_q), dsinks(BackwardParams), dbias<T>(BackwardParams),
//   backward<D, DV, T>(BackwardParams, max_k_rows), dq<D, DV, T>(BackwardParams, max_q),
//   dq_convert<T>(BackwardParams, max_q)    one launch each, over the kernel's grid
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashattn/append.hpp"
#include "flashattn/args.hpp"
#include "flashattn/problem.hpp"
#include "host_params.hpp"

namespace flashattn::gpu::detail {

template <class T>
struct Tag {
  using type = T;
};

// Runs a validated forward call: `a` holds the pointers the kernels read, `host` the same call
// with its small arrays (sequence lengths, block table, block lists) readable on the host.
//   1. with an append: the new K/V rows into the caches and the rotated queries into scratch;
//   2. the dropout keep mask (when asked for);
//   3. the forward kernel over (query block × split, query head, sequence), then, when the keys
//      are split, the combine of the partials; where the launcher says sm90() and the call is one
//      the sm_90a forward takes (sm90_forward_specs), that kernel instead; with quantized K/V the
//      quantized forward (one warp per query row × split, any head dims up to kQuantMaxDim).
template <class L>
void forward_sequence(L& l, const ForwardArgs& a, const ForwardArgs& host) {
  const KvAppend& ap = a.append;
  const bool append = ap.used();
  ForwardArgs call = a, call_host = host;
  std::vector<int32_t> lengths;
  typename L::Buffer kernel_lengths = l.buffer(append ? sizeof(int32_t) * static_cast<size_t>(a.q.batch) : 0,
                                                     "lengths after the append");
  typename L::Buffer q_rot = l.buffer(append ? rotated_q_bytes(a) : 0, "rotated queries");
  if (append) {
    lengths = lengths_after_append(host);
    const int32_t* seqlens = l.upload(kernel_lengths, lengths);
    AppendParams p;
    fill(p, a, q_rot.bytes());
    l.by_dtype(a.q.dtype, [&](auto tag) {
      l.template append<typename decltype(tag)::type>(p, a.q.batch, static_cast<int>(ap.k_new.heads),
                                                      static_cast<int>(a.q.heads), a.q.seq);
    });
    call = appended_call(a, seqlens, q_rot.bytes());
    call_host = appended_call(host, lengths.data(), q_rot.bytes());
  }
  const Extents e = extents(call_host);
  if (e.max_q == 0) return;
  ForwardParams p;
  fill(p, call, e.nseq, a.dropout_mask ? dropout_mask_row_bytes(host) : 0);
  if (p.dropout_mask) l.dropout_mask(p, e.max_q);
  if (is_quantized(call.k.dtype)) {
    const int splits = split_count(call, e, kWarps, kQuantTileKeys);
    typename L::Buffer partials = l.buffer(sizeof(float) * partial_count(call, splits), "split-KV partials");
    set_partials(p, call, splits, partials.get());
    l.by_dtype(a.q.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      l.template quantized_forward<T>(p, call.k.dtype, e.max_q);
      if (p.num_splits > 1) l.template combine<T>(p, e.max_q);
    });
    return;
  }
  l.template dispatch<false>(call.q.dim, call.v.dim, a.q.dtype, [&](auto d, auto dv, auto tag) {
    constexpr int D = decltype(d)::value, DV = decltype(dv)::value;
    using T = typename decltype(tag)::type;
    // The sm_90a forward where the launcher has it and it takes the call, else the mma.sync kernel;
    // either way the keys may be split and the partials combined.
    constexpr bool kHopperDims = D == DV && (D == 64 || D == 128);
    bool hopper = false;
    Sm90MapSpecs specs;
    ForwardShape shape = forward_shape<D, DV>(forward_extras(p));
    if constexpr (kHopperDims) {
      hopper = l.sm90() && sm90_forward_specs(call, call_host, specs);
      if (hopper) shape.br = Sm90ForwardTraits<D>::kBr, shape.bc = Sm90ForwardTraits<D>::kBc;
    }
    const int splits = split_count(call, e, shape.br, shape.bc);
    typename L::Buffer partials = l.buffer(sizeof(float) * partial_count(call, splits), "split-KV partials");
    set_partials(p, call, splits, partials.get());
    if constexpr (kHopperDims) {
      if (hopper) {
        Sm90ForwardParams sp = sm90_forward_params(p, specs);
        // Sequences with their own extents (varlen, key lengths) get a map each, so that TMA reads
        // zeros past every sequence's end.
        const std::vector<CUtensorMap> maps = encode_tensor_maps(specs.sequences);
        typename L::Buffer map_buffer = l.buffer(sizeof(CUtensorMap) * maps.size(), "tensor maps");
        if (!maps.empty()) sp.seq_maps = l.upload(map_buffer, maps);
        l.template forward_sm90<D, T>(sp, e.max_q);
      }
    }
    if (!hopper) l.template forward<D, DV, T>(p, e.max_q);
    if (splits > 1) l.template combine<T>(p, e.max_q);
  });
}

// Runs a validated backward call (`a`: the kernels' pointers; e: the extents of its host copy):
//   1. D = rowsum(dO∘O) and LSE·log2(e) per row into scratch;
//   2. dsinks and dbias from them (when asked for; no atomics);
//   3. the dK/dV kernel over (key block, key head, sequence), which also adds dS·K into an fp32 dQ
//      accumulator with atomics unless `deterministic`;
//   4. dQ: the accumulator scaled and rounded, or (deterministic) the dQ kernel per query block.
template <class L>
void backward_sequence(L& l, const BackwardArgs& a, const Extents& e, bool deterministic) {
  BackwardParams p;
  fill(p, a, e.nseq);
  l.check_backward(p);
  if (e.max_k_rows == 0 && e.max_q == 0 && !a.dsinks && !p.dbias.data) return;
  typename L::Buffer dot = l.buffer(sizeof(float) * 2 * dot_count(a), "D and LSE·log2(e)");
  typename L::Buffer dq_accum = l.buffer(deterministic ? 0 : sizeof(float) * dq_accum_count(a), "dq_accum");
  p.dot = dot.get();
  p.lse2 = p.dot + dot_count(a);
  p.dq_accum = dq_accum.get();
  p.dq_sink = p.dq_accum ? p.dq_accum + dq_accum_rows_count(a) : nullptr;
  if (p.dq_accum) l.zero(p.dq_accum, dq_accum_count(a));
  l.template dispatch<true>(a.q.dim, a.v.dim, a.q.dtype, [&](auto d, auto dv, auto tag) {
    constexpr int D = decltype(d)::value, DV = decltype(dv)::value;
    using T = typename decltype(tag)::type;
    l.template dot<T>(p, e.max_q);
    if (p.dsinks) l.dsinks(p);
    if (p.dbias.data) l.template dbias<T>(p);
    l.template backward<D, DV, T>(p, e.max_k_rows);
    if (deterministic)
      l.template dq<D, DV, T>(p, e.max_q);
    else
      l.template dq_convert<T>(p, e.max_q);
  });
}

}  // namespace flashattn::gpu::detail
