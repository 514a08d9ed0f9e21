// The emulator's model of the sm_90a asynchronous proxy (see async.hpp).
#include "emu/async.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "emu/emu.hpp"
#include "emu/mma_emu.hpp"  // hardware_numerics, round_toward_zero: the numerics mma.sync's emulation uses
#include "flashattn/convert.hpp"
#include "sm90_layout.hpp"
#include "sm90_tensor_map.hpp"

namespace emu {
namespace {

namespace sm90 = flashattn::gpu::detail::sm90;

constexpr int16_t kNoWriter = -1;

struct Mbarrier {
  size_t off = 0;
  uint32_t count = 0, pending = 0;  // expected arrivals per phase; arrivals still to come
  int64_t tx = 0;                   // transaction bytes still to come in this phase
  unsigned phase = 0;               // completed phases (the waiters watch it change)
  uint16_t init_site = 0;
};

// The TMA load that last wrote a byte: which barrier's phase (its completed-phase count when the
// bytes landed) a reader must have waited for.
struct Landing {
  size_t bar = SIZE_MAX;
  unsigned phase = 0;
};

struct TmaLoad {
  size_t dst = 0;                    // shared offset of the box (aligned to the swizzle pattern)
  sm90::Swizzle swizzle = sm90::Swizzle::none;
  std::vector<unsigned char> image;  // the box, dense, innermost first (read at issue)
  size_t bar = 0;
  uint16_t site = 0;
};

// The accumulators of an in-flight wgmma hold this signalling NaN: arithmetic on it gives a quiet
// NaN (other bits), so at retirement a register that is not these bits was written in flight.
constexpr uint32_t kInFlight = 0x7FA5A5A5u;

float in_flight_value() {
  float f;
  std::memcpy(&f, &kInFlight, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct WgmmaOp {
  std::array<float*, 128> d{};
  std::array<const uint32_t*, 128> a{};            // RS: each thread's A registers
  std::vector<std::array<uint32_t, 4>> a_values;   // RS: their values at issue
  int regs = 0;                // N/2 accumulators per thread
  std::vector<float> result;   // [thread][reg]
  std::vector<size_t> reads;   // shared offsets (2 bytes each) of its operands
  uint16_t site = 0;
};

struct Warpgroup {
  std::vector<WgmmaOp> open;                  // issued, not committed
  std::deque<std::vector<WgmmaOp>> groups;    // committed, oldest first
};

struct State {
  int threads = 0;
  size_t smem = 0;
  std::map<size_t, Mbarrier> bars;
  std::vector<uint8_t> bar_byte = std::vector<uint8_t>(kMaxSmem);
  std::vector<uint16_t> tma_pending = std::vector<uint16_t>(kMaxSmem);  // issuing site of an unlanded load
  std::vector<uint16_t> readers = std::vector<uint16_t>(kMaxSmem);      // in-flight wgmma reading the byte
  std::vector<uint16_t> reader_site = std::vector<uint16_t>(kMaxSmem);
  std::vector<int16_t> unfenced = std::vector<int16_t>(kMaxSmem, kNoWriter);  // ordinary store not yet fenced
  std::vector<uint16_t> unfenced_site = std::vector<uint16_t>(kMaxSmem);
  std::vector<Landing> landing = std::vector<Landing>(kMaxSmem);
  std::vector<std::vector<std::pair<size_t, size_t>>> unfenced_ranges;  // per thread (last: unknown writer)
  std::vector<std::map<size_t, unsigned>> observed;  // per thread: barrier -> completed phases it waited for
  std::vector<TmaLoad> loads;
  std::vector<Warpgroup> groups;
  std::mt19937_64 rng;
};

State& state() {
  static State s;
  return s;
}

std::string block_text() {
  const Dim3& b = block_idx;
  return std::string("emu: ") + detail::kernel_running() + " block (" + std::to_string(b.x) + ", " +
         std::to_string(b.y) + ", " + std::to_string(b.z) + "): ";
}

std::string thread_text(int tid) {
  return tid < 0 ? std::string("a plain store (thread unknown)")
                 : "thread " + std::to_string(tid) + " (warp " + std::to_string(tid / 32) + ")";
}

Mbarrier& barrier_at(const uint64_t* bar, const char* what, Site site) {
  State& s = state();
  const size_t off = detail::shared_offset(bar, 8, 8, what, site);
  auto it = s.bars.find(off);
  if (it == s.bars.end())
    detail::fail(block_text() + what + " by " + thread_text(detail::current_thread()) + " at " +
                 detail::site_name(site) + ": shared offset " + std::to_string(off) + " is not an initialised mbarrier");
  return it->second;
}

std::string barrier_text(const Mbarrier& m) {
  return "the mbarrier at shared offset " + std::to_string(m.off) + " (initialised at " + detail::site_name(m.init_site) +
         ")";
}

void try_complete(Mbarrier& m) {
  if (m.pending != 0 || m.tx != 0) return;
  ++m.phase;
  m.pending = m.count;
}

// Fails unless every thread in [first, first + n) has waited for the phases the TMA loads that
// landed the bytes in `offs` completed (collected as distinct (barrier, phase) pairs first).
template <class Offsets>
void require_acquired(const Offsets& offs, int first, int n, const std::string& who) {
  State& s = state();
  std::vector<Landing> need;
  for (size_t off : offs) {
    const Landing& l = s.landing[off];
    if (l.bar == SIZE_MAX) continue;
    if (std::none_of(need.begin(), need.end(), [&](const Landing& x) { return x.bar == l.bar && x.phase == l.phase; }))
      need.push_back(l);
  }
  for (const Landing& l : need)
    for (int t = first; t < first + n; ++t) {
      auto it = s.observed[t].find(l.bar);
      if (it == s.observed[t].end() || it->second <= l.phase)
        detail::fail(block_text() + who + " reads shared bytes a TMA load landed in phase " + std::to_string(l.phase) +
                     " of " + barrier_text(s.bars.at(l.bar)) + ", but " + thread_text(t) +
                     " has not waited for that phase (wrong parity, or no wait)");
    }
}

void record_unfenced(int tid, size_t off, size_t n) {
  State& s = state();
  auto& list = s.unfenced_ranges[tid < 0 ? s.threads : tid];
  if (!list.empty() && list.back().first + list.back().second == off)
    list.back().second += n;
  else
    list.emplace_back(off, n);
}

uint32_t bits16(size_t off) {
  uint16_t v;
  std::memcpy(&v, flashattn::gpu::detail::smem_raw + off, 2);
  return v;
}

float element(uint32_t bits, bool f16) {
  return f16 ? flashattn::float_from_f16_bits(static_cast<uint16_t>(bits))
             : flashattn::float_from_bf16_bits(static_cast<uint16_t>(bits));
}

// Returns the shared offsets of the 16-bit operand elements (rows x 16) of descriptor `desc`, checked.
std::vector<size_t> operand_offsets(uint64_t desc, int rows, sm90::Major major, const char* name, Site site) {
  const sm90::SmemDesc d = sm90::decode(desc);
  const std::string head = block_text() + "wgmma at " + detail::site_name(site) + ": operand " + name + ": ";
  if (d.base_offset != 0) detail::fail(head + "descriptor base offset " + std::to_string(d.base_offset) + " is not 0");
  const uint32_t w = 1u << sm90::swizzle_log2(d.swizzle);
  if (d.swizzle != sm90::Swizzle::none && ((d.start >> 7) & (w - 1)) != 0)
    detail::fail(head + "start address " + std::to_string(d.start) + " is not on the first row of its " +
                 std::to_string(sm90::swizzle_row_bytes(d.swizzle)) +
                 "-byte swizzle pattern (a base offset of 0 needs bits 7.. of the start clear)");
  std::vector<size_t> offs(static_cast<size_t>(rows) * 16);
  const size_t smem = detail::smem_size();
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < 16; ++k) {
      const uint32_t a =
          sm90::swizzle(d.start + sm90::canonical_offset(major, d.swizzle, d.lbo, d.sbo, static_cast<uint32_t>(r),
                                                         static_cast<uint32_t>(k)),
                        d.swizzle);
      if (a + 2 > smem)
        detail::fail(head + "element (" + std::to_string(r) + ", " + std::to_string(k) + ") at shared offset " +
                     std::to_string(a) + " is outside the dynamic shared size " + std::to_string(smem));
      offs[static_cast<size_t>(r) * 16 + static_cast<size_t>(k)] = a;
    }
  return offs;
}

// Fails unless the async proxy may read the bytes at offs (2 each) now.
void check_async_read(const std::vector<size_t>& offs, const char* name, Site site) {
  State& s = state();
  const std::string head = block_text() + "wgmma at " + detail::site_name(site) + ": operand " + name + ": shared byte ";
  for (size_t off : offs)
    for (size_t i = off; i < off + 2; ++i) {
      if (s.bar_byte[i]) detail::fail(head + std::to_string(i) + " belongs to an mbarrier");
      if (s.tma_pending[i])
        detail::fail(head + std::to_string(i) + " is written by a TMA load issued at " +
                     detail::site_name(s.tma_pending[i]) + " that has not landed");
      if (s.unfenced[i] != kNoWriter)
        detail::fail(head + std::to_string(i) + " was written by an ordinary store of " + thread_text(s.unfenced[i]) +
                     (s.unfenced_site[i] ? " at " + detail::site_name(s.unfenced_site[i]) : std::string()) +
                     " with no fence.proxy.async after it (the async proxy may not see it)");
    }
  for (size_t off : offs)
    if (detail::first_unwritten(off, 2) != SIZE_MAX)
      detail::fail(head + std::to_string(detail::first_unwritten(off, 2)) + " was never written in this block");
}

void issue_wgmma(const Wgmma& w, Site site) {
  State& s = state();
  WarpgroupExchange& x = warpgroup_exchange();
  const int first = detail::current_thread() / 128 * 128;
  const std::string head = block_text() + "wgmma at " + detail::site_name(site) + ": ";
  for (int r = 1; r < 128; ++r)
    if (x.word[r][0] != x.word[0][0] || x.word[r][1] != x.word[0][1] || x.word[r][2] != x.word[0][2])
      detail::fail(head + "thread " + std::to_string(first + r) + " passes other descriptors or flags than thread " +
                   std::to_string(first) + " (a wgmma's operands are the warpgroup's)");
  if (w.n < 8 || w.n > 256 || w.n % 8 != 0) detail::fail(head + "N = " + std::to_string(w.n) + " is not a multiple of 8 in [8, 256]");
  std::vector<size_t> reads;
  float A[64][16], B[16][256];
  if (w.a_in_registers) {
    for (int r = 0; r < 128; ++r) {
      const auto* a = static_cast<const uint32_t*>(x.cptr[r]);
      const int row = 16 * (r / 32) + (r % 32) / 4, col = 2 * (r % 4);
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h)
          A[row + 8 * (i % 2)][col + 8 * (i / 2) + h] = element(h ? a[i] >> 16 : a[i] & 0xFFFFu, w.f16);
    }
  } else {
    const std::vector<size_t> a = operand_offsets(w.desc_a, 64, w.trans_a ? sm90::Major::mn : sm90::Major::k, "A", site);
    check_async_read(a, "A", site);
    for (int r = 0; r < 64; ++r)
      for (int k = 0; k < 16; ++k) A[r][k] = element(bits16(a[static_cast<size_t>(r) * 16 + k]), w.f16);
    reads = a;
  }
  const std::vector<size_t> b = operand_offsets(w.desc_b, w.n, w.trans_b ? sm90::Major::mn : sm90::Major::k, "B", site);
  check_async_read(b, "B", site);
  for (int n = 0; n < w.n; ++n)
    for (int k = 0; k < 16; ++k) B[k][n] = element(bits16(b[static_cast<size_t>(n) * 16 + k]), w.f16);
  reads.insert(reads.end(), b.begin(), b.end());
  require_acquired(reads, first, 128, "the wgmma at " + detail::site_name(site));

  Warpgroup& g = s.groups[static_cast<size_t>(first / 128)];
  // The accumulators' current value: the newest in-flight result for the same registers, else the registers.
  const WgmmaOp* prior = nullptr;
  for (auto it = g.open.rbegin(); !prior && it != g.open.rend(); ++it)
    if (it->d[0] == x.ptr[0]) prior = &*it;
  for (auto gr = g.groups.rbegin(); !prior && gr != g.groups.rend(); ++gr)
    for (auto it = gr->rbegin(); !prior && it != gr->rend(); ++it)
      if (it->d[0] == x.ptr[0]) prior = &*it;
  WgmmaOp op;
  op.regs = w.n / 2;
  op.site = detail::site_id(site);
  op.result.resize(static_cast<size_t>(128 * op.regs));
  for (int r = 0; r < 128; ++r) {
    op.d[r] = static_cast<float*>(x.ptr[r]);
    const int l = r % 32, row0 = 16 * (r / 32) + l / 4;
    for (int i = 0; i < op.regs; ++i) {
      const int row = row0 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (l % 4) + i % 2;
      const float c = !w.accumulate ? 0.0f : prior ? prior->result[static_cast<size_t>(r * op.regs + i)] : op.d[r][i];
      float v;
      if (flashattn::gpu::detail::hardware_numerics()) {  // exact products, truncated sum (as mma_emu.hpp's mma)
        double acc = c;
        for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[row][k]) * B[k][col];
        v = flashattn::gpu::detail::round_toward_zero(acc);
      } else {
        v = c;
        for (int k = 0; k < 16; ++k) v += A[row][k] * B[k][col];
      }
      op.result[static_cast<size_t>(r * op.regs + i)] = v;
    }
  }
  for (size_t off : reads)
    for (size_t i = off; i < off + 2; ++i) {
      ++s.readers[i];
      s.reader_site[i] = op.site;
    }
  op.reads = std::move(reads);
  if (w.a_in_registers) {
    op.a_values.resize(128);
    for (int r = 0; r < 128; ++r) {
      op.a[r] = static_cast<const uint32_t*>(x.cptr[r]);
      std::copy(op.a[r], op.a[r] + 4, op.a_values[r].begin());
    }
  }
  for (int r = 0; r < 128; ++r)
    for (int i = 0; i < op.regs; ++i) op.d[r][i] = in_flight_value();
  g.open.push_back(std::move(op));
}

// Retires op: fails if a thread wrote its accumulators or its A registers while it was in flight
// (the hardware reads and writes them asynchronously until wgmma_wait), then writes its results
// when `write` (not when a younger wgmma on the same registers is still to retire: they stay in
// flight).
void retire(WgmmaOp& op, bool write, Site site) {
  State& s = state();
  const std::string head = block_text() + "wgmma at " + detail::site_name(op.site) + " retired at " +
                           detail::site_name(site) + ": ";
  for (int r = 0; r < 128; ++r) {
    for (int i = 0; i < op.regs; ++i)
      if (bits_of(op.d[r][i]) != kInFlight)
        detail::fail(head + "accumulator register " + std::to_string(i) + " of thread " + std::to_string(r) +
                     " of its warpgroup was written while the wgmma was in flight");
    if (!op.a_values.empty() && !std::equal(op.a_values[r].begin(), op.a_values[r].end(), op.a[r]))
      detail::fail(head + "an A register of thread " + std::to_string(r) +
                   " of its warpgroup changed while the wgmma was in flight (ptxas would serialise the "
                   "wgmmas around such a write: C7519)");
  }
  if (write)
    for (int r = 0; r < 128; ++r)
      std::copy(op.result.begin() + r * op.regs, op.result.begin() + (r + 1) * op.regs, op.d[r]);
  for (size_t off : op.reads)
    for (size_t i = off; i < off + 2; ++i) --s.readers[i];
}

// Runs body on thread 0 of the running warpgroup between two warpgroup barriers (every thread of
// the warpgroup must call: the .sync.aligned collectives).
template <class Body>
void warpgroup_collective(Body body) {
  sync_warpgroup();
  if (detail::current_thread() % 128 == 0) body();
  sync_warpgroup();
}

}  // namespace

void mbarrier_init(uint64_t* bar, uint32_t count, Site site) {
  State& s = state();
  const size_t off = detail::shared_offset(bar, 8, 8, "mbarrier.init", site);
  if (count < 1 || count >= (1u << 20))
    detail::fail(block_text() + "mbarrier.init at " + detail::site_name(site) + ": count " + std::to_string(count) +
                 " is not in [1, 2^20)");
  if (s.bars.count(off))
    detail::fail(block_text() + "mbarrier.init at " + detail::site_name(site) + ": " + barrier_text(s.bars.at(off)) +
                 " is initialised again");
  for (size_t i = off; i < off + 8; ++i)
    if (s.tma_pending[i] || s.readers[i]) detail::fail(block_text() + "mbarrier.init over bytes in flight");
  const unsigned char zero[8] = {};
  detail::shared_write_async(off, zero, 8, true);
  for (size_t i = off; i < off + 8; ++i) s.bar_byte[i] = 1;
  Mbarrier m;
  m.off = off;
  m.count = m.pending = count;
  m.init_site = detail::site_id(site);
  s.bars.emplace(off, m);
}

void mbarrier_arrive(uint64_t* bar, uint32_t expect_tx, Site site) {
  Mbarrier& m = barrier_at(bar, "mbarrier.arrive", site);
  if (m.pending == 0)
    detail::fail(block_text() + "mbarrier.arrive at " + detail::site_name(site) + " by " +
                 thread_text(detail::current_thread()) + ": " + barrier_text(m) + " has all " + std::to_string(m.count) +
                 " arrivals of phase " + std::to_string(m.phase) + " already");
  m.tx += expect_tx;
  --m.pending;
  try_complete(m);
}

void mbarrier_wait(uint64_t* bar, uint32_t parity, Site site) {
  State& s = state();
  Mbarrier& m = barrier_at(bar, "mbarrier.try_wait", site);
  if (parity > 1) detail::fail(block_text() + "mbarrier.try_wait.parity at " + detail::site_name(site) + ": parity " + std::to_string(parity));
  while ((m.phase & 1u) == parity) wait_until_changed(&m.phase, m.phase, &m);
  unsigned& seen = s.observed[static_cast<size_t>(detail::current_thread())][m.off];
  seen = std::max(seen, m.phase);
}

void tma_load(void* dst, const sm90::TensorMapSpec& spec, uint64_t* bar, const int32_t* coords, Site site) {
  State& s = state();
  const std::string head = block_text() + "TMA load at " + detail::site_name(site) + " by " +
                           thread_text(detail::current_thread()) + ": ";
  const std::string problem = sm90::tensor_map_problem(spec);
  if (!problem.empty()) detail::fail(head + "tensor map: " + problem);
  const uint32_t bytes = sm90::box_bytes(spec);
  const size_t off = detail::shared_offset(dst, bytes, 128, "a TMA load's destination", site);
  if (spec.swizzle != sm90::Swizzle::none && off % sm90::swizzle_repeat_bytes(spec.swizzle) != 0)
    detail::fail(head + "destination offset " + std::to_string(off) + " is not aligned to the " +
                 std::to_string(sm90::swizzle_repeat_bytes(spec.swizzle)) + "-byte swizzle pattern");
  Mbarrier& m = barrier_at(bar, "a TMA load's mbarrier", site);
  TmaLoad load;
  load.dst = off;
  load.swizzle = spec.swizzle;
  load.bar = m.off;
  load.site = detail::site_id(site);
  load.image.assign(bytes, 0);
  // The box row by row (dimension 0 contiguous in both): in-bounds runs read, the rest zero.
  const int rank = spec.rank;
  uint32_t idx[5] = {};
  const uint32_t rows = bytes / (2 * spec.box[0]);
  for (uint32_t row = 0; row < rows; ++row) {
    uint32_t rest = row;
    bool inside = true;
    int64_t base = 0;
    for (int dim = 1; dim < rank; ++dim) {
      idx[dim] = rest % spec.box[dim];
      rest /= spec.box[dim];
      const int64_t c = int64_t{coords[dim]} + idx[dim];
      inside = inside && c >= 0 && c < static_cast<int64_t>(spec.dims[dim]);
      base += c * static_cast<int64_t>(spec.strides[dim]);
    }
    if (!inside) continue;
    const int64_t lo = std::max<int64_t>(0, coords[0]);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(spec.dims[0]), int64_t{coords[0]} + spec.box[0]);
    if (lo >= hi) continue;
    const auto* src = static_cast<const unsigned char*>(spec.global) + base + 2 * lo;
    global_access(src, static_cast<size_t>(2 * (hi - lo)), "a TMA load's source", site);
    std::memcpy(&load.image[static_cast<size_t>(row) * 2 * spec.box[0] + static_cast<size_t>(2 * (lo - coords[0]))], src,
                static_cast<size_t>(2 * (hi - lo)));
  }
  static const unsigned char poison[16] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                           0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  for (uint32_t chunk = 0; chunk < bytes; chunk += 16) {
    const size_t at = sm90::swizzle(static_cast<uint32_t>(off + chunk), spec.swizzle);
    for (size_t i = at; i < at + 16; ++i) {
      if (s.tma_pending[i])
        detail::fail(head + "shared byte " + std::to_string(i) + " is still written by the TMA load issued at " +
                     detail::site_name(s.tma_pending[i]));
      if (s.readers[i])
        detail::fail(head + "overwrites shared byte " + std::to_string(i) + ", an operand of the in-flight wgmma at " +
                     detail::site_name(s.reader_site[i]) + " (no wgmma.wait_group retired it)");
      if (s.bar_byte[i]) detail::fail(head + "shared byte " + std::to_string(i) + " belongs to an mbarrier");
      s.tma_pending[i] = load.site;
    }
    detail::shared_write_async(at, poison, 16, false);
  }
  s.loads.push_back(std::move(load));
}

void fence_proxy_async(Site) {
  State& s = state();
  const int tid = detail::current_thread();
  for (auto* list : {&s.unfenced_ranges[static_cast<size_t>(tid)], &s.unfenced_ranges[static_cast<size_t>(s.threads)]}) {
    for (const auto& r : *list)
      for (size_t i = r.first; i < r.first + r.second; ++i)
        if (s.unfenced[i] == tid || s.unfenced[i] < 0) s.unfenced[i] = kNoWriter;
    list->clear();
  }
}

void wgmma(const Wgmma& w, float* d, const uint32_t* a, Site site) {
  WarpgroupExchange& x = warpgroup_exchange();
  const int r = detail::current_thread() % 128;
  x.ptr[r] = d;
  x.cptr[r] = a;
  x.word[r][0] = w.a_in_registers ? 0 : w.desc_a;
  x.word[r][1] = w.desc_b;
  x.word[r][2] = static_cast<uint64_t>(w.n) | uint64_t{w.f16} << 16 | uint64_t{w.a_in_registers} << 17 |
                 uint64_t{w.trans_a} << 18 | uint64_t{w.trans_b} << 19 | uint64_t{w.accumulate} << 20;
  warpgroup_collective([&] { issue_wgmma(w, site); });
}

void wgmma_fence(Site) { warpgroup_collective([] {}); }

void wgmma_commit(Site) {
  warpgroup_collective([] {
    Warpgroup& g = state().groups[static_cast<size_t>(detail::current_thread() / 128)];
    g.groups.push_back(std::move(g.open));
    g.open.clear();
  });
}

void wgmma_wait(int n, Site site) {
  warpgroup_collective([n, site] {
    Warpgroup& g = state().groups[static_cast<size_t>(detail::current_thread() / 128)];
    while (static_cast<int>(g.groups.size()) > n) {
      std::vector<WgmmaOp> front = std::move(g.groups.front());
      g.groups.pop_front();
      auto same = [](const float* d) { return [d](const WgmmaOp& o) { return o.d[0] == d; }; };
      for (size_t k = 0; k < front.size(); ++k) {
        // A younger wgmma on the same registers, in this group or one still pending, keeps them.
        const float* d = front[k].d[0];
        bool younger = std::any_of(front.begin() + static_cast<std::ptrdiff_t>(k) + 1, front.end(), same(d)) ||
                       std::any_of(g.open.begin(), g.open.end(), same(d));
        for (const auto& pending : g.groups) younger = younger || std::any_of(pending.begin(), pending.end(), same(d));
        retire(front[k], !younger, site);
      }
    }
  });
}

void setmaxnreg(int registers, bool increase, Site site) {
  WarpgroupExchange& x = warpgroup_exchange();
  const int r = detail::current_thread() % 128;
  x.word[r][0] = static_cast<uint64_t>(registers) | uint64_t{increase} << 32;
  warpgroup_collective([&] {
    for (int t = 1; t < 128; ++t)
      if (x.word[t][0] != x.word[0][0])
        detail::fail(block_text() + "setmaxnreg at " + detail::site_name(site) +
                     ": the threads of a warpgroup ask for different counts");
    if (registers < 24 || registers > 256 || registers % 8 != 0)
      detail::fail(block_text() + "setmaxnreg at " + detail::site_name(site) + ": " + std::to_string(registers) +
                   " is not a multiple of 8 in [24, 256]");
  });
}

namespace detail {

bool async_progress() {
  State& s = state();
  if (s.loads.empty()) return false;
  const size_t k = static_cast<size_t>(s.rng() % s.loads.size());
  TmaLoad load = std::move(s.loads[k]);
  s.loads.erase(s.loads.begin() + static_cast<std::ptrdiff_t>(k));
  Mbarrier& m = s.bars.at(load.bar);
  for (size_t chunk = 0; chunk < load.image.size(); chunk += 16) {
    const size_t at = sm90::swizzle(static_cast<uint32_t>(load.dst + chunk), load.swizzle);
    shared_write_async(at, &load.image[chunk], 16, true);
    for (size_t i = at; i < at + 16; ++i) {
      s.tma_pending[i] = 0;
      s.unfenced[i] = kNoWriter;
      s.landing[i] = Landing{m.off, m.phase};
    }
  }
  m.tx -= static_cast<int64_t>(load.image.size());
  try_complete(m);
  return true;
}

std::string describe_async_wait(const void* object) {
  const auto& m = *static_cast<const Mbarrier*>(object);
  return "for the phase of parity " + std::to_string(m.phase & 1u) + " of " + barrier_text(m) + ": phase " +
         std::to_string(m.phase) + " has " + std::to_string(m.count - m.pending) + " of " + std::to_string(m.count) +
         " arrivals and " + std::to_string(m.tx) + " transaction bytes outstanding, and no TMA load is in flight";
}

void async_generic_write(size_t off, size_t n, int tid, uint16_t site) {
  State& s = state();
  for (size_t i = off; i < off + n; ++i) {
    if (s.bar_byte[i] || s.tma_pending[i] || s.readers[i]) {
      const std::string head = block_text() + "shared byte " + std::to_string(i) + ": a write by " + thread_text(tid) +
                               (site ? " at " + site_name(site) : std::string());
      if (s.bar_byte[i]) fail(head + " to the bytes of an mbarrier");
      if (s.tma_pending[i]) fail(head + " to a byte the TMA load issued at " + site_name(s.tma_pending[i]) + " has not landed");
      fail(head + " to an operand of the in-flight wgmma at " + site_name(s.reader_site[i]) +
           " (no wgmma.wait_group retired it)");
    }
    s.unfenced[i] = static_cast<int16_t>(tid < 0 ? -3 : tid);
    s.unfenced_site[i] = site;
    s.landing[i] = Landing{};
  }
  if (!s.unfenced_ranges.empty()) record_unfenced(tid, off, n);
}

void async_generic_read(size_t off, size_t n, int tid, const char* what, Site site) {
  State& s = state();
  bool landed = false;
  for (size_t i = off; i < off + n; ++i) {
    if (s.bar_byte[i] || s.tma_pending[i]) {
      const std::string head = block_text() + "shared byte " + std::to_string(i) + ": a read (" + what + ") by " +
                               thread_text(tid) + " at " + site_name(site);
      if (s.bar_byte[i]) fail(head + " of the bytes of an mbarrier");
      fail(head + " of a byte the TMA load issued at " + site_name(s.tma_pending[i]) +
           " has not landed (its mbarrier phase has not completed)");
    }
    landed = landed || s.landing[i].bar != SIZE_MAX;
  }
  if (landed && tid >= 0) {
    std::vector<size_t> offs;
    for (size_t i = off; i < off + n; ++i) offs.push_back(i);
    require_acquired(offs, tid, 1, std::string("a read (") + what + ") at " + site_name(site));
  }
}

void async_block_begin(int threads, int smem) {
  State& s = state();
  const size_t n = static_cast<size_t>(smem);
  s.threads = threads;
  s.smem = n;
  s.bars.clear();
  std::fill_n(s.bar_byte.begin(), n, 0);
  std::fill_n(s.tma_pending.begin(), n, 0);
  std::fill_n(s.readers.begin(), n, 0);
  std::fill_n(s.unfenced.begin(), n, kNoWriter);
  std::fill_n(s.landing.begin(), n, Landing{});
  s.unfenced_ranges.assign(static_cast<size_t>(threads) + 1, {});
  s.observed.assign(static_cast<size_t>(threads), {});
  s.loads.clear();
  s.groups.assign(static_cast<size_t>((threads + 127) / 128), Warpgroup{});
  const Dim3& b = block_idx;
  s.rng.seed(uint64_t{b.x} * 0x9E3779B97F4A7C15ull ^ uint64_t{b.y} << 24 ^ b.z);
}

void async_block_barrier() {
  State& s = state();
  if (s.bars.empty()) return;
  std::map<size_t, unsigned> all;
  for (const auto& t : s.observed)
    for (const auto& [bar, phase] : t) all[bar] = std::max(all[bar], phase);
  for (auto& t : s.observed) t = all;
}

void async_block_end() {
  State& s = state();
  if (!s.loads.empty())
    fail(block_text() + "the block ended with the TMA load issued at " + site_name(s.loads.front().site) +
         " still in flight (no thread waited for its mbarrier phase)");
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const Warpgroup& w = s.groups[g];
    const WgmmaOp* op = !w.open.empty() ? &w.open.front() : nullptr;
    for (const auto& gr : w.groups)
      if (!op && !gr.empty()) op = &gr.front();
    if (op)
      fail(block_text() + "warpgroup " + std::to_string(g) + " ended with the wgmma issued at " + site_name(op->site) +
           " never retired by wgmma.wait_group");
  }
}

}  // namespace detail
}  // namespace emu

namespace flashattn::gpu::detail::sm90 {

namespace {
constexpr uint32_t kMapMagic = 0x544D4150;  // "TMAP": written by this encode_tensor_map
struct StoredMap {
  uint32_t magic;
  TensorMapSpec spec;
};
static_assert(sizeof(StoredMap) <= sizeof(CUtensorMap), "the emulated tensor map must fit CUtensorMap");
}  // namespace

void encode_tensor_map(CUtensorMap* map, const TensorMapSpec& s) {
  const std::string problem = tensor_map_problem(s);
  if (!problem.empty()) throw std::invalid_argument("tensor map: " + problem);
  StoredMap stored{kMapMagic, s};
  std::memset(map, 0, sizeof(CUtensorMap));
  std::memcpy(map, &stored, sizeof stored);
}

// The spec of a map encode_tensor_map wrote (sm90_emu.hpp's tma_load_Nd).
TensorMapSpec decode_tensor_map(const CUtensorMap* map) {
  StoredMap stored{};
  std::memcpy(static_cast<void*>(&stored), map, sizeof stored);
  if (stored.magic != kMapMagic)
    emu::detail::fail("emu: a TMA load's tensor map was not written by encode_tensor_map");
  return stored.spec;
}

}  // namespace flashattn::gpu::detail::sm90
