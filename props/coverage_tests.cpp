// props::coverage on hand-made cases.
#include <doctest/doctest.h>

#include "flashattn/mask.hpp"
#include "props/case.hpp"
#include "props/check.hpp"
#include "props/coverage.hpp"

namespace props {

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

}  // namespace props

