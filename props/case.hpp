// props::Case: one generated attention problem (shapes, masks, dtype, layout, values, seed).
//
// A case is plain data: it prints as ONE line of `key=value` fields (operator<<) and parses back
// from that line (parse_case), so any failure RapidCheck reports can be replayed exactly with
// FLASHATTN_REPLAY="<line>". Tensors are materialised from a case by props::Problem (buffers.hpp).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "flashattn/options.hpp"
#include "flashattn/types.hpp"

namespace props {

// Memory layout of every tensor view of a case.
enum class Layout : uint8_t {
  bshd,    // contiguous [batch, seq, heads, dim]
  bhsd,    // contiguous [batch, heads, seq, dim]
  padded,  // bshd order with gaps after each head row, seq row and batch (odd element counts)
};

// Distribution of the q, k, v values (dout is always standard normal).
enum class Values : uint8_t {
  normal,  // standard normal
  large,   // q and k scaled so that |S| reaches ~1e3
  ties,    // q, k, v in {-1, 0, 1}: many exactly equal scores
  zero_v,  // normal q, k; about half of the v elements are exactly zero
  heavy,   // normal q; k and v of random sign and log-uniform magnitude in [2^-30, 2^4] (the spread of
           // fp8 e5m2 data): a dot product's size is one or two of its terms, so fp32 sums round at |S|
};

// ALiBi slopes of a case.
enum class Alibi : uint8_t {
  off,
  shared,     // slopes [Hq], shared by all sequences
  per_batch,  // slopes [B, Hq] (alibi_batch_stride = Hq)
};

// Additive bias of a case (AttentionArgs::bias), always with a dbias of the same sizes in the backward.
enum class BiasKind : uint8_t {
  off,
  full,       // [S, Nq, Hq, Nk], stored [S, Hq, Nq, Nk] contiguous (PyTorch's attn_mask order)
  rows_keys,  // [1, Nq, 1, Nk]: one table for every sequence and head (size-1 broadcast)
  head_keys,  // [1, 1, Hq, Nk]: a per-head key bias (size-1 broadcast over sequences and rows)
  stride0,    // [S, Nq, Hq, Nk] sizes over one [Nq, Nk] table: stride 0 over sequences and heads
};

// Block-sparse mask of a case (AttentionArgs::block_mask; docs/semantics.md, "Block-sparse masks").
enum class BlockSparse : uint8_t {
  off,
  lists,   // per (sequence, head, query block) lists: each block hidden, full or partial at random
  bits,    // as lists, with element bits (random) for the partial blocks
  shared,  // one set of lists and bits for every sequence and head (batch = heads = 1)
  rule,    // flashattn::block_mask_from_rule of the call (the same visibility as without a mask)
};

struct Case : flashattn::MaskOptions, flashattn::ScoreOptions {
  int64_t batch = 1;     // sequences (varlen: packed sequences; tensors then have batch 1)
  int64_t heads_k = 1;   // key/value heads
  int64_t group = 1;     // query heads per key/value head (heads_q = heads_k * group)
  int64_t seqlen_q = 1;  // rows of q per batch (varlen: total rows = sum of varlen_q)
  int64_t seqlen_k = 1;  // rows of k/v per batch (varlen: total rows = sum of varlen_k)
  int64_t dim = 1;       // head dim of q, k, v
  flashattn::DType dtype = flashattn::DType::f32;

  // The mask and score value options (causal, windows, diagonal_offset, scale, softcap) are the
  // groups it inherits, set on a call as they are (Instance::base_args). scale empty: the default
  // 1/sqrt(dim) (printed "default"); 0 is a zero scale.
  Alibi alibi = Alibi::off;
  std::vector<int32_t> key_lengths;  // seqlens_k, one per sequence; empty: off
  std::vector<int32_t> varlen_q;     // per-sequence q lengths; empty: not varlen
  std::vector<int32_t> varlen_k;     // per-sequence k lengths (same size as varlen_q)

  BiasKind bias = BiasKind::off;
  flashattn::DType bias_dtype = flashattn::DType::f32;
  bool bias_inf = false;  // about a quarter of the bias entries are −∞, and row 0 of every table is
  float dropout_p = 0;    // dropout probability (seed and offset derived from `seed`); 0: off
  BlockSparse blocks = BlockSparse::off;
  int64_t block_q = 0, block_k = 0;  // the block mask's block sizes (with blocks != off)

  Layout layout = Layout::bshd;
  bool offset = false;  // base pointers moved by one element (aligned to the element only)
  Values values = Values::normal;
  uint64_t seed = 0;    // seed of the tensor values

  int64_t heads_q() const { return heads_k * group; }
  // Returns the bias's [batch, seq, heads, dim] sizes (all 0 without bias): S or 1, Nq (the longest
  // varlen sequence's rows, at least 1) or 1, Hq or 1, the keys of a sequence (the longest varlen one).
  std::vector<int64_t> bias_sizes() const;
  bool varlen() const { return !varlen_q.empty(); }
  // Returns {rows, keys} of the longest sequence (varlen: the longest of each; else seqlen_q, seqlen_k).
  std::vector<int64_t> longest() const;
  int64_t tensor_batch() const { return varlen() ? 1 : batch; }
  // Returns Σ over sequences of seqlen_q · seqlen_k · dim · heads_q: the oracle's cost of a case.
  int64_t work() const;
};

// Writes the case as one line of space-separated key=value fields.
std::ostream& operator<<(std::ostream& os, const Case& c);
std::string to_string(const Case& c);
// RapidCheck's hook for printing counterexamples (the same one line).
void showValue(const Case& c, std::ostream& os);

// Returns the case printed by operator<<. Throws std::invalid_argument naming the bad field.
Case parse_case(const std::string& line);

bool operator==(const Case& a, const Case& b);

// What a generator may produce. The defaults cover every feature.
struct CaseSpace {
  bool masks = true;          // causal, window, ALiBi, seqlens_k may be on
  int varlen = -1;            // -1: sometimes, 0: never, 1: always
  int key_lengths = -1;       // seqlens_k: -1 sometimes, 0 never, 1 always
  bool softcap = true;        // softcap may be on
  bool custom_scale = true;   // scale may differ from 1/sqrt(d)
  int64_t min_group = 1;      // smallest query heads per key/value head (2: always GQA)
  int64_t max_work = int64_t{1} << 20;  // bound on Case::work() (keeps the fp64 oracle fast)
  int64_t max_seqlen = 300;   // bound on one sequence's q and k lengths
  int64_t max_dim = 160;      // bound on the non-GPU head dims (the GPU set 32..256 is always in)
  std::vector<flashattn::DType> dtypes = {flashattn::DType::f32, flashattn::DType::f16, flashattn::DType::bf16};
  bool bias = false;     // draw an additive bias (every BiasKind, any bias dtype, −∞ entries)
  bool dropout = false;  // draw a dropout probability (0 included)
  bool blocks = false;   // draw a block-sparse mask (every BlockSparse kind, block sizes 1..80)
};

// Returns a generator of cases in `space` (props/README.md gives the shares, props/coverage.hpp
// measures them): 9 in 10 cases are regular (lengths >= 2 near and across the CPU tile edges, so
// that most rows see several keys and sequences span several tiles), 1 in 10 is degenerate on
// purpose (one key, one row, one key per row, no key); head dims 1..max_dim plus 32/64/96/128/256;
// every mask, layout and value kind. Each case is fitted to a cost budget of max_work / 2, / 4 or
// / 8 (so work() <= max_work / 2), in 3 of 4 cases by dropping heads and lowering the head dim
// before shortening sequences. RapidCheck's size is ignored: every case is drawn at the nominal
// size (its ramp from size 0 would make a run's first cases minimal); shrinking finds small cases.
rc::Gen<Case> gen_case(const CaseSpace& space = {});

}  // namespace props
