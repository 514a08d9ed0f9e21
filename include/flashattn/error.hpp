// flashattn::Error: the one exception type for bad input.
#pragma once

#include <stdexcept>
#include <string>

namespace flashattn {

// Thrown before anything is written when an argument is invalid. what() names the argument and the
// offending values, e.g. "k.heads (3) must divide q.heads (8)".
class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& message) : std::invalid_argument("flashattn: " + message) {}
};

}  // namespace flashattn
