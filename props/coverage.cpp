// Classification of generated cases (see coverage.hpp).
#include "props/coverage.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "flashattn/problem.hpp"

namespace props {
namespace {

using flashattn::DType;

// Returns whether some two tiles of grid t over sequence mask m hold a visible element.
bool several_tiles(const flashattn::Mask& m, const Tile& t) {
  int nonempty = 0;
  for (int64_t r0 = 0; r0 < m.seqlen_q; r0 += t.block_q) {
    const int64_t r1 = std::min(r0 + t.block_q, m.seqlen_q);
    // Only key tiles that meet the rows' union of intervals can be non-empty.
    const int64_t kb = m.rows_key_begin(r0), ke = m.rows_key_end(r1);
    for (int64_t c0 = kb / t.block_k * t.block_k; c0 < ke; c0 += t.block_k)
      if (m.classify(r0, r1, c0, c0 + t.block_k) != flashattn::TileKind::empty && ++nonempty >= 2) return true;
  }
  return false;
}

std::string percent(double share) {
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", 100 * share);
  return b;
}

}  // namespace

const char* mask_kind_name(MaskKind m) {
  switch (m) {
    case MaskKind::none: return "none";
    case MaskKind::causal: return "causal";
    case MaskKind::window: return "window";
    case MaskKind::causal_window: return "causal+window";
  }
  return "invalid";
}

Tile default_tile(int64_t dim) { return {64, dim > 128 ? 64 : 128}; }

Coverage coverage(const Case& c) {
  Coverage v;
  v.dtype = c.dtype;
  v.layout = c.layout;
  const bool window = c.window_left >= 0 || c.window_right >= 0;
  v.mask = c.causal ? (window ? MaskKind::causal_window : MaskKind::causal)
                    : (window ? MaskKind::window : MaskKind::none);
  v.alibi = c.alibi != Alibi::off;
  v.softcap = c.softcap > 0;
  v.varlen = c.varlen();
  v.seqlens_k = !c.key_lengths.empty();
  v.gqa = c.group > 1;
  v.custom_scale = c.scale != 0;
  v.offset = c.offset;
  v.values = c.values;
  v.dim = c.dim;
  v.gpu_dim = c.dim == 32 || c.dim == 64 || c.dim == 96 || c.dim == 128 || c.dim == 256;
  v.work = c.work();

  // The call's side arrays, as props::Instance builds them.
  std::vector<int32_t> cu_q, cu_k;
  if (c.varlen()) {
    cu_q.assign(1, 0);
    cu_k.assign(1, 0);
    for (size_t s = 0; s < c.varlen_q.size(); ++s) {
      cu_q.push_back(cu_q.back() + c.varlen_q[s]);
      cu_k.push_back(cu_k.back() + c.varlen_k[s]);
    }
  }
  const Tile wide = default_tile(c.dim);
  int64_t rows = 0, multi_rows = 0, empty_rows = 0;
  for (int64_t s = 0; s < c.batch; ++s) {
    const flashattn::Sequence seq = flashattn::make_sequence(
        s, c.seqlen_q, c.seqlen_k, c.varlen() ? cu_q.data() : nullptr, c.varlen() ? cu_k.data() : nullptr,
        c.key_lengths.empty() ? nullptr : c.key_lengths.data(), c);
    const flashattn::Mask& m = seq.mask;
    if (m.seqlen_q == 0 || m.seqlen_k == 0) v.empty_sequence = true;
    rows += m.seqlen_q;
    for (int64_t i = 0; i < m.seqlen_q; ++i) {
      const int64_t keys = m.key_end(i) - m.key_begin(i);
      if (keys <= 0) ++empty_rows;
      if (keys >= 2) ++multi_rows;
    }
    if (m.seqlen_q == 0 || m.seqlen_k == 0) continue;
    auto ragged = [&](const Tile& t) { return m.seqlen_q % t.block_q != 0 || m.seqlen_k % t.block_k != 0; };
    if (several_tiles(m, wide)) {
      v.multi_tile = true;
      v.partial_tiles = v.partial_tiles || ragged(wide);
    }
    if (several_tiles(m, kTinyTile)) {
      v.multi_tile_tiny = true;
      v.partial_tiles_tiny = v.partial_tiles_tiny || ragged(kTinyTile);
    }
  }
  v.rows = rows > 0;
  v.multi_key_row = multi_rows > 0;
  v.most_rows_multi = rows > 0 && 2 * multi_rows >= rows;
  v.empty_rows = empty_rows > 0;
  v.all_rows_empty = empty_rows == rows;
  return v;
}

double CoverageTally::mean_work() const {
  double w = 0;
  for (const Coverage& v : all_) w += double(v.work);
  return all_.empty() ? 0.0 : w / double(all_.size());
}

std::string CoverageTally::summary() const {
  std::ostringstream os;
  auto put = [&](const char* name, auto pred) { os << ' ' << name << ' ' << percent(share(pred)); };
  os << "coverage of " << cases() << " cases:\n ";
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    put(flashattn::dtype_name(t), [t](const Coverage& v) { return v.dtype == t; });
  os << " |";
  put("bshd", [](const Coverage& v) { return v.layout == Layout::bshd; });
  put("bhsd", [](const Coverage& v) { return v.layout == Layout::bhsd; });
  put("padded", [](const Coverage& v) { return v.layout == Layout::padded; });
  os << " |";
  for (MaskKind m : {MaskKind::none, MaskKind::causal, MaskKind::window, MaskKind::causal_window})
    put(mask_kind_name(m), [m](const Coverage& v) { return v.mask == m; });
  os << "\n ";
  put("alibi", [](const Coverage& v) { return v.alibi; });
  put("softcap", [](const Coverage& v) { return v.softcap; });
  put("varlen", [](const Coverage& v) { return v.varlen; });
  put("seqlens_k", [](const Coverage& v) { return v.seqlens_k; });
  put("gqa", [](const Coverage& v) { return v.gqa; });
  put("gpu-dim", [](const Coverage& v) { return v.gpu_dim; });
  os << "\n ";
  put("row sees >=2 keys (grad != 0)", [](const Coverage& v) { return v.multi_key_row; });
  put("| most rows do", [](const Coverage& v) { return v.most_rows_multi; });
  put("| empty rows", [](const Coverage& v) { return v.empty_rows; });
  put("| all rows empty", [](const Coverage& v) { return v.all_rows_empty; });
  put("| empty sequence", [](const Coverage& v) { return v.empty_sequence; });
  os << "\n ";
  put("multi-tile 64x128", [](const Coverage& v) { return v.multi_tile; });
  put("(with partial", [](const Coverage& v) { return v.partial_tiles; });
  os << ") |";
  put("multi-tile 3x5", [](const Coverage& v) { return v.multi_tile_tiny; });
  put("(with partial", [](const Coverage& v) { return v.partial_tiles_tiny; });
  os << ") | mean work " << static_cast<int64_t>(mean_work());
  return os.str();
}

}  // namespace props
