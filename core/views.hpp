// Checks of tensor views shared by validate() and merge(). Internal to core/.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "flashattn/error.hpp"
#include "flashattn/types.hpp"

namespace flashattn::detail {

constexpr int64_t kMaxDim = int64_t{1} << 31;  // any single size must stay below 2^31

// Throws flashattn::Error with the concatenated parts as message.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

// Returns a*b (a+b), or fails naming `what` if it overflows int64.
int64_t mul_checked(int64_t a, int64_t b, const std::string& what);
int64_t add_checked(int64_t a, int64_t b, const std::string& what);

// Returns the largest element offset of t, or -1 if t has no element. Fails on int64 overflow.
int64_t max_offset(const ConstTensor& t, const std::string& name);

// Checks one tensor view on its own: dtype, sizes (>= 0, < 2^31, heads and dim >= 1), strides
// (>= 0, no overflow), pointer (non-null when there are elements, aligned to the element size).
// k and v of a forward call may also have a quantized dtype (`quantized_ok`).
void check_tensor(const ConstTensor& t, const std::string& name, bool quantized_ok = false);

// The parts of check_tensor, for views whose heads or dim may be 0 (bias, dbias): dtype, sizes in
// [0, 2^31) and strides >= 0; then the pointer (non-null with elements, aligned).
void check_fields(const ConstTensor& t, const std::string& name, bool quantized_ok = false);
void check_pointer(const ConstTensor& t, const std::string& name);

// Checks that distinct indices of an output view address distinct elements.
void check_no_self_overlap(const ConstTensor& t, const std::string& name);

// Bytes [begin, end) a view or array can touch; empty when begin == end.
struct Span {
  uintptr_t begin = 0, end = 0;
};
Span span_of(const ConstTensor& t, const std::string& name);
Span span_of(const void* p, int64_t bytes);
bool overlaps(Span a, Span b);

// Returns whether two checked, non-self-overlapping views of one dtype may address a common
// element. Exact for views with equal strides whose axes nest (each stride covers the faster axes),
// which includes interleaved views of one packed buffer (e.g. dq, dk, dv inside a dqkv tensor);
// conservative (true) for other layouts whose byte ranges meet.
bool may_share_elements(const ConstTensor& a, const std::string& a_name, const ConstTensor& b, const std::string& b_name);

}  // namespace flashattn::detail
