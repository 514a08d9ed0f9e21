// The mask definition (flashattn/mask.hpp) on hand-worked pictures, against the formula of
// docs/semantics.md for all small cases, and the tile classifier and key-range helpers checked
// exhaustively against per-element visibility.
#include <cstdint>
#include <limits>
#include <string>

#include <doctest/doctest.h>

#include "flashattn/mask.hpp"

using flashattn::Mask;
using flashattn::TileKind;

namespace {

constexpr int64_t kMaxLen = 7;              // sequence lengths 0..7 in the exhaustive checks
constexpr int64_t kPastEnd = 3;             // key tiles may extend this far past seqlen_k
constexpr int64_t kWindows[] = {-1, 0, 1, 2};

// Returns the mask as rows of '1' (visible) and '0', separated by '/': row i is the i-th group.
std::string picture(const Mask& m) {
  std::string r;
  for (int64_t i = 0; i < m.seqlen_q; ++i) {
    if (i) r += '/';
    for (int64_t j = 0; j < m.seqlen_k; ++j) r += m.visible(i, j) ? '1' : '0';
  }
  return r;
}

// The visibility formula written out independently of Mask's interval helpers.
bool visible_formula(int64_t nq, int64_t nk, int64_t left, int64_t right, int64_t offset, int64_t i, int64_t j) {
  const int64_t center = i + nk - nq + offset;
  if (j < 0 || j >= nk) return false;
  if (left >= 0 && j < center - left) return false;
  if (right >= 0 && j > center + right) return false;
  return true;
}

// Calls f(mask) for every small mask: lengths 0..kMaxLen, windows in kWindows, causal or not.
template <class F>
void for_all_small_masks(F f) {
  for (int64_t nq = 0; nq <= kMaxLen; ++nq)
    for (int64_t nk = 0; nk <= kMaxLen; ++nk)
      for (int64_t left : kWindows)
        for (int64_t right : kWindows)
          for (bool causal : {false, true})
            for (int64_t offset : {0, -3, 2, 9}) f(Mask::make(nq, nk, causal, left, right, offset));
}

std::string describe(const Mask& m) {
  return "Nq=" + std::to_string(m.seqlen_q) + " Nk=" + std::to_string(m.seqlen_k) + " left=" +
         std::to_string(m.left) + " right=" + std::to_string(m.right) + " offset=" + std::to_string(m.offset);
}

}  // namespace

TEST_CASE("mask: causal is bottom-right aligned") {
  CHECK(picture(Mask::make(3, 3, true, -1, -1)) == "100/110/111");
  CHECK(picture(Mask::make(2, 4, true, -1, -1)) == "1110/1111");         // Nq < Nk: rows shifted right
  CHECK(picture(Mask::make(1, 5, true, -1, -1)) == "11111");             // decode: the whole cache
  CHECK(picture(Mask::make(4, 2, true, -1, -1)) == "00/00/10/11");       // Nq > Nk: leading empty rows
  const Mask m = Mask::make(4, 2, true, -1, -1);
  CHECK(m.row_empty(0));
  CHECK(m.row_empty(1));
  CHECK_FALSE(m.row_empty(2));
  CHECK(m.diag() == -2);
}

TEST_CASE("mask: sliding windows") {
  CHECK(picture(Mask::make(4, 4, false, 1, 0)) == "1000/1100/0110/0011");
  CHECK(picture(Mask::make(3, 5, false, 1, 1)) == "01110/00111/00011");  // centers at keys 2, 3, 4
  CHECK(picture(Mask::make(3, 3, false, 0, 0)) == "100/010/001");        // the diagonal only
  CHECK(picture(Mask::make(3, 3, false, 0, -1)) == "111/011/001");       // left-bounded only
  CHECK(picture(Mask::make(2, 2, false, -1, -1)) == "11/11");            // no mask
  // diagonal_offset moves the aligned key (docs/semantics.md's examples)
  CHECK(picture(Mask::make(3, 3, true, -1, -1, -1)) == "000/100/110");
  CHECK(picture(Mask::make(3, 3, true, -1, -1, 2)) == "111/111/111");
  CHECK(picture(Mask::make(2, 4, false, 0, 0, 1)) == "0001/0000");
  CHECK(Mask::make(2, 4, false, 0, 0, 1).diag() == 3);
  CHECK(picture(Mask::make(2, 5, false, 0, 1)) == "00011/00001");        // right edge clipped at Nk
  CHECK(picture(Mask::make(3, 2, false, 0, 0)) == "00/10/01");           // Nq > Nk with a window
}

TEST_CASE("mask: causal combined with a window keeps the tighter right bound") {
  CHECK(picture(Mask::make(4, 4, true, 2, 5)) == "1000/1100/1110/0111");
  CHECK(Mask::make(4, 4, true, 2, 5).right == 0);
  CHECK(picture(Mask::make(4, 4, true, -1, -1)) == picture(Mask::make(4, 4, false, -1, 0)));
  CHECK(picture(Mask::make(2, 3, true, 0, -1)) == "010/001");
}

TEST_CASE("mask: no keys") {
  const Mask m = Mask::make(2, 0, true, -1, -1);
  CHECK(picture(m) == "/");
  for (int64_t i = 0; i < 2; ++i) {
    CHECK(m.row_empty(i));
    CHECK(m.key_begin(i) == 0);
    CHECK(m.key_end(i) == 0);
  }
  CHECK(m.classify(0, 2, 0, 4) == TileKind::empty);
  CHECK(Mask::make(2, 0, false, -1, -1).row_empty(1));
}

TEST_CASE("mask: visible equals the formula and rows are non-decreasing intervals") {
  for_all_small_masks([](const Mask& m) {
    const int64_t nq = m.seqlen_q, nk = m.seqlen_k;
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t b = m.key_begin(i), e = m.key_end(i);
      REQUIRE_MESSAGE((0 <= b && b <= nk && 0 <= e && e <= nk), describe(m));
      if (i > 0) REQUIRE_MESSAGE((m.key_begin(i - 1) <= b && m.key_end(i - 1) <= e), describe(m) << " row " << i);
      bool any = false;
      for (int64_t j = -1; j <= nk + 1; ++j) {
        const bool want = visible_formula(nq, nk, m.left, m.right, m.offset, i, j);
        REQUIRE_MESSAGE(m.visible(i, j) == want, describe(m) << " row " << i << " key " << j);
        REQUIRE(want == (b <= j && j < e));
        any = any || want;
      }
      REQUIRE(m.row_empty(i) == !any);
    }
  });
}

TEST_CASE("mask: row_begin/row_end are exactly the rows that see each key") {
  for_all_small_masks([](const Mask& m) {
    for (int64_t j = 0; j < m.seqlen_k + kPastEnd; ++j) {
      const int64_t b = m.row_begin(j), e = m.row_end(j);
      REQUIRE(0 <= b);
      REQUIRE(b <= e);
      REQUIRE(e <= m.seqlen_q);
      for (int64_t i = 0; i < m.seqlen_q; ++i) {
        INFO(describe(m), " i=", i, " j=", j);
        REQUIRE(m.visible(i, j) == (b <= i && i < e));
      }
    }
  });
}

TEST_CASE("mask: classify is exact on every tile of every small mask") {
  int64_t tiles = 0, full = 0, empty = 0, partial = 0;
  for_all_small_masks([&](const Mask& m) {
    for (int64_t r0 = 0; r0 < m.seqlen_q; ++r0)
      for (int64_t r1 = r0 + 1; r1 <= m.seqlen_q; ++r1)
        for (int64_t c0 = 0; c0 < m.seqlen_k + kPastEnd; ++c0)
          for (int64_t c1 = c0 + 1; c1 <= m.seqlen_k + kPastEnd; ++c1) {
            int64_t seen = 0;
            for (int64_t i = r0; i < r1; ++i)
              for (int64_t j = c0; j < c1; ++j) seen += m.visible(i, j);
            const int64_t all = (r1 - r0) * (c1 - c0);
            const TileKind want = seen == 0 ? TileKind::empty : seen == all ? TileKind::full : TileKind::partial;
            const TileKind got = m.classify(r0, r1, c0, c1);
            REQUIRE_MESSAGE(got == want, describe(m) << " rows [" << r0 << "," << r1 << ") keys [" << c0 << ","
                                                      << c1 << ") got " << int(got) << " want " << int(want));
            ++tiles;
            full += want == TileKind::full;
            empty += want == TileKind::empty;
            partial += want == TileKind::partial;
          }
  });
  // The sweep must reach every kind many times, or it proves little.
  CHECK(tiles > 100000);
  CHECK(full > 10000);
  CHECK(empty > 10000);
  CHECK(partial > 10000);
}

TEST_CASE("mask: rows_key and full_key ranges bound the visible and the fully visible keys") {
  for_all_small_masks([](const Mask& m) {
    for (int64_t r0 = 0; r0 < m.seqlen_q; ++r0)
      for (int64_t r1 = r0 + 1; r1 <= m.seqlen_q; ++r1) {
        const int64_t rb = m.rows_key_begin(r0), re = m.rows_key_end(r1);
        const int64_t fb = m.full_key_begin(r1), fe = m.full_key_end(r0);
        int64_t lo = m.seqlen_k, hi = 0;  // the union of visible keys is within [lo, hi)
        for (int64_t i = r0; i < r1; ++i)
          for (int64_t j = 0; j < m.seqlen_k; ++j) {
            if (m.visible(i, j)) {
              REQUIRE_MESSAGE((rb <= j && j < re), describe(m) << " rows [" << r0 << "," << r1 << ") key " << j);
              lo = lo < j ? lo : j;
              hi = hi > j + 1 ? hi : j + 1;
            }
            if (fb <= j && j < fe) REQUIRE_MESSAGE(m.visible(i, j), describe(m) << " row " << i << " key " << j);
          }
        // The full range is the largest: the key just outside it is invisible to some row.
        if (fb < fe) {
          bool left_partial = fb == 0, right_partial = fe == m.seqlen_k;
          for (int64_t i = r0; i < r1; ++i) {
            left_partial = left_partial || !m.visible(i, fb - 1);
            right_partial = right_partial || !m.visible(i, fe);
          }
          REQUIRE_MESSAGE((left_partial && right_partial), describe(m));
        }
        // The visited range is tight when some key is visible.
        if (lo < hi) REQUIRE_MESSAGE((rb == lo && re == hi), describe(m) << " rows [" << r0 << "," << r1 << ")");
      }
  });
}

TEST_CASE("mask: windows wider than the sequences equal unbounded ones, without overflow") {
  // The fuzzer found window_left = INT64_MAX overflowing i + diag - left (UBSan); make() bounds it.
  const int64_t huge = std::numeric_limits<int64_t>::max();
  for (bool causal : {false, true}) {
    const Mask wide = Mask::make(5, 9, causal, huge, huge);
    const Mask open = Mask::make(5, 9, causal, -1, -1);
    for (int64_t i = 0; i < 5; ++i) {
      CHECK(wide.key_begin(i) == open.key_begin(i));
      CHECK(wide.key_end(i) == open.key_end(i));
      for (int64_t c0 = 0; c0 < 9; ++c0)
        for (int64_t c1 = c0 + 1; c1 <= 12; ++c1) CHECK(wide.classify(0, i + 1, c0, c1) == open.classify(0, i + 1, c0, c1));
    }
  }
}
