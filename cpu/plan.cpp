// The per-call plan and the sizes of the call-wide buffers (see plan.h).
#include "plan.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"

namespace flashattn::cpu::detail {
namespace {

std::atomic<uint64_t> g_next_call_id{1};

// Returns the most rows any sequence has in cu (varlen) or `rows` (fixed batch).
int64_t max_rows(const int32_t* cu, int64_t count, int64_t rows) {
  if (!cu) return rows;
  int64_t m = 0;
  for (int64_t s = 0; s < count; ++s) m = std::max<int64_t>(m, cu[s + 1] - cu[s]);
  return m;
}

// Returns the size in bytes of cpu0's data or unified cache of `level` as /sys lists it ("32K"), or 0.
int64_t sys_cache_bytes(int level) {
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream lf(dir + "level"), tf(dir + "type"), sf(dir + "size");
    int l = 0;
    std::string type, size;
    if (!(lf >> l)) break;
    if (l != level || !(tf >> type) || type == "Instruction" || !(sf >> size)) continue;
    const int64_t n = std::atoll(size.c_str());
    const char unit = size.empty() ? 'B' : size.back();
    return unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : n;
  }
  return 0;
}

// Returns the cache size from sysconf (glibc reads CPUID), else /sys, else 0.
int64_t cache_bytes(int sysconf_name, int level) {
  const long n = sysconf(sysconf_name);
  return n > 0 ? n : sys_cache_bytes(level);
}

}  // namespace

CacheSizes detected_caches() {
  const CacheSizes read = cache_sizes();
  return {read.l1d > 0 ? read.l1d : kFallbackCaches.l1d, read.l2 > 0 ? read.l2 : kFallbackCaches.l2};
}

}  // namespace flashattn::cpu::detail

namespace flashattn::cpu {

CacheSizes cache_sizes() {
  static const CacheSizes caches{detail::cache_bytes(_SC_LEVEL1_DCACHE_SIZE, 1),
                                 detail::cache_bytes(_SC_LEVEL2_CACHE_SIZE, 2)};
  return caches;
}

}  // namespace flashattn::cpu

namespace flashattn::cpu::detail {

int64_t default_block_k(const CacheSizes& caches, int64_t dpad, int64_t element_bytes) {
  const int64_t bytes = element_bytes;
  int64_t k = kMaxDefaultBlockK;
  while (k > kMinDefaultBlockK &&
         (3 * k * kDefaultBlockQ * bytes > 2 * caches.l1d || 8 * 2 * k * dpad * bytes > caches.l2))
    k /= 2;
  return k;
}

int64_t default_key_tile(const AttentionArgs& a, const Plan& p, bool backward, int64_t element_bytes) {
  const int64_t k = default_block_k(detected_caches(), p.dpad, element_bytes);
  return backward && a.causal && p.max_k <= kShortCausalKeys ? std::min(k, kBackwardCausalBlockK) : k;
}

// Returns the largest divisor of `block` (>= 1) that is at most `tile` (>= 1).
int64_t divisor_tile(int64_t block, int64_t tile) {
  for (int64_t t = std::min(block, tile); t > 1; --t)
    if (block % t == 0) return t;
  return 1;
}

void align_to_block_mask(Plan& p, const AttentionArgs& a) {
  if (!a.block_mask.used()) return;
  p.block_q = divisor_tile(a.block_mask.block_q, p.block_q);
  p.block_k = divisor_tile(a.block_mask.block_k, p.block_k);
  p.qpad = round_up(p.block_q, kMaxLanes);
}

void check_config(const Config& c) {
  if (c.block_q < 0) throw Error("cpu::Config.block_q (" + std::to_string(c.block_q) + ") must be >= 0");
  if (c.block_k < 0) throw Error("cpu::Config.block_k (" + std::to_string(c.block_k) + ") must be >= 0");
  if (c.backward_blocks < 0 || c.backward_blocks > kMaxPassBlocks)
    throw Error("cpu::Config.backward_blocks (" + std::to_string(c.backward_blocks) + ") must be in [0, " +
                std::to_string(kMaxPassBlocks) + "]");
  if (c.threads < 0) throw Error("cpu::Config.threads (" + std::to_string(c.threads) + ") must be >= 0");
  if (c.decode_heads < 0 || c.decode_heads > kMaxDecodeHeads)
    throw Error("cpu::Config.decode_heads (" + std::to_string(c.decode_heads) + ") must be in [0, " +
                std::to_string(kMaxDecodeHeads) + "]");
  if (c.scores != ScorePrecision::adaptive && c.scores != ScorePrecision::fp64 && c.scores != ScorePrecision::fp32)
    throw Error("cpu::Config.scores (" + std::to_string(static_cast<int>(c.scores)) +
                ") must be ScorePrecision::adaptive, fp64 or fp32");
}

Plan make_plan(const AttentionArgs& a, const Config& c, bool backward) {
  check_config(c);
  Plan p;
  p.dim = a.q.dim;
  p.block_q = c.block_q > 0 ? c.block_q : kDefaultBlockQ;
  p.qpad = round_up(p.block_q, kMaxLanes);
  p.dpad = round_up(std::max<int64_t>(p.dim, 1), kMaxLanes);
  p.threads = c.threads > 0 ? c.threads : omp_get_max_threads();
  const int64_t nseq = num_sequences(a);
  p.max_q = max_rows(a.cu_seqlens_q, nseq, a.q.seq);
  // Paged K/V: a sequence holds up to its pages' capacity, gathered into the fp32 head copy.
  p.max_k = a.block_table ? a.block_table_pages * a.k.seq : max_rows(a.cu_seqlens_k, nseq, a.k.seq);
  p.block_k = c.block_k > 0 ? c.block_k : default_key_tile(a, p, backward, sizeof(float));
  if (backward) {  // the backward's own defaults (plan.h)
    const int64_t head_bytes = 4 * p.max_k * p.dpad * static_cast<int64_t>(sizeof(float));
    p.pass_blocks = c.backward_blocks > 0 ? c.backward_blocks : head_bytes > kBackwardHeadBytes ? kDefaultPassBlocks : 1;
    p.pass_blocks = std::max<int64_t>(std::min(p.pass_blocks, ceil_div(p.max_q, p.block_q)), 1);
  }
  p.group = a.k.heads > 0 ? a.q.heads / a.k.heads : 1;
  p.sequences = nseq;
  p.heads_q = a.q.heads;
  p.softcap = a.softcap > 0;
  p.bias = has_bias(a);
  p.dropout = a.dropout_p > 0;
  p.copy_kv = a.k.dtype != DType::f32 || a.k.stride_seq != p.dim || a.v.stride_seq != p.dim || a.block_table;
  p.kv_ld = kv_copy_stride(p.dim);
  // 16-bit results round far above the fp32 rounding of S; fp32 ones do not at large scores
  // (score-inl.h, "Exact scores").
  p.exact_scores = a.q.dtype == DType::f32 && c.scores != ScorePrecision::fp32;
  p.renormalize = c.renormalize;
  p.scores = c.scores;
  p.call_id = g_next_call_id.fetch_add(1);
  align_to_block_mask(p, a);
  return p;
}

// Forward, per call: with copied k, v (kv.h) shared_kv_slots fp32 copies of one head's k and v [max_k x kv_ld].
size_t forward_shared_floats(const Plan& p) {
  return p.copy_kv ? static_cast<size_t>(shared_kv_slots(p)) * 2 * static_cast<size_t>(p.max_k * p.kv_ld) : 0;
}

// dK and dV partials in fp32, [sequence][query head][max_k][d] each.
size_t backward_partial_floats(const Plan& p) {
  return p.group > 1 ? 2 * static_cast<size_t>(p.sequences * p.heads_q * p.max_k * p.dim) : 0;
}

}  // namespace flashattn::cpu::detail
