// Per-thread scratch layouts of the forward and the backward, each defined once: a layout's
// constructor lists its regions (element type, count, alignment) in order through a Carver, which
// either places them from a buffer (the kernels) or, given no buffer, only counts their bytes
// (forward_scratch_floats / backward_scratch_floats: thread_scratch and workspace_bytes). So the
// size a call allocates and reports and the pointers its kernels use cannot drift apart.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plan.h"

namespace flashattn::cpu::detail {

// Alignment of every region read as vectors: the widest vector of any target (kMaxLanes floats,
// one cache line). thread_scratch buffers start at it.
constexpr size_t kVectorAlign = kMaxLanes * sizeof(float);

// Lays regions out one after another from `base`, each at a multiple of its alignment. With no base
// it places nothing (every region is null) and only counts: bytes() is then the size of the layout.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}

  // Returns the next region of `count` T, aligned to `align` bytes (null when only counting).
  template <typename T>
  T* take(int64_t count, size_t align = alignof(T)) {
    offset_ = (offset_ + align - 1) / align * align;
    T* region = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += static_cast<size_t>(count) * sizeof(T);
    return region;
  }

  // Bytes from the base to the end of the last region.
  size_t bytes() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

// Returns Layout(carver, p) placed from `base` (at least layout_bytes<Layout>(p) bytes, aligned to
// kVectorAlign).
template <class Layout>
Layout place(void* base, const Plan& p) {
  Carver c(base);
  return Layout(c, p);
}

// Returns the bytes Layout takes for plan p.
template <class Layout>
size_t layout_bytes(const Plan& p) {
  Carver c(nullptr);
  const Layout counted(c, p);
  static_cast<void>(counted);
  return c.bytes();
}

// The regions both passes have for exact scores (fp32 inputs, plan.h exact_tile), else null: the fp64
// raw score tile Sᵀ [block_k x qpad], and the squared norms of one head's key rows [max_k] (for the
// adaptive choice).
inline double* take_exact_score_tile(Carver& c, const Plan& p) {
  return p.exact_scores ? c.take<double>(p.block_k * p.qpad, kVectorAlign) : nullptr;
}
inline float* take_key_norms(Carver& c, const Plan& p) { return p.exact_scores ? c.take<float>(p.max_k) : nullptr; }

// The regions both passes have with an additive bias (bias-inl.h), else null: the tile's bias
// rows widened [qpad x bias_ld(p)], and transposed like the score tile [block_k x qpad].
inline int64_t bias_ld(const Plan& p) { return round_up(p.block_k, kMaxLanes); }
inline float* take_bias_rows(Carver& c, const Plan& p) {
  return p.bias ? c.take<float>(p.qpad * bias_ld(p), kVectorAlign) : nullptr;
}
inline float* take_bias_tile(Carver& c, const Plan& p) {
  return p.bias ? c.take<float>(p.block_k * p.qpad, kVectorAlign) : nullptr;
}

// One forward work item's scratch. Grows with threads·tile·d (+ max_k with exact scores).
struct ForwardScratch {
  double* sd;     // [block_k x qpad] raw Sᵀ in fp64 (exact scores only, else null)
  float* qt;      // [d x qpad] Qᵀ
  float* ot;      // [dpad x qpad] Oᵀ accumulator (rows past d stay 0)
  float* st;      // [block_k x qpad] Sᵀ, then Pᵀ
  float* m;       // [qpad] running row max
  float* l;       // [qpad] running row sum
  float* alpha;   // [qpad] rescale factor of the last step
  float* tmax;    // [qpad] row max of the raw scores of the current tile (from the S product)
  int32_t* kbeg;  // [qpad] first visible key per row
  int32_t* kend;  // [qpad] one past the last visible key per row
  float* rows;    // [qpad x dpad] the block's rows in fp32 (padded with 0): Q on the way in, O out
  float* knorm;   // [max_k] squared norms of one head's key rows (exact scores only, else null)
  // bf16 tile products only (Plan::bf16_dot), else null; "pairs" are two bf16 in a uint32
  // (bf16_dot.h), and Qᵀ as pairs [ceil(d/2) x qpad] lives in qt. The head's K, V are packed once
  // per (sequence, kv head) on the thread (HeadState says which):
  uint32_t* kp;   // [max_k x ceil(d/2)] the head's key rows as pairs (zero-padded to an even d)
  uint32_t* vp;   // [ceil(max_k/2) x dpad] the head's values as pairs of keys (2t, 2t + 1)
  int32_t* tiny;  // [max_k + 1] tiny[j]: keys before j whose k or v row holds a tiny value (bf16-inl.h)
  uint32_t* vt;   // [ceil(block_k/2) x dpad] one key block's values as pairs of its keys, for a
                  // block that starts at an odd key
  uint32_t* pp;   // [ceil(block_k/2) x qpad] Pᵀ rounded to bf16, pairs of consecutive keys
  // With an additive bias (Plan::bias), else null:
  float* brows;   // [qpad x bias_ld] the tile's bias rows in fp32
  float* bt;      // [block_k x qpad] the tile's bias, transposed (TileScores::bias)

  ForwardScratch(Carver& c, const Plan& p)
      : sd(take_exact_score_tile(c, p)),
        qt(c.take<float>(p.dim * p.qpad, kVectorAlign)),
        ot(c.take<float>(p.dpad * p.qpad, kVectorAlign)),
        st(c.take<float>(p.block_k * p.qpad, kVectorAlign)),
        m(c.take<float>(p.qpad, kVectorAlign)),
        l(c.take<float>(p.qpad, kVectorAlign)),
        alpha(c.take<float>(p.qpad, kVectorAlign)),
        tmax(c.take<float>(p.qpad, kVectorAlign)),
        kbeg(c.take<int32_t>(p.qpad, kVectorAlign)),
        kend(c.take<int32_t>(p.qpad, kVectorAlign)),
        rows(c.take<float>(p.qpad * p.dpad, kVectorAlign)),
        knorm(take_key_norms(c, p)),
        kp(p.bf16_dot ? c.take<uint32_t>(p.max_k * ceil_div(p.dim, 2), kVectorAlign) : nullptr),
        vp(p.bf16_dot ? c.take<uint32_t>(ceil_div(p.max_k, 2) * p.dpad, kVectorAlign) : nullptr),
        tiny(p.bf16_dot ? c.take<int32_t>(p.max_k + 1) : nullptr),
        vt(p.bf16_dot ? c.take<uint32_t>(ceil_div(p.block_k, 2) * p.dpad, kVectorAlign) : nullptr),
        pp(p.bf16_dot ? c.take<uint32_t>(ceil_div(p.block_k, 2) * p.qpad, kVectorAlign) : nullptr),
        brows(take_bias_rows(c, p)),
        bt(take_bias_tile(c, p)) {}
};

// One query block's operands and state in the backward: the inputs of its tile products, its dQ
// accumulator and its P cache.
struct QueryBlock {
  float* qt = nullptr;      // [d x qpad] Qᵀ
  float* dot = nullptr;     // [d x qpad] dOᵀ
  float* dqt = nullptr;     // [dpad x qpad] dQᵀ accumulator (fp32; rows past d stay 0)
  float* qr = nullptr;      // [qpad x dpad] Q, rows zero-padded to dpad
  float* dor = nullptr;     // [qpad x dpad] dO
  float* dd = nullptr;      // [qpad] D = rowsum(dO∘O)
  float* lse = nullptr;     // [qpad] LSE, +∞ for rows that see no key (so P = 0)
  float* rnorm = nullptr;   // [qpad] 1 / Σ_j exp(S − LSE) when self-normalising
  double* rsum = nullptr;   // [qpad] Σ_j exp(S − LSE) in fp64 when self-normalising
  int32_t* kbeg = nullptr;  // [qpad] first visible key per row
  int32_t* kend = nullptr;  // [qpad] one past the last visible key
  float* pc = nullptr;      // [kpad x qpad] Pᵀ of every key block of the query block (the P cache)
  float* tc = nullptr;      // [kpad x qpad] tanh(S/softcap) likewise (soft-capping only, else null)
  // With bf16 tile products (Plan::bf16_dot) PrepareBlock leaves the operands as bf16 pairs
  // (bf16_dot.h) in the first half of their fp32 regions: qt, dot hold Qᵀ, dOᵀ as pairs of
  // consecutive head-dim rows [ceil(d/2) x qpad], qr, dor hold Q, dO as pairs of consecutive query
  // rows [ceil(rows/2) x dpad].
  // Set by PrepareBlock (backward.cc):
  int64_t r0 = 0, r1 = 0, rows = 0, W = 0;  // query rows [r0, r1), rows rounded up to vectors
  int64_t kb_lo = 0, key_hi = 0;            // key blocks [kb_lo, key_hi) the rows may see
  float qmax2 = 0.0f;                       // largest squared norm of a Q row (adaptive scores)
  bool tiny = false;                        // bf16 products: a q or dO value is tiny (bf16-inl.h)

  // Takes the block's regions from c; kpad = max_k rounded up to block_k.
  void place(Carver& c, const Plan& p) {
    const int64_t kpad = round_up(p.max_k, p.block_k);
    qt = c.take<float>(p.dim * p.qpad, kVectorAlign);
    dot = c.take<float>(p.dim * p.qpad, kVectorAlign);
    dqt = c.take<float>(p.dpad * p.qpad, kVectorAlign);
    qr = c.take<float>(p.qpad * p.dpad, kVectorAlign);
    dor = c.take<float>(p.qpad * p.dpad, kVectorAlign);
    dd = c.take<float>(p.qpad, kVectorAlign);
    lse = c.take<float>(p.qpad, kVectorAlign);
    rnorm = c.take<float>(p.qpad, kVectorAlign);
    rsum = c.take<double>(p.qpad, kVectorAlign);
    kbeg = c.take<int32_t>(p.qpad, kVectorAlign);
    kend = c.take<int32_t>(p.qpad, kVectorAlign);
    pc = c.take<float>(kpad * p.qpad, kVectorAlign);
    tc = p.softcap ? c.take<float>(kpad * p.qpad, kVectorAlign) : nullptr;
  }
};

// One backward work item's scratch: the query blocks of one pass over the keys, the dP/dS tile, the
// head's dK, dV accumulators. Grows with seqlen_k·(pass_blocks·block_q + d), never
// seqlen_q·seqlen_k.
struct BackwardScratch {
  double* sd;     // [block_k x qpad] raw Sᵀ in fp64 (exact scores only, else null)
  QueryBlock blk[kMaxPassBlocks];  // the first p.pass_blocks are placed
  float* dpt;     // [block_k x qpad] dPᵀ, then dSᵀ
  float* dkt;     // [max_k x dpad] dK accumulator of the head (fp32)
  float* dvt;     // [max_k x dpad] dV accumulator of the head (fp32)
  float* dkg;     // [max_k x dpad] dK of the current group of query blocks (backward_grouped), else dkt
  float* dvg;     // [max_k x dpad] dV likewise, else dvt
  float* row;     // [dpad]
  float* kv;      // [2 x max_k x kv_ld] fp32 copy of one head of k, v (kv.h; copied k, v only, else null)
  float* knorm;   // [max_k] squared norms of the head's key rows (exact scores only, else null)
  // bf16 tile products only (Plan::bf16_dot), else null; pairs as in bf16_dot.h. The head's K, V
  // packed once per (sequence, kv head) in the forms the products read (the thread's KvCopy says
  // which head they hold):
  uint32_t* kp;    // [max_k x ceil(d/2)] the head's key rows as pairs (S = Q·Kᵀ)
  uint32_t* vp;    // [max_k x ceil(d/2)] the head's value rows as pairs (dP = dO·Vᵀ)
  uint32_t* ki;    // [key blocks x ceil(block_k/2) x dpad] per key block, pairs of consecutive key rows (dQ += dS·K)
  uint8_t* ktiny;  // [key blocks] whether the block's k or v holds a tiny value (bf16-inl.h)
  // per tile:
  uint32_t* prow;  // [block_k x qpad/2] Pᵀ rounded to bf16, pairs of consecutive query rows (dV)
  uint32_t* srow;  // [block_k x qpad/2] dSᵀ likewise (dK)
  uint32_t* scol;  // [ceil(block_k/2) x qpad] dSᵀ rounded to bf16, pairs of consecutive keys (dQ)
  // With an additive bias (Plan::bias), else null: as in ForwardScratch.
  float* brows;    // [qpad x bias_ld] the tile's bias rows in fp32
  float* bt;       // [block_k x qpad] the tile's bias, transposed
  float* zt;       // [block_k x qpad] the tile's dropout factors Z/(1 − p) (Plan::dropout), else null
  float* dbias;    // [qpad x round_up(max_k, kMaxLanes)] fp32 dbias rows of a dbias item (Plan::dbias), else null

  BackwardScratch(Carver& c, const Plan& p) {
    sd = take_exact_score_tile(c, p);
    for (int64_t b = 0; b < p.pass_blocks; ++b) blk[b].place(c, p);
    dpt = c.take<float>(p.block_k * p.qpad, kVectorAlign);
    dkt = c.take<float>(p.max_k * p.dpad, kVectorAlign);
    dvt = c.take<float>(p.max_k * p.dpad, kVectorAlign);
    const bool grouped = backward_grouped(p);
    dkg = grouped ? c.take<float>(p.max_k * p.dpad, kVectorAlign) : dkt;
    dvg = grouped ? c.take<float>(p.max_k * p.dpad, kVectorAlign) : dvt;
    row = c.take<float>(p.dpad, kVectorAlign);
    kv = p.copy_kv ? c.take<float>(2 * p.max_k * p.kv_ld, kVectorAlign) : nullptr;
    knorm = take_key_norms(c, p);
    const auto pairs = [&](int64_t n) { return p.bf16_dot ? c.take<uint32_t>(n, kVectorAlign) : nullptr; };
    const int64_t d2 = ceil_div(p.dim, 2), k2 = ceil_div(p.block_k, 2), kblocks = ceil_div(p.max_k, p.block_k);
    kp = pairs(p.max_k * d2);
    vp = pairs(p.max_k * d2);
    ki = pairs(kblocks * k2 * p.dpad);
    ktiny = p.bf16_dot ? c.take<uint8_t>(kblocks) : nullptr;
    prow = pairs(p.block_k * p.qpad / 2);
    srow = pairs(p.block_k * p.qpad / 2);
    scol = pairs(k2 * p.qpad);
    brows = take_bias_rows(c, p);
    bt = take_bias_tile(c, p);
    zt = p.dropout ? c.take<float>(p.block_k * p.qpad, kVectorAlign) : nullptr;
    dbias = p.dbias ? c.take<float>(p.qpad * round_up(p.max_k, kMaxLanes), kVectorAlign) : nullptr;
  }
};

}  // namespace flashattn::cpu::detail
