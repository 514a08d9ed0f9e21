// The emulator's checks of shared memory, cp.async and global wrapper accesses (see check.hpp).
#include "emu/check.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "emu/async.hpp"
#include "emu/emu.hpp"

namespace emu {
namespace {

constexpr int16_t kNone = -1;   // no access yet in the epoch
constexpr int16_t kMany = -2;   // read by several threads in the epoch
constexpr int16_t kPlain = -3;  // a plain store (not through a wrapper): thread unknown
constexpr unsigned char kPoison = 0xFF;  // NaN in f16, bf16 and f32

// Shadow state of one shared-memory byte.
struct Byte {
  uint32_t w_epoch = 0, r_epoch = 0;  // epoch of the last write / read (0: none in this block)
  int16_t writer = kNone, reader = kNone;
  uint16_t w_site = 0, w_ctx = 0, r_site = 0, r_ctx = 0;
  bool written = false;  // some write reached this byte in this block (initcheck)
  bool pending = false;  // destination of a cp.async not yet retired by wait_group
  uint16_t pending_op = 0;  // the site while pending
};

struct Copy {
  unsigned char* dst;
  unsigned char data[16];
  int bytes;
  uint16_t site;
};

struct Thread {
  std::vector<Copy> open;                  // issued, not yet committed
  std::deque<std::vector<Copy>> groups;    // committed, oldest first
  uint16_t ctx = 0;                        // site of the last barrier, commit or wait
};

struct Guarded {
  const unsigned char *begin, *end, *payload;
  size_t bytes;
  std::string name;
};

struct State {
  std::vector<Site> sites{Site{}};
  std::map<std::pair<const char*, int>, uint16_t> site_ids;
  std::vector<Byte> shadow = std::vector<Byte>(kMaxSmem);
  std::vector<unsigned char> known = std::vector<unsigned char>(kMaxSmem);  // last contents seen
  std::vector<Thread> threads;
  std::vector<Guarded> guarded;
  std::vector<std::pair<size_t, std::string>> uninit;  // reads of unwritten bytes in this epoch
  int smem = 0;
  uint32_t epoch = 1;
  const char* kernel = "?";
};

State& state() {
  static State s;
  return s;
}

uint16_t intern(Site s) {
  State& st = state();
  // A direct-mapped cache in front of the map: the wrappers intern their site on every call.
  static struct {
    const char* file = nullptr;
    int line = 0;
    uint16_t id = 0;
  } cache[1024];
  auto& c = cache[(reinterpret_cast<uintptr_t>(s.file) / 8 + static_cast<uintptr_t>(s.line) * 31) % 1024];
  if (c.file == s.file && c.line == s.line) return c.id;
  const auto key = std::make_pair(s.file, s.line);
  auto it = st.site_ids.find(key);
  if (it == st.site_ids.end()) {
    if (st.sites.size() >= 0xFFFF) return 0;
    it = st.site_ids.emplace(key, static_cast<uint16_t>(st.sites.size())).first;
    st.sites.push_back(s);
  }
  c.file = s.file, c.line = s.line, c.id = it->second;
  return it->second;
}

// Returns "file:line" without the directories.
std::string where(uint16_t id) {
  const Site& s = state().sites[id];
  const char* base = std::strrchr(s.file, '/');
  return std::string(base ? base + 1 : s.file) + ":" + std::to_string(s.line);
}

std::string point(int16_t tid, uint16_t site, uint16_t ctx) {
  std::string who = tid == kPlain  ? "a plain store (thread unknown)"
                    : tid == kMany ? "several threads"
                                   : "thread " + std::to_string(tid) + " (warp " + std::to_string(tid / 32) + ")";
  if (site) who += " at " + where(site);
  if (ctx) who += " (after " + where(ctx) + ")";
  return who;
}

std::string prefix(size_t offset) {
  const Dim3& b = block_idx;
  return std::string("emu: ") + state().kernel + " block (" + std::to_string(b.x) + ", " + std::to_string(b.y) + ", " +
         std::to_string(b.z) + "): shared byte " + std::to_string(offset) + ": ";
}

[[noreturn]] void race(size_t offset, const std::string& first, const std::string& second) {
  detail::fail(prefix(offset) + "race: " + first + " and " + second +
               " in the same barrier epoch (no __syncthreads between them)");
}

// Returns the head of the report of one access: "emu: <kernel> block (x, y, z): <what> by thread
// <tid> at <file:line>: ".
std::string access_head(const char* what, Site site) {
  const Dim3& b = block_idx;
  return std::string("emu: ") + state().kernel + " block (" + std::to_string(b.x) + ", " + std::to_string(b.y) + ", " +
         std::to_string(b.z) + "): " + what + " by thread " + std::to_string(detail::current_thread()) + " at " +
         where(intern(site)) + ": ";
}

// Fails unless p is aligned to `align` bytes (global addresses; shared ones: offset_of).
void require_aligned(const void* p, int align, const char* what, Site site) {
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(align) != 0)
    detail::fail(access_head(what, site) + "address not " + std::to_string(align) + "-byte aligned");
}

size_t offset_of(const void* p, int bytes, int align, const char* what, Site site) {
  const State& st = state();
  const auto* base = flashattn::gpu::detail::smem_raw;
  const auto* q = static_cast<const unsigned char*>(p);
  auto head = [&] { return access_head(what, site); };
  if (q < base || q + bytes > base + kMaxSmem) detail::fail(head() + "address is not in shared memory");
  const size_t off = static_cast<size_t>(q - base);
  if (off + bytes > static_cast<size_t>(st.smem))
    detail::fail(head() + "shared bytes [" + std::to_string(off) + ", " + std::to_string(off + bytes) +
                 ") outside the dynamic shared size " + std::to_string(st.smem));
  if (off % align != 0)
    detail::fail(head() + "shared offset " + std::to_string(off) + " is not " + std::to_string(align) +
                 "-byte aligned");
  return off;
}

// Records the bytes of [off, off + n) that changed since last seen as written by a plain store in
// this epoch. At a barrier (`at_barrier`), a plain store over bytes a wrapper read in the same epoch
// is a race; at a wrapper access the access itself is checked against the store by the caller.
// Works on aligned 2-byte pairs (the smallest element the kernels store): a stored f16 whose one
// byte equals the old contents still marks both bytes.
void absorb_plain(size_t off, size_t n, bool at_barrier) {
  State& st = state();
  const unsigned char* mem = flashattn::gpu::detail::smem_raw;
  const size_t end = std::min(off + n + 1, static_cast<size_t>(st.smem)) & ~size_t{1};
  for (size_t pair = off & ~size_t{1}; pair < end; pair += 2) {
    if (mem[pair] == st.known[pair] && mem[pair + 1] == st.known[pair + 1]) continue;
    for (size_t i = pair; i < pair + 2; ++i) {
      Byte& b = st.shadow[i];
      if (b.pending)
        detail::fail(prefix(i) + "a plain store wrote a byte whose cp.async by " +
                     point(b.writer, b.pending_op, b.w_ctx) + " is still in flight");
      if (at_barrier && b.r_epoch == st.epoch)
        race(i, "a plain store", "a read by " + point(b.reader, b.r_site, b.r_ctx));
      b.written = true;
      b.w_epoch = st.epoch;
      b.writer = kPlain;
      b.w_site = b.w_ctx = 0;
      st.known[i] = mem[i];
    }
    detail::async_generic_write(pair, 2, kPlain, 0);
  }
}

// Checks and records a wrapper write of bytes [off, off + n) by thread tid.
void write_bytes(size_t off, size_t n, int16_t tid, uint16_t site, uint16_t ctx, const char* what) {
  State& st = state();
  absorb_plain(off, n, false);
  detail::async_generic_write(off, n, tid, site);
  for (size_t i = off; i < off + n; ++i) {
    Byte& b = st.shadow[i];
    auto me = [&] { return std::string(what) + " by " + point(tid, site, ctx); };
    if (b.pending)
      detail::fail(prefix(i) + me() + " overwrites a byte whose cp.async by " + point(b.writer, b.pending_op, b.w_ctx) +
                   " is still in flight");
    if (b.w_epoch == st.epoch && b.writer != tid) race(i, "a write by " + point(b.writer, b.w_site, b.w_ctx), me());
    if (b.r_epoch == st.epoch && b.reader != tid) race(i, "a read by " + point(b.reader, b.r_site, b.r_ctx), me());
    b.w_epoch = st.epoch;
    b.writer = tid;
    b.w_site = site;
    b.w_ctx = ctx;
  }
}

Thread& me() { return state().threads[detail::current_thread()]; }

}  // namespace

void note_context(Site site) {
  State& st = state();
  if (!st.threads.empty()) me().ctx = intern(site);
}

void smem_read(const void* p, int bytes, int align, const char* what, Site site) {
  State& st = state();
  const size_t off = offset_of(p, bytes, align, what, site);
  const auto tid = static_cast<int16_t>(detail::current_thread());
  const uint16_t s = intern(site), ctx = me().ctx;
  absorb_plain(off, bytes, false);
  detail::async_generic_read(off, static_cast<size_t>(bytes), tid, what, site);
  for (size_t i = off; i < off + bytes; ++i) {
    Byte& b = st.shadow[i];
    auto mine = [&] { return std::string("a read (") + what + ") by " + point(tid, s, ctx); };
    if (b.pending)
      detail::fail(prefix(i) + mine() + " of a byte whose cp.async by " + point(b.writer, b.pending_op, b.w_ctx) +
                   " has not been retired by a wait_group (it still holds the poison pattern)");
    // Unwritten: reported at the end of the epoch unless another thread's write in this epoch
    // turns it into a race first (the read merely came before the write).
    if (!b.written && (st.uninit.empty() || st.uninit.back().first != i))
      st.uninit.emplace_back(i, prefix(i) + mine() + " of a byte nothing wrote in this block (uninitialised)");
    if (b.w_epoch == st.epoch && b.writer != tid) race(i, "a write by " + point(b.writer, b.w_site, b.w_ctx), mine());
    if (b.r_epoch != st.epoch) {
      b.r_epoch = st.epoch;
      b.reader = tid;
      b.r_site = s;
      b.r_ctx = ctx;
    } else if (b.reader != tid) {
      b.reader = kMany;
    }
  }
}

void cp_async(void* dst, const void* src, bool valid, Site site, int bytes) {
  State& st = state();
  const size_t off = offset_of(dst, bytes, bytes, "cp.async destination", site);
  if (valid) {
    require_aligned(src, bytes, "cp.async source", site);
    global_access(src, bytes, "cp.async source", site);
  }
  Thread& t = me();
  const auto tid = static_cast<int16_t>(detail::current_thread());
  const uint16_t s = intern(site);
  write_bytes(off, bytes, tid, s, t.ctx, "a cp.async");
  Copy c;
  c.dst = static_cast<unsigned char*>(dst);
  c.bytes = bytes;
  c.site = s;
  if (valid)
    std::memcpy(c.data, src, bytes);
  else
    std::memset(c.data, 0, bytes);
  t.open.push_back(c);
  for (size_t i = off; i < off + bytes; ++i) {
    st.shadow[i].pending = true;
    st.shadow[i].pending_op = s;
    flashattn::gpu::detail::smem_raw[i] = kPoison;
    st.known[i] = kPoison;
  }
}

void cp_async_commit(Site site) {
  Thread& t = me();
  t.ctx = intern(site);
  t.groups.push_back(std::move(t.open));
  t.open.clear();
}

void cp_async_wait(int n, Site site) {
  State& st = state();
  Thread& t = me();
  t.ctx = intern(site);
  while (static_cast<int>(t.groups.size()) > n) {
    for (const Copy& c : t.groups.front()) {
      const size_t off = static_cast<size_t>(c.dst - flashattn::gpu::detail::smem_raw);
      std::memcpy(c.dst, c.data, c.bytes);
      std::memcpy(&st.known[off], c.data, c.bytes);
      for (size_t i = off; i < off + c.bytes; ++i) {
        Byte& b = st.shadow[i];
        b.pending = false;
        b.written = true;
        b.w_epoch = st.epoch;  // the data may land any time up to here
        b.writer = static_cast<int16_t>(detail::current_thread());
        b.w_site = c.site;
        b.w_ctx = t.ctx;
      }
    }
    t.groups.pop_front();
  }
}

void global_access(const void* p, size_t bytes, const char* what, Site site) {
  const auto* q = static_cast<const unsigned char*>(p);
  for (const Guarded& g : state().guarded) {
    if (q + bytes <= g.begin || q >= g.end) continue;
    if (q >= g.payload && q + bytes <= g.payload + g.bytes) return;
    detail::fail(access_head(what, site) + "global bytes [" + std::to_string(q - g.payload) + ", " +
                 std::to_string(q - g.payload + static_cast<std::ptrdiff_t>(bytes)) + ") of " + g.name + " (" +
                 std::to_string(g.bytes) + " bytes) are out of bounds");
  }
}

namespace {
// Returns whether [p, p + bytes) is in the block's shared memory (smem_raw); fails when it is
// not aligned to `bytes`.
bool shared_plain(const void* p, int bytes, const char* what, Site site) {
  require_aligned(p, bytes, what, site);
  const auto* q = static_cast<const unsigned char*>(p);
  const auto* base = flashattn::gpu::detail::smem_raw;
  return q >= base && q < base + kMaxSmem;
}
}  // namespace

void atomic_add_pair(float* p, float a, float b, Site site) {
  const char* what = "a vector atomic add (v2)";
  require_aligned(p, 8, what, site);
  global_access(p, 8, what, site);
  p[0] += a;
  p[1] += b;
}

void plain_load(void* dst, const void* src, int bytes, Site site) {
  if (shared_plain(src, bytes, "a load (ld)", site))
    smem_read(src, bytes, bytes, "ld", site);
  else
    global_access(src, static_cast<size_t>(bytes), "a load (ld)", site);
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void plain_store(void* dst, const void* src, int bytes, Site site) {
  if (!shared_plain(dst, bytes, "a store (st)", site)) {
    global_access(dst, static_cast<size_t>(bytes), "a store (st)", site);
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return;
  }
  State& st = state();
  const size_t off = offset_of(dst, bytes, bytes, "a store (st)", site);
  write_bytes(off, static_cast<size_t>(bytes), static_cast<int16_t>(detail::current_thread()), intern(site), me().ctx,
              "a store (st)");
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  for (size_t i = off; i < off + static_cast<size_t>(bytes); ++i) {
    st.shadow[i].written = true;
    st.known[i] = flashattn::gpu::detail::smem_raw[i];
  }
}

void register_guarded(const void* begin, const void* end, const void* payload, size_t bytes, const char* name) {
  state().guarded.push_back(Guarded{static_cast<const unsigned char*>(begin), static_cast<const unsigned char*>(end),
                                    static_cast<const unsigned char*>(payload), bytes, name});
}
void unregister_guarded(const void* payload) {
  auto& g = state().guarded;
  g.erase(std::remove_if(g.begin(), g.end(), [&](const Guarded& x) { return x.payload == payload; }), g.end());
}
void clear_guarded() { state().guarded.clear(); }

namespace detail {

std::string site_name(Site s) { return where(intern(s)); }
uint16_t site_id(Site s) { return intern(s); }
std::string site_name(uint16_t id) { return id ? where(id) : std::string("?"); }
const char* kernel_running() { return state().kernel; }
size_t smem_size() { return static_cast<size_t>(state().smem); }

size_t shared_offset(const void* p, size_t bytes, int align, const char* what, Site site) {
  return offset_of(p, static_cast<int>(bytes), align, what, site);
}

void shared_write_async(size_t off, const unsigned char* data, size_t n, bool landed) {
  State& st = state();
  std::memcpy(flashattn::gpu::detail::smem_raw + off, data, n);
  std::memcpy(&st.known[off], data, n);
  if (landed)
    for (size_t i = off; i < off + n; ++i) st.shadow[i].written = true;
}

size_t first_unwritten(size_t off, size_t n) {
  const State& st = state();
  absorb_plain(off, n, false);
  for (size_t i = off; i < off + n; ++i)
    if (!st.shadow[i].written) return i;
  return SIZE_MAX;
}

void block_begin(int threads, int smem, const char* kernel) {
  State& st = state();
  st.smem = smem;
  st.kernel = kernel;
  st.epoch = 1;
  st.threads.assign(threads, Thread{});
  st.uninit.clear();
  std::fill(st.shadow.begin(), st.shadow.begin() + smem, Byte{});
  std::memcpy(st.known.data(), flashattn::gpu::detail::smem_raw, smem);
  async_block_begin(threads, smem);
}

void barrier_done() {
  State& st = state();
  constexpr size_t kChunk = 64;
  const unsigned char* mem = flashattn::gpu::detail::smem_raw;
  for (size_t off = 0; off < static_cast<size_t>(st.smem); off += kChunk) {
    const size_t n = std::min(kChunk, static_cast<size_t>(st.smem) - off);
    if (std::memcmp(mem + off, &st.known[off], n) != 0) absorb_plain(off, n, true);
  }
  for (const auto& u : st.uninit)
    if (!st.shadow[u.first].written || st.shadow[u.first].w_epoch == st.epoch) fail(u.second);
  st.uninit.clear();
  async_block_barrier();
  ++st.epoch;
}

void block_end() {
  State& st = state();
  barrier_done();  // the block's end closes its last epoch: plain stores after wrapper reads race too
  async_block_end();
  for (size_t tid = 0; tid < st.threads.size(); ++tid) {
    const Thread& t = st.threads[tid];
    size_t n = t.open.size();
    uint16_t site = n ? t.open.front().site : 0;
    for (const auto& g : t.groups) {
      if (!site && !g.empty()) site = g.front().site;
      n += g.size();
    }
    if (n == 0) continue;
    const Dim3& b = block_idx;
    fail(std::string("emu: ") + st.kernel + " block (" + std::to_string(b.x) + ", " + std::to_string(b.y) + ", " +
         std::to_string(b.z) + "): thread " + std::to_string(tid) + " ended with " + std::to_string(n) +
         " cp.async copies never retired by a wait_group (first issued at " + where(site) + ")");
  }
  st.threads.clear();
}

}  // namespace detail
}  // namespace emu
