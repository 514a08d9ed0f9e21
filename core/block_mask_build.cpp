// Building block-sparse masks (see flashattn/block_mask_build.hpp).
#include "flashattn/block_mask_build.hpp"

#include <algorithm>

#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"

namespace flashattn {
namespace {

// Returns ceil(n / d) for n >= 0, d >= 1.
int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// The lists under construction: per list the full and partial key blocks, in increasing order.
struct ListBuilder {
  std::vector<std::vector<int32_t>> full, partial;

  // Returns the buffers of these lists with the given geometry.
  BlockMaskBuffers finish(BlockMaskBuffers b) const {
    const size_t lists = full.size();
    b.max_blocks = 1;  // at least one reserved entry: index arrays are never empty (null) beside their counts
    for (size_t l = 0; l < lists; ++l)
      b.max_blocks = std::max<int64_t>(b.max_blocks, std::max(full[l].size(), partial[l].size()));
    b.full_count.resize(lists);
    b.partial_count.resize(lists);
    b.full_index.assign(lists * static_cast<size_t>(b.max_blocks), 0);
    b.partial_index.assign(b.full_index.size(), 0);
    for (size_t l = 0; l < lists; ++l) {
      b.full_count[l] = static_cast<int32_t>(full[l].size());
      b.partial_count[l] = static_cast<int32_t>(partial[l].size());
      std::copy(full[l].begin(), full[l].end(), b.full_index.begin() + l * b.max_blocks);
      std::copy(partial[l].begin(), partial[l].end(), b.partial_index.begin() + l * b.max_blocks);
    }
    return b;
  }
};

void check_geometry(int64_t sequences, int64_t heads, int64_t rows, int64_t keys, int64_t block_q, int64_t block_k) {
  if (block_q < 1 || block_k < 1) throw Error("block mask builder: block_q and block_k must be >= 1");
  if (sequences < 1 || heads < 1 || rows < 0 || keys < 0)
    throw Error("block mask builder: sequences and heads must be >= 1, rows and keys >= 0");
}

}  // namespace

BlockMask BlockMaskBuffers::view() const {
  BlockMask m;
  m.block_q = block_q;
  m.block_k = block_k;
  m.batch = batch;
  m.heads = heads;
  m.q_blocks = q_blocks;
  m.max_blocks = max_blocks;
  m.full_count = full_count.data();
  m.full_index = full_index.data();
  m.partial_count = partial_count.data();
  m.partial_index = partial_index.data();
  if (!bits.empty()) {
    m.bits.data = bits.data();
    m.bits.batch = batch;
    m.bits.seq = bit_rows;
    m.bits.heads = heads;
    m.bits.stride_head = row_bytes;
    m.bits.stride_seq = heads * row_bytes;
    m.bits.stride_batch = bit_rows * heads * row_bytes;
  }
  return m;
}

int64_t BlockMaskBuffers::listed() const {
  int64_t n = 0;
  for (size_t l = 0; l < full_count.size(); ++l) n += full_count[l] + partial_count[l];
  return n;
}

BlockMaskBuffers block_mask_from_predicate(int64_t sequences, int64_t heads, int64_t rows, int64_t keys, int64_t block_q,
                                           int64_t block_k, const VisibleFn& visible) {
  check_geometry(sequences, heads, rows, keys, block_q, block_k);
  BlockMaskBuffers b;
  b.block_q = block_q;
  b.block_k = block_k;
  b.batch = sequences;
  b.heads = heads;
  b.q_blocks = std::max<int64_t>(ceil_div(rows, block_q), 1);
  b.bit_rows = rows;
  b.row_bytes = ceil_div(keys, 8);
  std::vector<uint8_t> bits(static_cast<size_t>(sequences * rows * heads * b.row_bytes), 0);
  bool any_partial = false;
  const int64_t kblocks = ceil_div(keys, block_k);
  ListBuilder lists;
  lists.full.resize(static_cast<size_t>(sequences * heads * b.q_blocks));
  lists.partial.resize(lists.full.size());
  for (int64_t s = 0; s < sequences; ++s)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t qb = 0; qb < b.q_blocks; ++qb) {
        const size_t l = static_cast<size_t>((s * heads + h) * b.q_blocks + qb);
        const int64_t i0 = qb * block_q, i1 = std::min(rows, i0 + block_q);
        for (int64_t kb = 0; kb < kblocks; ++kb) {
          const int64_t j0 = kb * block_k, j1 = std::min(keys, j0 + block_k);
          int64_t seen = 0;
          for (int64_t i = i0; i < i1; ++i) {
            uint8_t* row = bits.data() + ((s * rows + i) * heads + h) * b.row_bytes;
            for (int64_t j = j0; j < j1; ++j)
              if (visible(s, h, i, j)) {
                row[j / 8] = static_cast<uint8_t>(row[j / 8] | (1u << (j % 8)));
                ++seen;
              }
          }
          if (seen == 0) continue;
          if (seen == (i1 - i0) * (j1 - j0)) {
            lists.full[l].push_back(static_cast<int32_t>(kb));
          } else {
            lists.partial[l].push_back(static_cast<int32_t>(kb));
            any_partial = true;
          }
        }
      }
  if (any_partial) b.bits = std::move(bits);
  return lists.finish(std::move(b));
}

BlockMaskBuffers block_mask_from_dense(const uint8_t* dense, int64_t sequences, int64_t rows, int64_t heads,
                                       int64_t keys, int64_t stride_batch, int64_t stride_seq, int64_t stride_head,
                                       int64_t block_q, int64_t block_k) {
  if (!dense && sequences * rows * heads * keys > 0) throw Error("block_mask_from_dense: dense is null");
  return block_mask_from_predicate(sequences, heads, rows, keys, block_q, block_k,
                                   [&](int64_t s, int64_t h, int64_t i, int64_t j) {
                                     return dense[s * stride_batch + i * stride_seq + h * stride_head + j] != 0;
                                   });
}

BlockMaskBuffers block_mask_from_rule(const AttentionArgs& a, int64_t block_q, int64_t block_k) {
  const int64_t sequences = num_sequences(a);
  int64_t rows = 0;
  for (int64_t s = 0; s < sequences; ++s) rows = std::max(rows, sequence(a, s).mask.seqlen_q);
  check_geometry(std::max<int64_t>(sequences, 1), 1, rows, key_columns(a), block_q, block_k);
  BlockMaskBuffers b;
  b.block_q = block_q;
  b.block_k = block_k;
  b.batch = std::max<int64_t>(sequences, 1);
  b.heads = 1;
  b.q_blocks = std::max<int64_t>(ceil_div(rows, block_q), 1);
  ListBuilder lists;
  lists.full.resize(static_cast<size_t>(b.batch * b.q_blocks));
  lists.partial.resize(lists.full.size());
  for (int64_t s = 0; s < sequences; ++s) {
    const Mask m = sequence(a, s).mask;
    for (int64_t qb = 0; qb * block_q < m.seqlen_q; ++qb) {
      const size_t l = static_cast<size_t>(s * b.q_blocks + qb);
      const int64_t r0 = qb * block_q, r1 = std::min(m.seqlen_q, r0 + block_q);
      for (int64_t kb = 0; kb * block_k < m.seqlen_k; ++kb) {
        const TileKind k = m.classify(r0, r1, kb * block_k, std::min(m.seqlen_k, (kb + 1) * block_k));
        if (k == TileKind::full) lists.full[l].push_back(static_cast<int32_t>(kb));
        if (k == TileKind::partial) lists.partial[l].push_back(static_cast<int32_t>(kb));
      }
    }
  }
  return lists.finish(std::move(b));
}

}  // namespace flashattn
