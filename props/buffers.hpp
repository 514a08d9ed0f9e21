// Guarded host buffers: every allocation carries canary bytes before and after its payload, and
// every byte of the payload that is not an element of the buffer's view (padding of strided
// layouts) holds the canary too. After a call, check_outside_view() proves that nothing was
// written outside the view, and snapshots prove inputs were not modified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/types.hpp"
#include "props/case.hpp"

namespace props {

// Canary byte written around and between view elements.
constexpr unsigned char kCanary = 0xA5;
// Canary bytes before and after every payload.
constexpr size_t kGuardBytes = 64;

class Buffer {
 public:
  Buffer() = default;
  // Allocates `bytes` of payload preceded by kGuardBytes + `shift` canary bytes (shift moves the
  // payload off its natural alignment) and followed by kGuardBytes; every byte starts as canary.
  Buffer(std::string name, size_t bytes, size_t shift);
  // Every Buffer holding an allocation is listed by live_allocations() until it is destroyed.
  Buffer(const Buffer& other);
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(const Buffer& other);
  Buffer& operator=(Buffer&& other) noexcept;
  ~Buffer();

  unsigned char* data() { return storage_.data() + begin_; }
  const unsigned char* data() const { return storage_.data() + begin_; }
  size_t bytes() const { return bytes_; }
  size_t storage_size() const { return storage_.size(); }  // payload, shift and both guard zones
  const std::string& name() const { return name_; }

  // Marks payload bytes [offset, offset + n) as part of the view (may be written by an output call).
  void cover(size_t offset, size_t n);
  // Returns "" if every byte outside the covered view still holds the canary, else a description
  // of the first damaged byte.
  std::string check_outside_view() const;

  // Records the whole allocation; unchanged_since_snapshot() returns "" if it is bit-identical.
  void snapshot();
  std::string unchanged_since_snapshot() const;

 private:
  std::string name_;
  std::vector<unsigned char> storage_;
  std::vector<unsigned char> covered_;  // per payload byte: 1 inside the view
  std::vector<unsigned char> snapshot_;
  size_t begin_ = 0, bytes_ = 0;
};

// One live Buffer's allocation: [begin, end) including the guard zones, payload bytes at payload.
struct Allocation {
  const unsigned char *begin, *end, *payload;
  size_t bytes;
  std::string name;
};
// Returns the allocations of every live Buffer (for a runner whose implementation can check its
// own accesses against the call's buffers: the GPU emulator's memcheck, gpu/emu/props_emu.cpp).
std::vector<Allocation> live_allocations();

// A guarded strided tensor [batch, seq, heads, dim] in one of the case layouts.
struct GuardedTensor {
  Buffer buffer;
  flashattn::Tensor view;
};

// Returns a tensor whose view has the strides of `layout` and whose base pointer is moved by one
// element when `offset` is set. All view elements start as canary bytes.
GuardedTensor make_tensor(const std::string& name, flashattn::DType dtype, int64_t batch, int64_t seq, int64_t heads,
                          int64_t dim, Layout layout, bool offset);

// Returns the largest element offset of view t plus one (0 for an empty view).
int64_t span_elems(const flashattn::ConstTensor& t);

// Returns the layout (strides; data null) of a copy of view t that the GPU backend accepts: the same
// axis order (by stride), a gap of 16 bytes after an axis wherever t has a gap there, and every
// stride a multiple of 16 bytes. The GPU runners (the real one and the emulated one) copy each
// tensor of a call into this layout, so every case's layout runs, with aligned rows as the GPU
// requires (flashattn::gpu rejects unaligned rows with an error).
flashattn::Tensor gpu_layout(const flashattn::ConstTensor& t);

// Writes NaN into every view element (outputs are poisoned before each call).
void poison(GuardedTensor& t);

// Returns the view's elements as doubles in dense [batch, seq, heads, dim] order.
std::vector<double> read_dense(const flashattn::ConstTensor& t);

// Returns whether two value vectors hold the same bit patterns (NaN equals NaN, −0 differs from 0).
bool same_bits(const std::vector<double>& x, const std::vector<double>& y);

// Writes dense [batch, seq, heads, dim] values into the view, rounded to its dtype.
void write_dense(const flashattn::Tensor& t, const std::vector<double>& values);

// A guarded contiguous array of `count` elements of T (lse, seqlens, cu_seqlens, ALiBi slopes).
template <class T>
Buffer make_array(const std::string& name, size_t count) {
  Buffer b(name, count * sizeof(T), 0);
  b.cover(0, count * sizeof(T));
  return b;
}

}  // namespace props
