// Guarded host buffers (see buffers.hpp).
#include "props/buffers.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "flashattn/convert.hpp"

namespace props {
namespace {

using flashattn::DType;
using flashattn::Tensor;

// Padding (in elements) that the padded layout leaves after each head row, seq row and batch.
// Odd counts so padded rows also break every natural alignment.
constexpr int64_t kPadHead = 3, kPadSeq = 5, kPadBatch = 7;

template <class F>
void for_each_element(const flashattn::ConstTensor& t, F f) {
  int64_t dense = 0;
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t x = 0; x < t.dim; ++x) f(t.offset(b, s, h) + x, dense++);
}

// The live Buffers by their storage (which a move keeps).
struct Registry {
  std::mutex mutex;
  std::map<const unsigned char*, const Buffer*> owners;
};
Registry& registry() {
  static Registry r;
  return r;
}
void enlist(const unsigned char* storage, const Buffer* owner) {
  if (storage == nullptr) return;
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.owners[storage] = owner;
}
void delist(const unsigned char* storage) {
  if (storage == nullptr) return;
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.owners.erase(storage);
}

}  // namespace

Buffer::Buffer(std::string name, size_t bytes, size_t shift)
    : name_(std::move(name)),
      storage_(2 * kGuardBytes + shift + bytes, kCanary),
      covered_(bytes, 0),
      begin_(kGuardBytes + shift),
      bytes_(bytes) {
  enlist(storage_.data(), this);
}

Buffer::Buffer(const Buffer& other)
    : name_(other.name_),
      storage_(other.storage_),
      covered_(other.covered_),
      snapshot_(other.snapshot_),
      begin_(other.begin_),
      bytes_(other.bytes_) {
  enlist(storage_.data(), this);
}

Buffer::Buffer(Buffer&& other) noexcept
    : name_(std::move(other.name_)),
      storage_(std::move(other.storage_)),
      covered_(std::move(other.covered_)),
      snapshot_(std::move(other.snapshot_)),
      begin_(other.begin_),
      bytes_(other.bytes_) {
  other.storage_.clear();
  enlist(storage_.data(), this);
}

Buffer& Buffer::operator=(const Buffer& other) {
  if (this != &other) *this = Buffer(other);
  return *this;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this == &other) return *this;
  delist(storage_.data());
  name_ = std::move(other.name_);
  storage_ = std::move(other.storage_);
  covered_ = std::move(other.covered_);
  snapshot_ = std::move(other.snapshot_);
  begin_ = other.begin_;
  bytes_ = other.bytes_;
  other.storage_.clear();
  enlist(storage_.data(), this);
  return *this;
}

Buffer::~Buffer() { delist(storage_.data()); }

std::vector<Allocation> live_allocations() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<Allocation> all;
  for (const auto& [storage, b] : r.owners)
    all.push_back(Allocation{storage, storage + b->storage_size(), b->data(), b->bytes(), b->name()});
  return all;
}

void Buffer::cover(size_t offset, size_t n) { std::fill_n(covered_.begin() + offset, n, 1); }

std::string Buffer::check_outside_view() const {
  for (size_t i = 0; i < storage_.size(); ++i) {
    const bool in_payload = i >= begin_ && i < begin_ + bytes_;
    if (in_payload && covered_[i - begin_]) continue;
    if (storage_[i] != kCanary) {
      std::ostringstream os;
      os << name_ << ": byte " << (static_cast<int64_t>(i) - static_cast<int64_t>(begin_))
         << " relative to the data pointer (" << (in_payload ? "padding inside the view's span" : "guard zone")
         << ", payload " << bytes_ << " bytes) was overwritten";
      return os.str();
    }
  }
  return "";
}

void Buffer::snapshot() { snapshot_ = storage_; }

std::string Buffer::unchanged_since_snapshot() const {
  if (snapshot_ == storage_) return "";
  for (size_t i = 0; i < storage_.size(); ++i)
    if (storage_[i] != snapshot_[i]) {
      std::ostringstream os;
      os << name_ << " (an input) was modified at byte " << (static_cast<int64_t>(i) - static_cast<int64_t>(begin_))
         << " relative to its data pointer";
      return os.str();
    }
  return "";
}

int64_t span_elems(const flashattn::ConstTensor& t) {
  if (t.batch == 0 || t.seq == 0 || t.heads == 0 || t.dim == 0) return 0;
  return (t.batch - 1) * t.stride_batch + (t.seq - 1) * t.stride_seq + (t.heads - 1) * t.stride_head + t.dim;
}

flashattn::Tensor gpu_layout(const flashattn::ConstTensor& h) {
  auto round_up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  flashattn::Tensor d{nullptr, h.dtype, h.batch, h.seq, h.heads, h.dim, h.stride_batch, h.stride_seq, h.stride_head};
  const int64_t per = 16 / static_cast<int64_t>(flashattn::dtype_size(h.dtype));
  struct Axis {
    int64_t size, host_stride;
    int64_t* stride;
  };
  Axis axes[3] = {{h.heads, h.stride_head, &d.stride_head},
                  {h.seq, h.stride_seq, &d.stride_seq},
                  {h.batch, h.stride_batch, &d.stride_batch}};
  std::stable_sort(std::begin(axes), std::end(axes),
                   [](const Axis& a, const Axis& b) { return a.host_stride < b.host_stride; });
  int64_t host_span = h.dim, span = h.dim;  // elements covered by the faster axes
  for (Axis& a : axes) {
    const bool gap = a.host_stride > host_span;
    *a.stride = round_up(span + (gap ? per : 0), per);
    host_span = std::max(host_span, a.host_stride * (a.size - 1) + host_span);
    span = *a.stride * (a.size > 0 ? a.size - 1 : 0) + span;
  }
  return d;
}

GuardedTensor make_tensor(const std::string& name, DType dtype, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                          Layout layout, bool offset) {
  Tensor v;
  switch (layout) {
    case Layout::bshd: v = flashattn::bshd(nullptr, dtype, batch, seq, heads, dim); break;
    case Layout::bhsd: v = flashattn::bhsd(nullptr, dtype, batch, seq, heads, dim); break;
    case Layout::padded: {
      const int64_t sh = dim + kPadHead, ss = heads * sh + kPadSeq, sb = seq * ss + kPadBatch;
      v = Tensor{nullptr, dtype, batch, seq, heads, dim, sb, ss, sh};
      break;
    }
  }
  const size_t esize = flashattn::dtype_size(dtype);
  GuardedTensor t{Buffer(name, static_cast<size_t>(span_elems(v)) * esize, offset ? esize : 0), v};
  t.view.data = t.buffer.data();
  for_each_element(t.view, [&](int64_t off, int64_t) { t.buffer.cover(static_cast<size_t>(off) * esize, esize); });
  return t;
}

void poison(GuardedTensor& t) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for_each_element(t.view, [&](int64_t off, int64_t) { flashattn::store_from_float(t.view.data, t.view.dtype, off, nan); });
}

std::vector<double> read_dense(const flashattn::ConstTensor& t) {
  std::vector<double> r(static_cast<size_t>(t.batch * t.seq * t.heads * t.dim));
  for_each_element(t, [&](int64_t off, int64_t i) { r[i] = flashattn::load_as_float(t.data, t.dtype, off); });
  return r;
}

void write_dense(const Tensor& t, const std::vector<double>& values) {
  for_each_element(t, [&](int64_t off, int64_t i) {
    flashattn::store_from_float(t.data, t.dtype, off, static_cast<float>(values[i]));
  });
}

bool same_bits(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
}

}  // namespace props
