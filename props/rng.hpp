// props::Rng: the deterministic value source of the property tests.
//
// mt19937_64 is specified bit-exactly by the C++ standard, and the normal variates come from our
// own Box-Muller (std::normal_distribution differs between standard libraries), so a seed means
// the same values everywhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace props {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Returns a uniform double in (0, 1).
  double uniform() { return (static_cast<double>(gen_() >> 11) + 0.5) * 0x1p-53; }
  // Returns a standard normal variate.
  double normal() { return std::sqrt(-2 * std::log(uniform())) * std::cos(kTwoPi * uniform()); }
  // Returns an integer in [0, n) (n > 0).
  int64_t below(int64_t n) { return static_cast<int64_t>(gen_() % static_cast<uint64_t>(n)); }

 private:
  static constexpr double kTwoPi = 6.283185307179586;
  std::mt19937_64 gen_;
};

}  // namespace props
