// A reader that turns fuzzer bytes into decoding choices. Reads front to back; once the bytes run
// out every read returns 0, so any input (including the empty one) decodes to some case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace flashattn::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // Returns the next sizeof(T) bytes as a T (zero-padded past the end).
  template <class T>
  T take() {
    unsigned char raw[sizeof(T)] = {};
    for (size_t i = 0; i < sizeof(T); ++i) {
      if (pos_ < size_) raw[i] = data_[pos_++];
      else ++padded_;
    }
    T r;
    std::memcpy(&r, raw, sizeof(T));
    return r;
  }

  // Returns a value in [0, n) (n > 0) from one byte.
  unsigned pick(unsigned n) { return take<uint8_t>() % n; }

  // Returns true with probability about k/256.
  bool chance(unsigned k) { return take<uint8_t>() < k; }

  bool empty() const { return pos_ >= size_; }
  // Returns the number of bytes read so far (reads past the end count too).
  size_t position() const { return pos_ + padded_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t padded_ = 0;  // bytes read past the end (zeros)
};

}  // namespace flashattn::fuzz
