// The generator's shares, pinned: gen_case() is deterministic given RapidCheck's random state, so
// a fixed seed and count give fixed shares and these floors are not flaky. They keep the weighting
// honest: most cases must exercise what the properties are about (several visible keys per row,
// several tiles, partial tiles), and every feature must stay reachable.
#include <doctest/doctest.h>

#include "props/case.hpp"
#include "props/check.hpp"
#include "props/coverage.hpp"

namespace props {
namespace {

constexpr int kCoverageCases = 2000;

// Returns the coverage of `n` cases of gen_case(space) drawn from a fixed seed, at the sizes a
// RapidCheck run passes (0..100 evenly; gen_case ignores them, other generators may not).
CoverageTally sample(int n, const CaseSpace& space = {}) {
  CoverageTally t;
  rc::Random random(kDefaultSeed);
  const rc::Gen<Case> gen = gen_case(space);
  for (int i = 0; i < n; ++i) t.add(gen(random.split(), i % (rc::kNominalSize + 1)).value());
  return t;
}

}  // namespace

TEST_CASE("coverage: classification of hand-made cases") {
  Case c;  // b=1, one row, one key
  Coverage v = coverage(c);
  CHECK(v.degenerate());
  CHECK_FALSE(v.empty_rows);
  CHECK_FALSE(v.multi_tile_tiny);
  c.seqlen_q = 4;
  c.seqlen_k = 6;
  v = coverage(c);
  CHECK(v.multi_key_row);
  CHECK(v.most_rows_multi);
  CHECK(v.multi_tile_tiny);     // 2 × 2 tiles of 3 × 5
  CHECK(v.partial_tiles_tiny);  // 4 = 3 + 1
  CHECK_FALSE(v.multi_tile);
  c.causal = true;  // diag = 2: row 0 sees keys 0..2
  v = coverage(c);
  CHECK(v.mask == MaskKind::causal);
  CHECK_FALSE(v.empty_rows);
  c.seqlen_q = 8;  // diag = -2: rows 0, 1 see nothing
  v = coverage(c);
  CHECK(v.empty_rows);
  CHECK_FALSE(v.all_rows_empty);
  c.key_lengths = {0};  // no key at all
  v = coverage(c);
  CHECK(v.all_rows_empty);
  CHECK(v.empty_sequence);
  CHECK(v.degenerate());
  c = Case{};
  c.seqlen_q = 65;
  c.seqlen_k = 128;
  v = coverage(c);
  CHECK(v.multi_tile);  // two query blocks of 64
  CHECK(v.partial_tiles);
  c.seqlen_q = 64;
  CHECK_FALSE(coverage(c).multi_tile);
  c.window_left = c.window_right = 0;  // one key per row
  c.seqlen_k = 64;
  CHECK(coverage(c).degenerate());
}

TEST_CASE("coverage: the generator's shares stay above their documented floors") {
  const CoverageTally t = sample(kCoverageCases);
  MESSAGE(t.summary());
  // What the properties are about.
  CHECK(t.share([](const Coverage& v) { return v.multi_key_row; }) >= 0.80);
  CHECK(t.share([](const Coverage& v) { return v.most_rows_multi; }) >= 0.70);
  CHECK(t.share([](const Coverage& v) { return v.multi_tile_tiny; }) >= 0.80);
  CHECK(t.share([](const Coverage& v) { return v.partial_tiles_tiny; }) >= 0.70);
  CHECK(t.share([](const Coverage& v) { return v.multi_tile; }) >= 0.20);
  CHECK(t.share([](const Coverage& v) { return v.partial_tiles; }) >= 0.18);
  // The degenerate ones, at a deliberate share.
  const double degenerate = t.share([](const Coverage& v) { return v.degenerate(); });
  CHECK(degenerate >= 0.08);
  CHECK(degenerate <= 0.20);
  CHECK(t.share([](const Coverage& v) { return v.all_rows_empty; }) >= 0.01);
  CHECK(t.share([](const Coverage& v) { return v.empty_rows; }) >= 0.10);
  CHECK(t.share([](const Coverage& v) { return v.empty_sequence; }) >= 0.03);
  // Every feature reachable at a useful share.
  for (flashattn::DType d : {flashattn::DType::f32, flashattn::DType::f16, flashattn::DType::bf16})
    CHECK(t.share([d](const Coverage& v) { return v.dtype == d; }) >= 0.2);
  for (Layout l : {Layout::bshd, Layout::bhsd, Layout::padded})
    CHECK(t.share([l](const Coverage& v) { return v.layout == l; }) >= 0.2);
  for (MaskKind m : {MaskKind::none, MaskKind::causal, MaskKind::window, MaskKind::causal_window})
    CHECK(t.share([m](const Coverage& v) { return v.mask == m; }) >= 0.08);
  for (Values x : {Values::normal, Values::large, Values::ties, Values::zero_v, Values::heavy})
    CHECK(t.share([x](const Coverage& v) { return v.values == x; }) >= 0.08);
  CHECK(t.share([](const Coverage& v) { return v.alibi; }) >= 0.2);
  CHECK(t.share([](const Coverage& v) { return v.softcap; }) >= 0.15);
  CHECK(t.share([](const Coverage& v) { return v.varlen; }) >= 0.15);
  CHECK(t.share([](const Coverage& v) { return v.varlen && v.empty_sequence; }) >= 0.02);
  CHECK(t.share([](const Coverage& v) { return v.seqlens_k; }) >= 0.15);
  CHECK(t.share([](const Coverage& v) { return v.gqa; }) >= 0.25);
  CHECK(t.share([](const Coverage& v) { return v.custom_scale; }) >= 0.15);
  CHECK(t.share([](const Coverage& v) { return v.offset; }) >= 0.3);
  CHECK(t.share([](const Coverage& v) { return v.gpu_dim; }) >= 0.3);
  for (int64_t d : {32, 64, 96, 128, 256}) CHECK(t.share([d](const Coverage& v) { return v.dim == d; }) >= 0.02);
  CHECK(t.share([](const Coverage& v) { return v.gpu_dim && v.multi_key_row && v.multi_tile_tiny; }) >= 0.2);
  // The oracle's cost per case (CI time).
  CHECK(t.mean_work() <= 100000);
}

}  // namespace props

