// The ranks' agreement on one call (agree.hpp).
#include "agree.hpp"

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/validate.hpp"

namespace flashattn::ring::detail {
namespace {

constexpr size_t kMessageBytes = 512;

// What every rank must share, and its shard lengths. Plain data: exchanged as bytes.
struct Record {
  int64_t kind = 0;  // 1 forward, 2 backward
  int64_t ok = 0;    // this rank's arguments passed validation
  int64_t nq = 0, nk = 0;
  int64_t batch = 0, heads_q = 0, heads_k = 0, dim = 0, dim_v = 0, dtype = 0, sharding = 0;
  int64_t causal = 0, window_left = 0, window_right = 0, diagonal_offset = 0;
  int64_t scale_set = 0, scale_bits = 0, softcap_bits = 0;
  int64_t alibi = 0, alibi_batch_stride = 0, alibi_hash = 0;
  int64_t sinks = 0, sinks_hash = 0, dsinks = 0;  // dsinks: collective (an all-gather); lse is not
  char message[kMessageBytes] = {};
};

int64_t float_bits(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// FNV-1a of n floats (ALiBi slopes, sinks): the ranks must pass the same values.
int64_t hash_floats(const float* x, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(x);
  for (int64_t i = 0; i < n * static_cast<int64_t>(sizeof(float)); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

// The options a ring call cannot honour: they describe per-sequence or per-cache layouts that the
// shards' global positions do not (yet) carry.
void check_supported(const AttentionArgs& a) {
  if (a.seqlens_k) throw Error("seqlens_k is not supported by ring attention (shard only the valid keys)");
  if (a.cu_seqlens_q || a.cu_seqlens_k) throw Error("varlen (cu_seqlens_q/k) is not supported by ring attention");
  if (a.block_table) throw Error("paged K/V (block_table) is not supported by ring attention");
  if (has_bias(a)) throw Error("an additive bias is not supported by ring attention (yet)");
  if (a.block_mask.used()) throw Error("a block-sparse mask (block_mask) is not supported by ring attention (yet)");
  if (a.dropout_p != 0) throw Error("dropout is not supported by ring attention (yet)");
}

void check_backend(const AttentionArgs& a, const Options& o) {
  if (!o.backend) return;
  const std::string why = o.backend->unsupported(a);
  if (!why.empty()) throw Error("the ring's block backend cannot compute this call: " + why);
}

Record describe(const AttentionArgs& a, int64_t kind, bool dsinks, const Options& o) {
  Record r;
  r.kind = kind;
  r.nq = a.q.seq;
  r.nk = a.k.seq;
  r.batch = a.q.batch;
  r.heads_q = a.q.heads;
  r.heads_k = a.k.heads;
  r.dim = a.q.dim;
  r.dim_v = a.v.dim;
  r.dtype = static_cast<int64_t>(a.q.dtype);
  r.sharding = static_cast<int64_t>(o.sharding);
  r.causal = a.causal;
  r.window_left = a.window_left;
  r.window_right = a.window_right;
  r.diagonal_offset = a.diagonal_offset;
  r.scale_set = a.scale.has_value();
  r.scale_bits = a.scale ? float_bits(*a.scale) : 0;
  r.softcap_bits = float_bits(a.softcap);
  r.alibi = a.alibi_slopes != nullptr;
  r.alibi_batch_stride = a.alibi_batch_stride;
  if (a.alibi_slopes)
    r.alibi_hash = hash_floats(a.alibi_slopes, a.alibi_batch_stride ? a.q.batch * a.alibi_batch_stride : a.q.heads);
  r.sinks = a.sinks != nullptr;
  if (a.sinks) r.sinks_hash = hash_floats(a.sinks, a.q.heads);
  r.dsinks = dsinks;
  return r;
}

// Runs `check` (this rank's validation) and, when it passes, `describe` (which reads the side
// arrays), exchanges the records and checks them on every rank.
Agreed exchange(const std::function<void()>& check, const std::function<Record()>& describe, Transport& t) {
  Record mine;
  try {
    check();
    mine = describe();
    mine.ok = 1;
  } catch (const std::exception& e) {
    std::string m = e.what();
    const std::string prefix = "flashattn: ";
    if (m.compare(0, prefix.size(), prefix) == 0) m = m.substr(prefix.size());
    std::strncpy(mine.message, m.c_str(), kMessageBytes - 1);
  }
  const int R = t.size();
  std::vector<Record> all(R);
  t.allgather(&mine, all.data(), sizeof(Record));
  for (int r = 0; r < R; ++r)
    if (!all[r].ok) throw Error("ring: rank " + std::to_string(r) + ": " + all[r].message);
  struct Field {
    const char* name;
    int64_t Record::*member;
  };
  static const Field fields[] = {
      {"call (1 forward, 2 backward)", &Record::kind}, {"q.batch", &Record::batch},
      {"q.heads", &Record::heads_q},     {"k.heads", &Record::heads_k},
      {"q.dim", &Record::dim},           {"v.dim", &Record::dim_v},
      {"dtype", &Record::dtype},         {"sharding", &Record::sharding},
      {"causal", &Record::causal},       {"window_left", &Record::window_left},
      {"window_right", &Record::window_right}, {"diagonal_offset", &Record::diagonal_offset},
      {"scale (set)", &Record::scale_set}, {"scale (bits)", &Record::scale_bits},
      {"softcap (bits)", &Record::softcap_bits}, {"alibi_slopes (set)", &Record::alibi},
      {"alibi_batch_stride", &Record::alibi_batch_stride}, {"alibi_slopes (values)", &Record::alibi_hash},
      {"sinks (set)", &Record::sinks},   {"sinks (values)", &Record::sinks_hash},
      {"dsinks (set)", &Record::dsinks},
  };
  for (int r = 1; r < R; ++r)
    for (const Field& f : fields)
      if (all[r].*f.member != all[0].*f.member)
        throw Error("ring: rank " + std::to_string(r) + " has " + f.name + " = " + std::to_string(all[r].*f.member) +
                    " but rank 0 has " + std::to_string(all[0].*f.member) +
                    " (every rank must pass the same batch, heads, head dims, dtype, sharding and options)");
  Agreed g;
  for (const Record& r : all) {
    g.nq.push_back(r.nq);
    g.nk.push_back(r.nk);
  }
  return g;
}

}  // namespace

Agreed agree(const ForwardArgs& a, Transport& t, const Options& o) {
  return exchange(
      [&] {
        validate(a);
        check_supported(a);
        check_backend(a, o);
        if (a.append.used()) throw Error("the KV-cache append is not supported by ring attention");
        if (is_quantized(a.k.dtype))
          throw Error(std::string("quantized K/V (k.dtype ") + dtype_name(a.k.dtype) + ") are not supported by ring attention");
        if (a.dropout_mask) throw Error("dropout (dropout_mask) is not supported by ring attention (yet)");
      },
      [&] { return describe(a, 1, false, o); }, t);
}

Agreed agree(const BackwardArgs& a, Transport& t, const Options& o) {
  return exchange(
      [&] {
        validate(a);
        check_supported(a);
        check_backend(a, o);
      },
      [&] { return describe(a, 2, a.dsinks != nullptr, o); }, t);
}

}  // namespace flashattn::ring::detail
