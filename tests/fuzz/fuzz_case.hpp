// Decoding fuzzer bytes into one forward or backward call over small buffers the case owns.
//
// A case starts from a consistent problem (shapes, layouts, masks, varlen, ALiBi, key lengths) whose
// buffers are allocated at exactly the size its views span, so AddressSanitizer flags any access
// one element past a view. Then up to kMaxMutations fields are overwritten with hostile values:
// sizes (0, negative, 2^31, products that overflow int64), strides, null or misaligned pointers,
// pointers into another buffer, invalid dtype values, cu_seqlens / seqlens_k entries, block-table
// entries and geometry (paged K/V), sinks, dsinks, num_splits, a value head dim dv != d, an additive
// bias and its dbias (sizes, strides, dtype, pointers), dropout (p, the keep mask's pointer), window
// values, non-finite scale / softcap / ALiBi slopes, special input values (NaN, inf, huge,
// subnormal), quantized K/V (8-bit dtypes, scales of every granularity, hostile scales). Every
// pointer a case holds is null or points into (or one past) one of its buffers or side arrays.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flashattn/args.hpp"

namespace flashattn::fuzz {

// The buffers of a case, one per tensor (and one for lse).
enum Slot : int { kQ, kK, kV, kOut, kDout, kDq, kDk, kDv, kLse, kNumSlots };

// An exactly sized heap allocation (no slack, so ASan's redzone starts right after the last byte).
struct Buffer {
  std::unique_ptr<unsigned char[]> bytes;
  size_t size = 0;
  unsigned char* begin() const { return bytes.get(); }
  unsigned char* end() const { return bytes.get() + size; }
};

// A host array of exactly `count` elements (the side arrays: cu_seqlens, seqlens_k, ALiBi slopes).
template <class T>
struct SideArray {
  std::unique_ptr<T[]> data;
  int64_t count = 0;
  void resize(int64_t n) {
    count = n;
    data.reset(n > 0 ? new T[static_cast<size_t>(n)]() : nullptr);
  }
};

// The fields of one call, all views writable so that mutations can reach every tensor alike; the
// options are AttentionArgs' own. Inherited privately (its read-only q, k, v are shadowed and never
// set), so a CallFields cannot be passed where an AttentionArgs is expected: forward() and
// backward() build the real calls.
struct CallFields : private AttentionArgs {
  using AttentionArgs::alibi_batch_stride;
  using AttentionArgs::alibi_slopes;
  using AttentionArgs::causal;
  using AttentionArgs::cu_seqlens_k;
  using AttentionArgs::cu_seqlens_q;
  using AttentionArgs::max_seqlen_k;
  using AttentionArgs::max_seqlen_q;
  using AttentionArgs::scale;
  using AttentionArgs::seqlens_k;
  using AttentionArgs::softcap;
  using AttentionArgs::varlen_batch;
  using AttentionArgs::window_left;
  using AttentionArgs::window_right;
  using AttentionArgs::diagonal_offset;
  using AttentionArgs::sinks;
  using AttentionArgs::block_table;
  using AttentionArgs::block_table_stride;
  using AttentionArgs::block_table_pages;
  using AttentionArgs::dropout_p;
  using AttentionArgs::dropout_seed;
  using AttentionArgs::dropout_offset;
  using AttentionArgs::block_mask;
  using AttentionArgs::kv_scales;
  Tensor q, k, v, out, dout, dq, dk, dv;
  Tensor bias, dbias;                 // bias: an input (a writable view only so mutations reach it alike)
  uint8_t* dropout_mask = nullptr;    // forward output
  float* lse = nullptr;
  float* dsinks = nullptr;   // backward output
  int64_t num_splits = 0;    // forward option

  // Returns the forward call (q, k, v, out, lse and the options).
  ForwardArgs forward() const {
    ForwardArgs f;
    static_cast<AttentionArgs&>(f) = static_cast<const AttentionArgs&>(*this);
    f.q = q, f.k = k, f.v = v, f.out = out, f.lse = lse;
    f.bias = bias;
    f.num_splits = num_splits;
    f.dropout_mask = dropout_mask;
    return f;
  }
  // Returns the backward call (out and lse as inputs, dout, and the gradients).
  BackwardArgs backward() const {
    BackwardArgs b = backward_args(forward());
    b.dout = dout, b.dq = dq, b.dk = dk, b.dv = dv;
    b.dsinks = dsinks;
    b.dbias = dbias;
    return b;
  }
};

struct FuzzCase {
  bool backward = false;  // which pass the case calls
  CallFields args;        // forward cases use q, k, v, out, lse
  std::array<Buffer, kNumSlots> buffers;
  SideArray<int32_t> cu_q, cu_k, seqlens_k;
  SideArray<float> alibi, sinks;
  SideArray<int32_t> block_table;
  SideArray<float> dsinks;  // the backward's dsinks output (an array like the side arrays)
  Buffer bias_buf, dbias_buf, mask_buf;  // the bias, dbias and keep-mask extension's buffers
  // The block-mask extension's lists (side arrays: validate reads them) and element bits (a buffer).
  SideArray<int32_t> full_count, full_index, partial_count, partial_index;
  SideArray<float> k_scales, v_scales;  // the quantized K/V extension's scales
  Buffer bits_buf;
  size_t bias_end = 0;  // bytes read up to the end of the bias and dropout extension
  size_t quantized_at = 0;  // bytes read before the quantized K/V extension (where its marker goes)
  // Whether the input values are moderate and finite and the numeric options untouched, so results
  // can be compared with the oracle (otherwise only "computes or throws, touches nothing else").
  bool tame = true;
  // The base problem's geometry (before mutations), for the inference extension.
  DType dtype = DType::f32;
  int64_t batch = 0, nq = 0, nk = 0, hk = 0, hq = 0, d = 0;
  bool varlen = false;
  uint8_t config_choice[4] = {};
  size_t base_bytes = 0;  // bytes the base case, its mutations and the config read (the extension follows)  // raw bytes a backend turns into its tuning (tile sizes, threads)
  std::string trace;  // the decoded case and its mutations, printed when a check fails
};

// Number of hostile field overwrites applied to a case at most.
constexpr int kMaxMutations = 4;

// Decodes `data` into `c`. The inference options (dv != d, paged K/V, sinks, dsinks, num_splits), then
// bias, dbias and dropout, are decoded from bytes past everything else, so inputs written before
// they existed decode as before.
// Decodes `data` into `c`. Returns false when the decoded case would make validate() itself read a
// side array past its end (the documented lengths of cu_seqlens, seqlens_k and alibi_slopes are a
// caller precondition validate() cannot check); such inputs are skipped.
bool decode(const uint8_t* data, size_t size, FuzzCase& c);

// Returns whether [p, p + bytes) lies inside one buffer of the case.
bool inside_buffer(const FuzzCase& c, const void* p, int64_t bytes);

// Returns every tensor buffer of the case: the slots in order, then bias, dbias, the keep mask and
// the block mask's bits.
std::vector<const Buffer*> all_buffers(const FuzzCase& c);

}  // namespace flashattn::fuzz
