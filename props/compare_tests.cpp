// Examples pinning the tolerance rule of compare.hpp (exact inputs, exact expectations).
#include <cmath>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "flashattn/convert.hpp"
#include "props/compare.hpp"

namespace props {

TEST_CASE("compare: the bound is c times the same-precision error plus the floor") {
  const std::vector<double> oracle = {1.0, -2.0}, same = {1.0, -2.5};  // same-precision error 0.5
  const double floor = kFloorUnits * flashattn::unit_roundoff(flashattn::DType::f16) * 2.0;
  const Comparison inside = compare({1.0, -3.0}, oracle, same, kOutFactor, flashattn::DType::f16);
  CHECK(inside.passed);
  CHECK(inside.same_error == 0.5);
  CHECK(inside.bound == doctest::Approx(kOutFactor * 0.5 + floor));
  const Comparison outside = compare({1.0, -3.1}, oracle, same, kOutFactor, flashattn::DType::f16);
  CHECK_FALSE(outside.passed);
  CHECK(outside.worst == 1);
  // Exact oracle agreement of the same-precision result leaves only the floor.
  CHECK(compare({1.0 + 0.5 * floor, -2.0}, oracle, oracle, kOutFactor, flashattn::DType::f16).passed);
  CHECK_FALSE(compare({1.0 + 2 * floor, -2.0}, oracle, oracle, kOutFactor, flashattn::DType::f16).passed);
}

TEST_CASE("compare: the floor scales with the term magnitude when given, and never drops below subnormal steps") {
  const std::vector<double> oracle = {0.5, -0.25};
  const double unit = kFloorUnits * flashattn::unit_roundoff(flashattn::DType::f32);
  CHECK(compare(oracle, oracle, oracle, kOutFactor, flashattn::DType::f32).bound == unit * 0.5);
  CHECK(compare(oracle, oracle, oracle, kOutFactor, flashattn::DType::f32, 8.0).bound == unit * 8.0);
  CHECK(compare(oracle, oracle, oracle, kOutFactor, flashattn::DType::f32, 0.1).bound == unit * 0.5);
  // An output of zeros still allows kFloorUnits steps of the dtype's smallest subnormal.
  const std::vector<double> zeros = {0.0, 0.0};
  for (flashattn::DType t : {flashattn::DType::f32, flashattn::DType::f16, flashattn::DType::bf16}) {
    const double step = flashattn::smallest_spacing(t);
    CHECK(compare(zeros, zeros, zeros, kOutFactor, t).bound == doctest::Approx(kFloorUnits * step));
    CHECK(compare({kFloorUnits * step, 0.0}, zeros, zeros, kOutFactor, t).passed);
    CHECK_FALSE(compare({2 * kFloorUnits * step, 0.0}, zeros, zeros, kOutFactor, t).passed);
  }
}

TEST_CASE("compare: non-finite values where the oracle is finite always fail; -inf must match") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> oracle = {0.5, -inf}, loose = {100.0, -inf};  // huge same-precision error
  CHECK_FALSE(compare({nan, -inf}, oracle, loose, kOutFactor, flashattn::DType::bf16).passed);
  CHECK_FALSE(compare({inf, -inf}, oracle, loose, kOutFactor, flashattn::DType::bf16).passed);
  CHECK_FALSE(compare_lse({0.5, 0.0}, oracle, oracle).passed);
  CHECK_FALSE(compare_lse({0.5, nan}, oracle, oracle).passed);
  CHECK(compare_lse({0.5, -inf}, oracle, oracle).passed);
}

}  // namespace props
