// malloc interposition for the alloc meter (glibc). See alloc_meter.hpp.
#include "alloc_meter.hpp"

#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_start{0};

void on_alloc(void* p) {
  if (!p) return;
  const int64_t now = g_live.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed) +
                      static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void on_free(void* p) {
  if (p) g_live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
}

}  // namespace

extern "C" {

void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  on_alloc(p);
  return p;
}

void* calloc(size_t n, size_t size) {
  void* p = __libc_calloc(n, size);
  on_alloc(p);
  return p;
}

void* realloc(void* old, size_t n) {
  on_free(old);
  void* p = __libc_realloc(old, n);
  if (p) {
    on_alloc(p);
  } else if (old && n != 0) {
    on_alloc(old);  // failed: the old block is still live
  }
  return p;
}

void free(void* p) {
  on_free(p);
  __libc_free(p);
}

void* memalign(size_t align, size_t n) {
  void* p = __libc_memalign(align, n);
  on_alloc(p);
  return p;
}

void* aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

int posix_memalign(void** out, size_t align, size_t n) {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

}  // extern "C"

namespace bench {

void alloc_meter_start() {
  const int64_t now = g_live.load();
  g_start.store(now);
  g_peak.store(now);
}

size_t alloc_meter_peak_delta() {
  const int64_t d = g_peak.load() - g_start.load();
  return d > 0 ? static_cast<size_t>(d) : 0;
}

}  // namespace bench
