// libFuzzer target: every backend, given decoded (often hostile) arguments over small buffers, must
// either compute (and, where the inputs are tame, agree with the oracle by the tolerance rule of
// props/tolerance.hpp, the one the property suite uses) or throw flashattn::Error
// without writing anything. It must never crash, hang, throw anything else, or touch a byte outside
// the views it was given (AddressSanitizer watches the buffers' edges; the checks below watch the
// bytes between views).
//
// With FLASHATTN_FUZZ_MODE=validate only the argument checks run: cases validate() rejects still go
// to every backend (each must throw flashattn::Error and write nothing), cases it accepts are not
// computed. Many times the executions per second of the full mode, so a short run (CI's) covers far
// more argument combinations; the full mode runs in the long verification.
//
// validate() cannot know how large the caller's buffers are, so when it accepts a case the harness
// itself checks that every view lies inside one of its buffers (and that the problem is small enough
// to finish quickly) before calling a backend; cases that fail this are skipped.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "flashattn/convert.hpp"
#include "flashattn/error.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/reference.hpp"
#include "flashattn/validate.hpp"
#include "fuzz_case.hpp"
#include "tolerance/judge.hpp"
#ifdef FLASHATTN_FUZZ_CPU
#include "flashattn/cpu.hpp"
#endif

namespace flashattn::fuzz {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 16;  // per tensor, counting broadcast (stride 0) views
constexpr int64_t kMaxWork = int64_t{1} << 22;      // B·Hq·Nq·Nk·d: keeps one case well under a second
constexpr unsigned char kPoison = 0xA5;             // written to output buffers before each call

[[noreturn]] void die(const FuzzCase& c, const std::string& what) {
  std::fprintf(stderr, "fuzz check failed: %s\ncase: %s\n", what.c_str(), c.trace.c_str());
  std::abort();
}

struct Backend {
  const char* name;
  bool may_reject_valid;  // may throw Error on arguments validate() accepts (unsupported options)
  std::function<void(const FuzzCase&)> forward, backward;
};

std::vector<Backend> backends() {
  using reference::Precision;
  std::vector<Backend> r = {
      {"reference fp64", false, [](const FuzzCase& c) { reference::forward(c.args.forward(), Precision::fp64); },
       [](const FuzzCase& c) { reference::backward(c.args.backward(), Precision::fp64); }},
      {"reference same_as_input", false,
       [](const FuzzCase& c) { reference::forward(c.args.forward(), Precision::same_as_input); },
       [](const FuzzCase& c) { reference::backward(c.args.backward(), Precision::same_as_input); }}};
#ifdef FLASHATTN_FUZZ_CPU
  // Tile sizes, threads, backward passes and SIMD target come from the case, so small problems reach every tile path.
  auto config = [](const FuzzCase& c) {
    constexpr int kBlocks[] = {0, 1, 2, 3, 4, 8, 16, 64};
    static const std::vector<cpu::Target> targets = cpu::targets();
    cpu::Config cfg;
    cfg.block_q = kBlocks[c.config_choice[0] % 8];
    cfg.block_k = kBlocks[c.config_choice[1] % 8];
    cfg.threads = c.config_choice[2] % 3;
    cfg.backward_blocks = c.config_choice[2] / 3 % 5;  // 0 (default) .. 4 query blocks per backward pass
    if (!targets.empty()) cfg.target = targets[c.config_choice[3] % targets.size()].bit;
    return cfg;
  };
  r.push_back({"cpu", true, [config](const FuzzCase& c) { cpu::forward(c.args.forward(), config(c)); },
               [config](const FuzzCase& c) { cpu::backward(c.args.backward(), config(c)); }});
#endif
  return r;
}

bool has_elements(const Tensor& t) { return t.batch > 0 && t.seq > 0 && t.heads > 0 && t.dim > 0; }

// Element count of t (saturating far above kMaxElements).
__int128 elements(const Tensor& t) { return static_cast<__int128>(t.batch) * t.seq * t.heads * t.dim; }

int64_t span_bytes(const Tensor& t) {
  const int64_t last = (t.batch - 1) * t.stride_batch + (t.seq - 1) * t.stride_seq + (t.heads - 1) * t.stride_head + t.dim - 1;
  return (last + 1) * static_cast<int64_t>(dtype_size(t.dtype));
}

std::vector<const Tensor*> inputs_and_outputs(const FuzzCase& c) {
  const CallFields& a = c.args;
  if (!c.backward) return {&a.q, &a.k, &a.v, &a.out};
  return {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv};
}

// Returns whether a call validate() accepted stays inside the case's buffers and is small.
bool fits(const FuzzCase& c) {
  const CallFields& a = c.args;
  for (const Tensor* t : inputs_and_outputs(c)) {
    if (elements(*t) > kMaxElements) return false;
    if (has_elements(*t) && !inside_buffer(c, t->data, span_bytes(*t))) return false;
  }
  // dsinks must be the case's own [Hq] array (validate cannot know how long another buffer is).
  if (c.backward && a.dsinks && (a.dsinks != c.dsinks.data.get() || a.q.heads > c.dsinks.count)) return false;
  // The bias as read (stride 0 in its size-1 dimensions), dbias and the keep mask inside buffers.
  const ForwardArgs f = a.forward();
  if (has_bias(f)) {
    const ConstTensor b = bias_view(f);
    const Tensor bt{const_cast<void*>(b.data), b.dtype, b.batch, b.seq, b.heads, b.dim, b.stride_batch, b.stride_seq, b.stride_head};
    if (elements(bt) > kMaxElements) return false;
    if (has_elements(bt) && !inside_buffer(c, b.data, span_bytes(bt))) return false;
  }
  if (a.block_mask.bits.data) {  // the bits' extent (validated sizes and strides) inside their buffer
    const BitMask& b = a.block_mask.bits;
    const int64_t row = (key_columns(f) + 7) / 8;
    const __int128 last = static_cast<__int128>(b.batch > 1 ? b.batch - 1 : 0) * b.stride_batch +
                          static_cast<__int128>(b.seq > 1 ? b.seq - 1 : 0) * b.stride_seq +
                          static_cast<__int128>(b.heads > 1 ? b.heads - 1 : 0) * b.stride_head + row;
    if (last > kMaxElements || !inside_buffer(c, b.data, static_cast<int64_t>(last))) return false;
  }
  if (c.backward && view_set(a.dbias)) {
    if (elements(a.dbias) > kMaxElements) return false;
    if (has_elements(a.dbias) && !inside_buffer(c, a.dbias.data, span_bytes(a.dbias))) return false;
  }
  if (!c.backward && a.dropout_mask && a.q.batch * a.q.heads * a.q.seq > 0 &&
      !inside_buffer(c, a.dropout_mask, a.q.batch * a.q.heads * a.q.seq * dropout_mask_row_bytes(f)))
    return false;
  const int64_t keys = a.block_table ? a.block_table_pages * a.k.seq : a.k.seq;  // paged: the pages' capacity
  const __int128 work = static_cast<__int128>(a.q.batch) * a.q.heads * a.q.seq * keys * (a.q.dim + a.v.dim);
  if (work > kMaxWork) return false;
  const int64_t lse_count = a.q.batch * a.q.heads * a.q.seq;
  return a.lse == nullptr || lse_count == 0 || inside_buffer(c, a.lse, lse_count * 4);
}

using Snapshot = std::vector<std::vector<unsigned char>>;

Snapshot snapshot(const FuzzCase& c) {
  Snapshot s;
  for (const Buffer* b : all_buffers(c)) s.emplace_back(b->begin(), b->end());
  auto side = [&s](const auto& arr) {
    const auto* p = reinterpret_cast<const unsigned char*>(arr.data.get());
    s.emplace_back(p, p + arr.count * sizeof(arr.data[0]));
  };
  side(c.cu_q);
  side(c.cu_k);
  side(c.seqlens_k);
  side(c.alibi);
  side(c.sinks);
  side(c.block_table);
  side(c.dsinks);
  side(c.full_count);
  side(c.full_index);
  side(c.partial_count);
  side(c.partial_index);
  side(c.k_scales);
  side(c.v_scales);
  return s;
}

// The bytes an output view (or lse, dsinks) of this call may write, as ranges of the snapshot's
// arrays (snapshot() order: the buffers, then the side arrays). Kept as ranges so that poisoning and
// checking are memset/memcpy/memcmp: byte loops here ran a coverage callback per byte under the
// fuzzer.
struct Range {
  size_t index, offset, bytes;
};
using Writable = std::vector<Range>;

Writable writable_bytes(const FuzzCase& c) {
  Writable w;
  const std::vector<const Buffer*> buffers = all_buffers(c);
  auto mark = [&](const void* p, int64_t bytes) {
    const auto x = reinterpret_cast<uintptr_t>(p);
    for (size_t i = 0; i < buffers.size(); ++i) {
      const auto lo = reinterpret_cast<uintptr_t>(buffers[i]->begin());
      if (x >= lo && x + bytes <= lo + buffers[i]->size) w.push_back({i, x - lo, static_cast<size_t>(bytes)});
    }
  };
  auto mark_view = [&](const Tensor& t) {
    if (!has_elements(t)) return;
    const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
    for (int64_t b = 0; b < t.batch; ++b)
      for (int64_t s = 0; s < t.seq; ++s)
        for (int64_t h = 0; h < t.heads; ++h)
          mark(static_cast<const unsigned char*>(t.data) + t.offset(b, s, h) * es, t.dim * es);
  };
  const CallFields& a = c.args;
  // Of the side arrays only dsinks (the seventh, after cu_q, cu_k, seqlens_k, alibi, sinks and the
  // block table) is an output, when the call writes it there.
  if (c.backward && a.dsinks == c.dsinks.data.get())
    w.push_back({buffers.size() + 6, 0, static_cast<size_t>(c.dsinks.count * 4)});
  if (c.backward) {
    mark_view(a.dq);
    mark_view(a.dk);
    mark_view(a.dv);
    if (view_set(a.dbias)) mark_view(a.dbias);
  } else {
    mark_view(a.out);
    if (a.lse) mark(a.lse, a.q.batch * a.q.heads * a.q.seq * 4);
    if (a.dropout_mask) mark(a.dropout_mask, a.q.batch * a.q.heads * a.q.seq * dropout_mask_row_bytes(a.forward()));
  }
  return w;
}

void poison_outputs(const FuzzCase& c, const Writable& writable) {
  const std::vector<const Buffer*> buffers = all_buffers(c);
  for (const Range& r : writable)
    if (r.index < buffers.size() && r.bytes > 0) std::memset(buffers[r.index]->begin() + r.offset, kPoison, r.bytes);
}

// Dies if any byte outside the writable set differs from the snapshot (all bytes when none is).
void check_untouched(const FuzzCase& c, const Snapshot& before, const Writable* writable, const std::string& who) {
  Snapshot after = snapshot(c);
  if (writable)  // the bytes the call may write compare equal by construction
    for (const Range& r : *writable)
      if (r.bytes > 0) std::memcpy(after[r.index].data() + r.offset, before[r.index].data() + r.offset, r.bytes);
  for (size_t i = 0; i < after.size(); ++i)
    if (after[i] != before[i]) {
      const size_t k = static_cast<size_t>(std::mismatch(after[i].begin(), after[i].end(), before[i].begin()).first - after[i].begin());
      die(c, who + " changed byte " + std::to_string(k) + " of buffer " + std::to_string(i) + " outside its outputs");
    }
}

// Runs a case validate() rejected: every backend must throw Error and write nothing.
void run_invalid(const FuzzCase& c, const std::string& message) {
  for (const Backend& b : backends()) {
    const Snapshot before = snapshot(c);
    try {
      (c.backward ? b.backward : b.forward)(c);
      die(c, std::string(b.name) + " accepted arguments validate() rejects: " + message);
    } catch (const Error&) {
    } catch (const std::exception& e) {
      die(c, std::string(b.name) + " threw a non-flashattn exception: " + e.what());
    }
    check_untouched(c, before, nullptr, b.name);
  }
}

// Runs a case validate() accepted: every backend computes (or rejects an unsupported option with
// Error) writing only its outputs; on tame inputs the optimised backends agree with the oracle.
void run_valid(FuzzCase& c) {
  using reference::Precision;
  const CallFields& a = c.args;
  if (c.backward) {
    // Make out and lse the forward's results, as a real backward call has them (when the forward
    // part is itself a valid forward call: out may alias an input in a backward call). The forward
    // part writes no keep mask: a backward call has none, and fits() does not bound a hostile
    // dropout_mask pointer of a backward case.
    ForwardArgs f = a.forward();
    f.dropout_mask = nullptr;
    try {
      validate(f);
      reference::forward(f);
    } catch (const Error&) {
      c.tame = false;
    }
  }
  const auto writable = writable_bytes(c);
  for (const Backend& b : backends()) {
    poison_outputs(c, writable);
    const Snapshot before = snapshot(c);
    try {
      (c.backward ? b.backward : b.forward)(c);
    } catch (const Error& e) {
      if (!b.may_reject_valid) die(c, std::string(b.name) + " rejected arguments validate() accepts: " + e.what());
      check_untouched(c, before, nullptr, b.name);
      continue;
    } catch (const std::exception& e) {
      die(c, std::string(b.name) + " threw a non-flashattn exception: " + e.what());
    }
    check_untouched(c, before, &writable, b.name);
    if (!c.tame || !b.may_reject_valid) continue;  // the oracle is compared with itself by construction
    // The suite's one tolerance rule (props/tolerance.hpp), exactly as the property suite applies it.
    const std::string failure =
        c.backward ? flashattn::tolerance::judge_backward(a.backward()).first_failure() : flashattn::tolerance::judge_forward(a.forward()).first_failure();
    if (!failure.empty()) die(c, std::string(b.name) + ": " + failure);
  }
}

}  // namespace

bool validate_only() {
  static const bool only = [] {
    const char* mode = std::getenv("FLASHATTN_FUZZ_MODE");
    return mode && std::string(mode) == "validate";
  }();
  return only;
}

}  // namespace flashattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flashattn;
  fuzz::FuzzCase c;
  if (!fuzz::decode(data, size, c)) return 0;
  std::string message;
  try {
    if (c.backward)
      validate(c.args.backward());
    else
      validate(c.args.forward());
  } catch (const Error& e) {
    message = e.what();
  }
  if (!message.empty())
    fuzz::run_invalid(c, message);
  else if (!fuzz::validate_only() && fuzz::fits(c))
    fuzz::run_valid(c);
  return 0;
}
