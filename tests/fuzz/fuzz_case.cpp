// Decodes fuzzer bytes into a FuzzCase (see fuzz_case.hpp).
#include "fuzz_case.hpp"

#include <cfloat>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "byte_reader.hpp"
#include "flashattn/convert.hpp"
#include "flashattn/reference.hpp"

namespace flashattn::fuzz {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

// Sizes, strides, window values and counts that sit on the boundaries validation must get right.
constexpr int64_t kHostileI64[] = {0,  1,  -1, 2,  3,     7,          8,          9,
                                   64, 65, -2, 46341, 3037000500, 2147483647, int64_t{1} << 31,
                                   int64_t{1} << 32, int64_t{1} << 62, kI64Max, kI64Min, kI64Min + 1};
constexpr int32_t kHostileI32[] = {0, 1, -1, 2, 3, 5, 6, 100, 2147483647, -2147483647 - 1};
// Non-finite, huge, tiny and subnormal floats (for scale, softcap, ALiBi slopes and input values).
const float kHostileF32[] = {0.0f,
                             1.0f,
                             -1.0f,
                             0.125f,
                             1e4f,
                             -1e4f,
                             1e30f,
                             1e-30f,
                             FLT_MIN / 4,  // subnormal
                             FLT_MAX,
                             -FLT_MAX,
                             65504.0f,        // largest finite f16
                             3.3895314e38f,   // largest finite bf16
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
constexpr int64_t kHeadDims[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 33, 64};
constexpr int64_t kWindows[] = {-1, 0, 1, 2, 5};
constexpr int64_t kMaxFuzzOffset = 6;  // diagonal_offset drawn in [-6, 6]
constexpr std::optional<float> kScales[] = {std::nullopt, std::nullopt, 0.0f, 0.5f, 1.0f, -0.5f, 2.0f};  // nullopt: 1/sqrt(d)
constexpr float kSoftcaps[] = {0.0f, 0.0f, 0.0f, 1.0f, 5.0f, 30.0f};
constexpr float kSlopes[] = {0.0f, 0.0625f, 0.25f, 0.5f, 1.0f};
constexpr float kInputRange = 2.0f;  // inputs are uniform in [-kInputRange, kInputRange]

constexpr const char* kTensorNames[] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};
constexpr Slot kTensorSlots[] = {kQ, kK, kV, kOut, kDout, kDq, kDk, kDv};
constexpr int kNumTensors = 8;

template <class T, size_t N>
constexpr unsigned count_of(const T (&)[N]) { return N; }

Tensor& tensor(FuzzCase& c, int t) {
  CallFields& a = c.args;
  Tensor* all[kNumTensors] = {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv};
  return *all[t];
}

// Returns a hostile int64: a boundary value, or `current` moved by a small signed step.
int64_t hostile_i64(ByteReader& r, int64_t current) {
  if (r.chance(128)) return kHostileI64[r.pick(count_of(kHostileI64))];
  const int64_t step = r.take<int8_t>();
  int64_t out;
  return __builtin_add_overflow(current, step, &out) ? current : out;
}

int32_t hostile_i32(ByteReader& r, int32_t current) {
  if (r.chance(128)) return kHostileI32[r.pick(count_of(kHostileI32))];
  const int64_t v = int64_t{current} + r.take<int8_t>();
  return v < INT32_MIN || v > INT32_MAX ? current : static_cast<int32_t>(v);
}

float hostile_f32(ByteReader& r) { return kHostileF32[r.pick(count_of(kHostileF32))]; }

// Returns the largest element offset of t (t has sizes > 0 and non-negative strides).
int64_t last_offset(const Tensor& t) {
  return (t.batch - 1) * t.stride_batch + (t.seq - 1) * t.stride_seq + (t.heads - 1) * t.stride_head + t.dim - 1;
}

// Gives t its layout (chosen by the reader) over sizes already set: bshd, bhsd, padded, or (inputs)
// broadcast over the batch.
void choose_layout(ByteReader& r, Tensor& t, bool input, std::string& trace) {
  const int64_t B = t.batch, N = t.seq, H = t.heads, d = t.dim;
  switch (r.pick(4)) {
    case 0: t = bshd(nullptr, t.dtype, B, N, H, d); trace += "bshd "; break;
    case 1: t = bhsd(nullptr, t.dtype, B, N, H, d); trace += "bhsd "; break;
    case 2: {
      const int64_t ph = r.pick(4), ps = r.pick(4), pb = r.pick(4);
      t.stride_head = d + ph;
      t.stride_seq = H * t.stride_head + ps;
      t.stride_batch = N * t.stride_seq + pb;
      trace += "padded(" + std::to_string(ph) + "," + std::to_string(ps) + "," + std::to_string(pb) + ") ";
      break;
    }
    default:
      t = bshd(nullptr, t.dtype, B, N, H, d);
      if (input) {
        t.stride_batch = 0;
        trace += "broadcast ";
      } else {
        trace += "bshd ";
      }
  }
}

// Allocates the buffer of slot s to exactly span view t and points t at it.
void allocate(FuzzCase& c, Slot s, Tensor& t) {
  const bool has_elements = t.batch > 0 && t.seq > 0 && t.heads > 0 && t.dim > 0;
  const int64_t bytes = has_elements ? (last_offset(t) + 1) * static_cast<int64_t>(dtype_size(t.dtype)) : 0;
  Buffer& b = c.buffers[s];
  b.size = static_cast<size_t>(bytes);
  b.bytes.reset(new unsigned char[b.size > 0 ? b.size : 1]);  // a distinct address even when empty
  t.data = b.begin();
}

// Returns t, or f16 (a 2-byte stand-in, matching dtype_size) when t is not a DType value.
DType storage_type(DType t) { return t == DType::f32 || t == DType::bf16 ? t : DType::f16; }

// Fills buffer b with values uniform in [-range, range] (stored in dtype t) from a xorshift stream.
void fill(Buffer& b, DType dtype, uint32_t seed, float lo, float hi) {
  const DType t = storage_type(dtype);
  uint32_t x = seed | 1u;
  const size_t n = b.size / dtype_size(t);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    const float u = static_cast<float>(x >> 8) * 0x1p-24f;
    store_from_float(b.begin(), t, static_cast<int64_t>(i), lo + (hi - lo) * u);
  }
}

// Returns the number of elements array `p` has, if p points at the start of one of the case's side
// arrays (-1 otherwise).
int64_t side_count(const FuzzCase& c, const void* p) {
  if (p == nullptr) return 0;
  if (p == c.cu_q.data.get()) return c.cu_q.count;
  if (p == c.cu_k.data.get()) return c.cu_k.count;
  if (p == c.seqlens_k.data.get()) return c.seqlens_k.count;
  if (p == c.alibi.data.get()) return c.alibi.count;
  if (p == c.sinks.data.get()) return c.sinks.count;
  if (p == c.block_table.data.get()) return c.block_table.count;
  for (const SideArray<int32_t>* l : {&c.full_count, &c.full_index, &c.partial_count, &c.partial_index})
    if (p == l->data.get()) return l->count;
  if (p == c.k_scales.data.get()) return c.k_scales.count;
  if (p == c.v_scales.data.get()) return c.v_scales.count;
  return -1;
}

// Returns the bytes from p to the end of the buffer holding it (0 if none holds it).
size_t room_after(const FuzzCase& c, const void* p) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  for (const Buffer* bp : all_buffers(c)) {
    const Buffer& b = *bp;
    const auto lo = reinterpret_cast<uintptr_t>(b.begin()), hi = reinterpret_cast<uintptr_t>(b.end());
    if (p != nullptr && x >= lo && x <= hi) return hi - x;
  }
  return 0;
}

// Decodes the consistent problem the mutations start from.
void decode_base(ByteReader& r, FuzzCase& c) {
  CallFields& a = c.args;
  c.backward = r.chance(96);
  const uint8_t dt = r.take<uint8_t>();
  const DType dtype = static_cast<DType>(dt >= 250 ? dt : dt % 3);  // now and then not a DType
  const int64_t hk = 1 + r.pick(3), group = 1 + r.pick(3), d = kHeadDims[r.pick(count_of(kHeadDims))];
  const bool varlen = r.chance(64);
  int64_t batch = r.pick(4), nq = r.pick(10), nk = r.pick(10), nseq = batch;
  c.trace = std::string(c.backward ? "backward" : "forward") + " dtype=" + std::to_string(dt) +
            " hk=" + std::to_string(hk) + " group=" + std::to_string(group) + " d=" + std::to_string(d);
  if (varlen) {
    nseq = 1 + r.pick(3);
    c.cu_q.resize(nseq + 1);
    c.cu_k.resize(nseq + 1);
    int64_t longest_q = 0, longest_k = 0;
    for (int64_t s = 0; s < nseq; ++s) {
      const int32_t lq = static_cast<int32_t>(r.pick(6)), lk = static_cast<int32_t>(r.pick(6));
      c.cu_q.data[s + 1] = c.cu_q.data[s] + lq;
      c.cu_k.data[s + 1] = c.cu_k.data[s] + lk;
      longest_q = std::max<int64_t>(longest_q, lq);
      longest_k = std::max<int64_t>(longest_k, lk);
    }
    batch = 1;
    nq = c.cu_q.data[nseq] + r.pick(3);  // packed rows, plus rows no sequence owns
    nk = c.cu_k.data[nseq] + r.pick(3);
    a.cu_seqlens_q = c.cu_q.data.get();
    a.cu_seqlens_k = c.cu_k.data.get();
    a.varlen_batch = nseq;
    if (r.chance(128)) {
      a.max_seqlen_q = longest_q;
      a.max_seqlen_k = longest_k;
    }
    c.trace += " varlen(" + std::to_string(nseq) + " seqs)";
  }
  c.trace += " B=" + std::to_string(batch) + " Nq=" + std::to_string(nq) + " Nk=" + std::to_string(nk) + " layouts: ";
  const int64_t hq = hk * group;
  c.dtype = dtype, c.batch = batch, c.nq = nq, c.nk = nk, c.hk = hk, c.hq = hq, c.d = d, c.varlen = varlen;
  for (int t = 0; t < kNumTensors; ++t) {
    Tensor& v = tensor(c, t);
    const bool key_side = t == 1 || t == 2 || t == 6 || t == 7;
    v = bshd(nullptr, dtype, batch, key_side ? nk : nq, key_side ? hk : hq, d);
    choose_layout(r, v, t < 3 || t == 4, c.trace);
    allocate(c, kTensorSlots[t], v);
  }
  // Key lengths per sequence.
  if (r.chance(64)) {
    c.seqlens_k.resize(nseq);
    for (int64_t s = 0; s < nseq; ++s) {
      const int64_t rows = varlen ? c.cu_k.data[s + 1] - c.cu_k.data[s] : nk;
      c.seqlens_k.data[s] = static_cast<int32_t>(r.pick(static_cast<unsigned>(rows + 1)));
    }
    a.seqlens_k = c.seqlens_k.data.get();
    c.trace += " seqlens_k";
  }
  // Mask and score options.
  a.causal = r.chance(96);
  if (r.chance(64)) a.window_left = kWindows[r.pick(count_of(kWindows))];
  if (r.chance(64)) a.window_right = kWindows[r.pick(count_of(kWindows))];
  if (r.chance(48)) a.diagonal_offset = static_cast<int64_t>(r.pick(2 * kMaxFuzzOffset + 1)) - kMaxFuzzOffset;
  a.scale = kScales[r.pick(count_of(kScales))];
  a.softcap = kSoftcaps[r.pick(count_of(kSoftcaps))];
  if (r.chance(48)) {
    const bool per_seq = r.chance(128);
    a.alibi_batch_stride = per_seq ? hq + r.pick(2) : 0;
    c.alibi.resize(per_seq ? nseq * a.alibi_batch_stride : hq);
    for (int64_t i = 0; i < c.alibi.count; ++i) c.alibi.data[i] = kSlopes[r.pick(count_of(kSlopes))];
    a.alibi_slopes = c.alibi.data.get();
    c.trace += " alibi(stride " + std::to_string(a.alibi_batch_stride) + ")";
  }
  c.trace += std::string(" causal=") + (a.causal ? "1" : "0") + " window=(" + std::to_string(a.window_left) + "," +
             std::to_string(a.window_right) + ") offset=" + std::to_string(a.diagonal_offset) + " scale=" + (a.scale ? std::to_string(*a.scale) : std::string("default")) +
             " softcap=" + std::to_string(a.softcap);
  // LSE: optional for the forward, required (an input) for the backward.
  Buffer& lse = c.buffers[kLse];
  lse.size = static_cast<size_t>(batch * hq * nq) * sizeof(float);
  lse.bytes.reset(new unsigned char[lse.size > 0 ? lse.size : 1]);
  if (c.backward || r.chance(192)) a.lse = reinterpret_cast<float*>(lse.begin());
  // Input values.
  for (Slot s : {kQ, kK, kV, kDout, kOut}) fill(c.buffers[s], dtype, r.take<uint32_t>(), -kInputRange, kInputRange);
  fill(lse, DType::f32, r.take<uint32_t>(), 0.0f, 2 * kInputRange);
}

// Overwrites one field of the case with a hostile value.
void mutate(ByteReader& r, FuzzCase& c) {
  CallFields& a = c.args;
  std::string& tr = c.trace;
  const int t = static_cast<int>(r.pick(kNumTensors));
  Tensor& v = tensor(c, t);
  const std::string name = kTensorNames[t];
  switch (r.pick(14)) {
    case 0: {  // a size
      int64_t* sizes[4] = {&v.batch, &v.seq, &v.heads, &v.dim};
      const unsigned f = r.pick(4);
      *sizes[f] = hostile_i64(r, *sizes[f]);
      tr += " | " + name + ".size[" + std::to_string(f) + "]=" + std::to_string(*sizes[f]);
      break;
    }
    case 1: {  // a stride
      int64_t* strides[3] = {&v.stride_batch, &v.stride_seq, &v.stride_head};
      const unsigned f = r.pick(3);
      *strides[f] = hostile_i64(r, *strides[f]);
      tr += " | " + name + ".stride[" + std::to_string(f) + "]=" + std::to_string(*strides[f]);
      break;
    }
    case 2: {  // the data pointer: null, misaligned, shifted, or into another buffer
      const unsigned op = r.pick(4);
      const size_t room = room_after(c, v.data);
      if (op == 0) {
        v.data = nullptr;
        tr += " | " + name + ".data=null";
      } else if (op <= 2) {
        const size_t shift = std::min<size_t>(op == 1 ? 1 + r.pick(3) : dtype_size(v.dtype), room);
        if (v.data) v.data = static_cast<unsigned char*>(v.data) + shift;
        tr += " | " + name + ".data+=" + std::to_string(shift);
      } else {
        const Slot other = static_cast<Slot>(r.pick(kNumSlots));
        const Buffer& b = c.buffers[other];
        const size_t off = b.size ? r.take<uint16_t>() % (b.size + 1) : 0;
        v.data = b.begin() + off;
        c.tame = false;  // another buffer's bytes (a poisoned output, an lse of −inf): any value
        tr += " | " + name + ".data=buffer" + std::to_string(other) + "+" + std::to_string(off);
      }
      break;
    }
    case 3: {  // a dtype (of one tensor, or of all), possibly not a DType value
      const uint8_t raw = r.take<uint8_t>();
      const DType dt = static_cast<DType>(raw >= 128 ? raw : raw % 3);
      c.tame = false;  // the buffers' bytes are now read as another type: any value, NaN included
      if (r.chance(128)) {
        for (int u = 0; u < kNumTensors; ++u) tensor(c, u).dtype = dt;
        tr += " | all.dtype=" + std::to_string(raw);
      } else {
        v.dtype = dt;
        tr += " | " + name + ".dtype=" + std::to_string(raw);
      }
      break;
    }
    case 4: {  // lse: null, misaligned, or into another buffer
      const unsigned op = r.pick(3);
      const Slot other = static_cast<Slot>(r.pick(kNumSlots));
      const Buffer& b = c.buffers[other];
      if (op == 0) a.lse = nullptr;
      if (op == 1 && c.buffers[kLse].size >= 2) a.lse = reinterpret_cast<float*>(c.buffers[kLse].begin() + 1 + r.pick(2));
      const size_t off = op == 2 && b.size ? r.take<uint16_t>() % (b.size + 1) : 0;
      if (op == 2) a.lse = reinterpret_cast<float*>(b.begin() + off);
      // lse inside another input: the forward run before a backward case writes lse there, so that
      // input's bytes become log-sum-exps read as its own dtype (Inf and NaN included).
      if (op == 2 && other != kLse) c.tame = false;
      tr += " | lse op " + std::to_string(op);
      if (op == 2) tr += " (buffer" + std::to_string(other) + "+" + std::to_string(off) + ")";
      break;
    }
    case 5: a.scale = hostile_f32(r); c.tame = false; tr += " | scale=" + std::to_string(*a.scale); break;
    case 6: a.softcap = hostile_f32(r); c.tame = false; tr += " | softcap=" + std::to_string(a.softcap); break;
    case 7: {
      int64_t& w = r.chance(128) ? a.window_left : a.window_right;
      w = hostile_i64(r, w);
      tr += " | window=(" + std::to_string(a.window_left) + "," + std::to_string(a.window_right) + ")";
      break;
    }
    case 8:
      if (r.chance(128)) {
        a.diagonal_offset = hostile_i64(r, a.diagonal_offset);
        tr += " | diagonal_offset=" + std::to_string(a.diagonal_offset);
      } else {
        a.causal = !a.causal;
        tr += " | causal flipped";
      }
      break;
    case 9: {  // cu_seqlens: null, swapped, or one entry changed
      const unsigned op = r.pick(4);
      const int32_t*& cu = r.chance(128) ? a.cu_seqlens_q : a.cu_seqlens_k;
      if (op == 0) cu = nullptr;
      if (op == 1) std::swap(a.cu_seqlens_q, a.cu_seqlens_k);
      if (op >= 2) {
        SideArray<int32_t>& arr = cu == c.cu_k.data.get() ? c.cu_k : c.cu_q;
        if (arr.count > 0) {
          const int64_t i = r.pick(static_cast<unsigned>(arr.count));
          arr.data[i] = hostile_i32(r, arr.data[i]);
        }
      }
      tr += " | cu_seqlens op " + std::to_string(op);
      break;
    }
    case 10: {  // seqlens_k: null or one entry changed
      if (r.chance(64)) {
        a.seqlens_k = nullptr;
      } else if (c.seqlens_k.count > 0) {
        const int64_t i = r.pick(static_cast<unsigned>(c.seqlens_k.count));
        c.seqlens_k.data[i] = hostile_i32(r, c.seqlens_k.data[i]);
      }
      tr += " | seqlens_k changed";
      break;
    }
    case 11: {  // sequence counts and bounds
      int64_t* fields[3] = {&a.varlen_batch, &a.max_seqlen_q, &a.max_seqlen_k};
      const unsigned f = r.pick(3);
      *fields[f] = hostile_i64(r, *fields[f]);
      tr += " | varlen field " + std::to_string(f) + "=" + std::to_string(*fields[f]);
      break;
    }
    case 12: {  // ALiBi: a slope value, the batch stride, or the pointer
      const unsigned op = r.pick(3);
      if (op == 0 && c.alibi.count > 0) {
        c.alibi.data[r.pick(static_cast<unsigned>(c.alibi.count))] = hostile_f32(r);
        c.tame = false;
      }
      if (op == 1) a.alibi_batch_stride = hostile_i64(r, a.alibi_batch_stride);
      if (op == 2) a.alibi_slopes = nullptr;
      tr += " | alibi op " + std::to_string(op);
      break;
    }
    default: {  // one special input value (NaN, inf, huge, subnormal) in q, k, v, dout, out or lse
      const Slot slots[] = {kQ, kK, kV, kDout, kOut, kLse};
      const Slot s = slots[r.pick(6)];
      const DType dt = s == kLse ? DType::f32 : storage_type(a.q.dtype);
      Buffer& b = c.buffers[s];
      const size_t n = b.size / dtype_size(dt);
      const float x = hostile_f32(r);
      const uint16_t i = r.take<uint16_t>();
      if (n > 0) store_from_float(b.begin(), dt, static_cast<int64_t>(i % n), x);
      c.tame = false;
      tr += " | special value " + std::to_string(x) + " in buffer " + std::to_string(s);
    }
  }
}

constexpr uint16_t kInferenceMarker = 0x1F12;

// The inference extension, from bytes past the base case, its mutations and the config (none: the
// case is unchanged): a value head dim dv != d (v, out, dout, dv rebuilt), paged K/V in a forward
// (k, v rebuilt as a pool of pages, a block table over them), sinks and dsinks, num_splits; then up
// to two hostile overwrites of these fields. Read only after the marker kInferenceMarker.
void decode_inference(ByteReader& r, FuzzCase& c) {
  // Two marker bytes open the extension: inputs from before it (whose unread tail is arbitrary)
  // keep decoding to exactly the case they were saved for, regressions included.
  if (r.empty() || r.take<uint16_t>() != kInferenceMarker) return;
  CallFields& a = c.args;
  auto rebuild = [&](int t, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
    Tensor& v = tensor(c, t);
    v = bshd(nullptr, c.dtype, batch, seq, heads, dim);
    choose_layout(r, v, t < 3 || t == 4, c.trace);
    allocate(c, kTensorSlots[t], v);
    if (t < 5) fill(c.buffers[kTensorSlots[t]], c.dtype, r.take<uint32_t>(), -kInputRange, kInputRange);
  };
  int64_t dv = c.d;
  if (r.chance(96)) {
    dv = kHeadDims[r.pick(count_of(kHeadDims))];
    c.trace += " dv=" + std::to_string(dv) + ": ";
    rebuild(2, c.batch, c.nk, c.hk, dv);
    rebuild(3, c.batch, c.nq, c.hq, dv);
    rebuild(4, c.batch, c.nq, c.hq, dv);
    rebuild(7, c.batch, c.nk, c.hk, dv);
  }
  if (!c.backward && !c.varlen && r.chance(96)) {  // paged K/V
    const int64_t page = 1 + r.pick(4), pages = 1 + r.pick(6), per_seq = (c.nk + page - 1) / page;
    c.block_table.resize(c.batch * per_seq);
    for (int64_t i = 0; i < c.block_table.count; ++i)
      c.block_table.data[i] = static_cast<int32_t>(r.pick(static_cast<unsigned>(pages)));
    a.block_table = c.block_table.data.get();
    a.block_table_pages = per_seq;
    c.trace += " paged(page " + std::to_string(page) + ", " + std::to_string(pages) + " pages): ";
    rebuild(1, pages, page, c.hk, c.d);
    rebuild(2, pages, page, c.hk, dv);
  }
  if (r.chance(96)) {
    c.sinks.resize(c.hq);
    for (int64_t h = 0; h < c.hq; ++h) c.sinks.data[h] = kSlopes[r.pick(count_of(kSlopes))] * 4 - 2;
    a.sinks = c.sinks.data.get();
    c.trace += " sinks";
  }
  c.dsinks.resize(c.hq);
  if (c.backward && a.sinks && r.chance(160)) a.dsinks = c.dsinks.data.get();
  a.num_splits = r.pick(4);
  for (int m = 0, n = static_cast<int>(r.pick(3)); m < n; ++m) {
    std::string& tr = c.trace;
    switch (r.pick(6)) {
      case 0:
        if (c.block_table.count > 0) {
          const int64_t i = r.pick(static_cast<unsigned>(c.block_table.count));
          c.block_table.data[i] = hostile_i32(r, c.block_table.data[i]);
          tr += " | block_table[" + std::to_string(i) + "]=" + std::to_string(c.block_table.data[i]);
        }
        break;
      case 1:
        a.block_table_pages = hostile_i64(r, a.block_table_pages);
        tr += " | block_table_pages=" + std::to_string(a.block_table_pages);
        break;
      case 2:
        a.block_table_stride = hostile_i64(r, a.block_table_stride);
        tr += " | block_table_stride=" + std::to_string(a.block_table_stride);
        break;
      case 3:
        if (c.sinks.count > 0) {
          const float x = hostile_f32(r);
          c.sinks.data[r.pick(static_cast<unsigned>(c.sinks.count))] = x;
          c.tame = false;
          tr += " | a sink=" + std::to_string(x);
        }
        break;
      case 4: {  // dsinks: null, or into another buffer
        const Buffer& b = c.buffers[r.pick(kNumSlots)];
        a.dsinks = r.chance(128) ? nullptr : reinterpret_cast<float*>(b.begin() + (b.size ? r.take<uint16_t>() % (b.size + 1) : 0));
        tr += " | dsinks moved";
        break;
      }
      default:
        a.num_splits = hostile_i64(r, a.num_splits);
        tr += " | num_splits=" + std::to_string(a.num_splits);
    }
  }
}

constexpr uint16_t kBiasDropoutMarker = 0x1F13;

// Allocates `b` to exactly span view t (sizes > 0 or an empty view) and points t at it.
void allocate_view(Buffer& b, Tensor& t) {
  const bool has_elements = t.batch > 0 && t.seq > 0 && t.heads > 0 && t.dim > 0;
  b.size = has_elements ? static_cast<size_t>((last_offset(t) + 1) * static_cast<int64_t>(dtype_size(t.dtype))) : 0;
  b.bytes.reset(new unsigned char[b.size > 0 ? b.size : 1]);
  t.data = b.begin();
}

// Returns a pointer the reader chooses: null, one byte into `own`, or somewhere in a buffer of the case.
unsigned char* hostile_pointer(ByteReader& r, FuzzCase& c, const Buffer& own) {
  switch (r.pick(3)) {
    case 0: return nullptr;
    case 1: return own.begin() ? own.begin() + 1 : nullptr;  // an unallocated buffer has no byte to step into
    default: {
      const std::vector<const Buffer*> all = all_buffers(c);
      const Buffer& b = *all[r.pick(static_cast<unsigned>(all.size()))];
      return b.begin() + (b.size ? r.take<uint16_t>() % (b.size + 1) : 0);
    }
  }
}

// Returns the keys per sequence of a case (the bias's dim, the block mask's key range): the pages'
// capacity when the table's fields are still sane (an earlier overwrite may have made them hostile:
// then the base length, which validation will reject as a mismatch), else the base length.
int64_t case_keys(const FuzzCase& c) {
  const CallFields& a = c.args;
  if (a.block_table && a.block_table_pages >= 0 && a.block_table_pages <= 64 && a.k.seq >= 0 && a.k.seq <= 64)
    return a.block_table_pages * a.k.seq;
  return c.nk;
}

// The bias and dropout extension (docs/semantics.md, "Additive bias and dropout"), from bytes past
// the inference extension, after the marker kBiasDropoutMarker: a bias (full, broadcast by size 1
// over sequences and rows or over heads, or by stride 0) of any dtype with a few −∞ entries, its
// dbias in a backward, dropout with a keep mask in a forward; then up to two hostile overwrites.
// Sizes come from the base geometry (varlen: the packed lengths, upper bounds of every sequence's).
void decode_bias_dropout(ByteReader& r, FuzzCase& c) {
  if (r.empty() || r.take<uint16_t>() != kBiasDropoutMarker) return;
  CallFields& a = c.args;
  const int64_t nseq = c.varlen ? c.cu_q.count - 1 : c.batch;
  const int64_t keys = case_keys(c);
  if (r.chance(160)) {
    const int kind = static_cast<int>(r.pick(4));
    const DType dt = static_cast<DType>(r.pick(3));
    const int64_t b = kind == 0 || kind == 3 ? nseq : 1, n = kind == 1 ? 1 : c.nq, h = kind == 2 ? 1 : c.hq;
    a.bias = bhsd(nullptr, dt, kind == 3 ? 1 : b, n, kind == 3 ? 1 : h, keys);
    allocate_view(c.bias_buf, a.bias);
    fill(c.bias_buf, dt, r.take<uint32_t>(), -kInputRange, kInputRange);
    const size_t n_elems = c.bias_buf.size / dtype_size(dt);
    for (int m = 0, inf = static_cast<int>(r.pick(4)); m < inf && n_elems > 0; ++m)
      store_from_float(c.bias_buf.begin(), dt, r.take<uint16_t>() % static_cast<int64_t>(n_elems),
                       -std::numeric_limits<float>::infinity());
    if (kind == 3) {  // full sizes over one table
      a.bias.batch = b, a.bias.heads = h;
      a.bias.stride_batch = a.bias.stride_head = 0;
    }
    c.trace += " bias(kind " + std::to_string(kind) + ", dtype " + std::to_string(int(dt)) + ")";
    if (c.backward && r.chance(200)) {
      a.dbias = bshd(nullptr, static_cast<DType>(r.pick(3)), a.bias.batch, a.bias.seq, a.bias.heads, a.bias.dim);
      allocate_view(c.dbias_buf, a.dbias);
      c.trace += " dbias";
    }
  }
  if (r.chance(128)) {
    constexpr float kProbabilities[] = {0.0f, 0.1f, 0.5f, 0.9f};
    a.dropout_p = kProbabilities[r.pick(count_of(kProbabilities))];
    a.dropout_seed = r.take<uint32_t>() * 0x9E3779B97F4A7C15ull;
    a.dropout_offset = r.take<uint8_t>();
    if (!c.backward) {
      c.mask_buf.size = static_cast<size_t>(std::max<int64_t>(0, c.batch * c.hq * c.nq * ((keys + 7) / 8)));
      c.mask_buf.bytes.reset(new unsigned char[c.mask_buf.size > 0 ? c.mask_buf.size : 1]);
      a.dropout_mask = c.mask_buf.begin();
    }
    c.trace += " dropout(p " + std::to_string(a.dropout_p) + ")";
  }
  for (int m = 0, n = static_cast<int>(r.pick(3)); m < n; ++m) {
    std::string& tr = c.trace;
    switch (r.pick(6)) {
      case 0: {
        int64_t* sizes[] = {&a.bias.batch, &a.bias.seq, &a.bias.heads, &a.bias.dim};
        int64_t& f = *sizes[r.pick(4)];
        f = hostile_i64(r, f);
        tr += " | a bias size=" + std::to_string(f);
        break;
      }
      case 1: {
        int64_t* strides[] = {&a.bias.stride_batch, &a.bias.stride_seq, &a.bias.stride_head};
        int64_t& f = *strides[r.pick(3)];
        f = hostile_i64(r, f);
        tr += " | a bias stride=" + std::to_string(f);
        break;
      }
      case 2:
        a.bias.dtype = static_cast<DType>(r.take<uint8_t>());
        c.tame = false;  // the bias's bytes read as another type: +inf and NaN included
        tr += " | bias.dtype=" + std::to_string(int(a.bias.dtype));
        break;
      case 3:
        if (r.chance(128)) {
          a.bias.data = hostile_pointer(r, c, c.bias_buf);
          c.tame = false;  // another buffer's bytes as the bias: any value
          tr += " | bias moved";
        } else {
          a.dbias.data = hostile_pointer(r, c, c.dbias_buf);
          a.dbias.seq = hostile_i64(r, a.dbias.seq);
          tr += " | dbias moved, seq=" + std::to_string(a.dbias.seq);
        }
        break;
      case 4:
        a.dropout_p = hostile_f32(r);
        tr += " | dropout_p=" + std::to_string(a.dropout_p);
        break;
      default:
        a.dropout_mask = hostile_pointer(r, c, c.mask_buf);
        tr += " | dropout_mask moved";
    }
  }
}

constexpr uint16_t kBlockMaskMarker = 0x1F14;

// The block-sparse mask extension (docs/semantics.md, "Block-sparse masks"), from bytes past the bias
// and dropout extension, after the marker kBlockMaskMarker: block sizes 1..9, lists per sequence and
// head or shared (batch, heads 1), every key block hidden, full or partial, element bits (shared or
// per sequence and head) or none; then up to two hostile overwrites (a geometry field, a count, an
// entry, the lists swapped, the bits' sizes, strides or pointer).
void decode_block_mask(ByteReader& r, FuzzCase& c) {
  if (r.empty() || r.take<uint16_t>() != kBlockMaskMarker) return;
  BlockMask& m = c.args.block_mask;
  const int64_t nseq = c.varlen ? c.cu_q.count - 1 : c.batch, keys = case_keys(c);
  m.block_q = 1 + r.pick(9);
  m.block_k = 1 + r.pick(9);
  m.batch = r.chance(128) || nseq < 1 ? 1 : nseq;
  m.heads = r.chance(128) ? 1 : c.hq;
  m.q_blocks = std::max<int64_t>(1, (c.nq + m.block_q - 1) / m.block_q);
  m.max_blocks = std::max<int64_t>(1, (keys + m.block_k - 1) / m.block_k);
  const int64_t lists = m.batch * m.heads * m.q_blocks;
  c.full_count.resize(lists);
  c.partial_count.resize(lists);
  c.full_index.resize(lists * m.max_blocks);
  c.partial_index.resize(lists * m.max_blocks);
  for (int64_t l = 0; l < lists; ++l)
    for (int64_t kb = 0; kb * m.block_k < keys; ++kb) {
      const unsigned kind = r.pick(3);  // hidden, full, partial
      if (kind == 1) c.full_index.data[l * m.max_blocks + c.full_count.data[l]++] = static_cast<int32_t>(kb);
      if (kind == 2) c.partial_index.data[l * m.max_blocks + c.partial_count.data[l]++] = static_cast<int32_t>(kb);
    }
  m.full_count = c.full_count.data.get();
  m.full_index = c.full_index.data.get();
  m.partial_count = c.partial_count.data.get();
  m.partial_index = c.partial_index.data.get();
  if (r.chance(160)) {
    BitMask& b = m.bits;
    b.batch = m.batch;
    b.heads = m.heads;
    b.seq = r.chance(64) ? 1 : std::max<int64_t>(c.nq, 1);
    b.stride_head = (keys + 7) / 8;
    b.stride_seq = b.heads * b.stride_head;
    b.stride_batch = b.seq * b.stride_seq;
    c.bits_buf.size = static_cast<size_t>(std::max<int64_t>(0, b.batch * b.stride_batch));
    c.bits_buf.bytes.reset(new unsigned char[c.bits_buf.size > 0 ? c.bits_buf.size : 1]);
    for (size_t x = 0; x < c.bits_buf.size; ++x) c.bits_buf.bytes[x] = r.take<uint8_t>();
    b.data = c.bits_buf.begin();
  }
  c.trace += " block_mask(" + std::to_string(m.block_q) + "x" + std::to_string(m.block_k) + ", batch " +
             std::to_string(m.batch) + ", heads " + std::to_string(m.heads) + (m.bits.data ? ", bits)" : ")");
  for (int n = 0, count = static_cast<int>(r.pick(3)); n < count; ++n) {
    std::string& tr = c.trace;
    switch (r.pick(6)) {
      case 0: {
        int64_t* fields[] = {&m.block_q, &m.block_k, &m.batch, &m.heads, &m.q_blocks, &m.max_blocks};
        const unsigned f = r.pick(6);
        *fields[f] = hostile_i64(r, *fields[f]);
        tr += " | block_mask field " + std::to_string(f) + "=" + std::to_string(*fields[f]);
        break;
      }
      case 1:
        if (lists > 0) {
          int32_t& n32 = (r.chance(128) ? c.full_count : c.partial_count).data[r.take<uint16_t>() % lists];
          n32 = hostile_i32(r, n32);
          tr += " | a block count=" + std::to_string(n32);
        }
        break;
      case 2: {
        // An entry of the allocated array: m.max_blocks may already be a hostile overwrite.
        SideArray<int32_t>& index = r.chance(128) ? c.full_index : c.partial_index;
        if (index.count > 0) {
          int32_t& e = index.data[r.take<uint16_t>() % index.count];
          e = hostile_i32(r, e);
          tr += " | a block index=" + std::to_string(e);
        }
        break;
      }
      case 3:
        std::swap(m.full_index, m.partial_index);  // a block listed twice, or lists of other counts
        tr += " | block lists swapped";
        break;
      case 4: {
        int64_t* fields[] = {&m.bits.batch, &m.bits.seq, &m.bits.heads, &m.bits.stride_batch, &m.bits.stride_seq,
                             &m.bits.stride_head};
        const unsigned f = r.pick(6);
        *fields[f] = hostile_i64(r, *fields[f]);
        tr += " | bits field " + std::to_string(f) + "=" + std::to_string(*fields[f]);
        break;
      }
      default:
        m.bits.data = hostile_pointer(r, c, c.bits_buf);
        tr += " | bits moved";
    }
  }
}

constexpr uint16_t kQuantizedMarker = 0x1F15;

// Returns the number of scales a granularity needs for k's sizes (0 for sizes validation rejects).
int64_t scale_count(ScaleGranularity g, const Tensor& k) {
  if (g == ScaleGranularity::tensor) return 1;
  if (k.batch < 0 || k.seq < 0 || k.heads < 0 || k.batch > 64 || k.seq > 64 || k.heads > 64) return 0;
  return g == ScaleGranularity::head ? k.heads : k.batch * k.seq * k.heads;
}

// The quantized K/V extension (docs/semantics.md, "Quantized K/V"), from bytes past the block mask
// extension, after the marker kQuantizedMarker: k and v reread as one 8-bit dtype over their own
// buffers (the same element strides span fewer bytes), their bytes redrawn as finite patterns (a
// tame case stays comparable with the oracle), scales per tensor, per head or per (row, head) in
// [1/64, 1/4]; then up to two hostile overwrites: a scale (0, negative, NaN, inf, huge), the
// granularity (outside the enum too), a scale array null or moved into a buffer (over out, say),
// v of another dtype than k, q quantized, a NaN or infinity pattern among the codes.
void decode_quantized(ByteReader& r, FuzzCase& c) {
  if (r.empty() || r.take<uint16_t>() != kQuantizedMarker) return;
  CallFields& a = c.args;
  constexpr DType kTypes[] = {DType::i8, DType::e4m3, DType::e5m2};
  const DType qt = kTypes[r.pick(3)];
  a.k.dtype = a.v.dtype = qt;
  for (Slot s : {kK, kV}) {
    uint32_t x = r.take<uint32_t>() | 1u;
    Buffer& b = c.buffers[s];
    for (size_t i = 0; i < b.size; ++i) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      // 8-bit floats: bit 6 (the exponent's top bit) cleared keeps every pattern finite and below 2
      b.bytes[i] = static_cast<unsigned char>(qt == DType::i8 ? x >> 24 : (x >> 24) & 0xBFu);
    }
  }
  const ScaleGranularity g = static_cast<ScaleGranularity>(r.pick(3));
  const int64_t n = scale_count(g, a.k);
  for (SideArray<float>* arr : {&c.k_scales, &c.v_scales}) {
    arr->resize(n);
    for (int64_t i = 0; i < n; ++i) arr->data[i] = 0.015625f * static_cast<float>(1 + r.pick(16));
  }
  a.kv_scales = {c.k_scales.data.get(), c.v_scales.data.get(), g};
  c.trace += std::string(" quantized(") + dtype_name(qt) + ", granularity " + std::to_string(int(g)) + ", " +
             std::to_string(n) + " scales)";
  for (int m = 0, count = static_cast<int>(r.pick(3)); m < count; ++m) {
    std::string& tr = c.trace;
    switch (r.pick(6)) {
      case 0: {
        SideArray<float>& arr = r.chance(128) ? c.k_scales : c.v_scales;
        if (arr.count > 0) {
          const float x = hostile_f32(r);
          arr.data[r.take<uint16_t>() % arr.count] = x;
          c.tame = false;
          tr += " | a scale=" + std::to_string(x);
        }
        break;
      }
      case 1:
        a.kv_scales.granularity = static_cast<ScaleGranularity>(r.chance(128) ? r.pick(3) : r.take<uint8_t>());
        tr += " | granularity=" + std::to_string(int(a.kv_scales.granularity));
        break;
      case 2: {
        const float*& p = r.chance(128) ? a.kv_scales.k : a.kv_scales.v;
        p = r.chance(128) ? nullptr : reinterpret_cast<const float*>(hostile_pointer(r, c, c.buffers[kOut]));
        c.tame = false;  // scales inside a buffer are its bytes read as floats
        tr += " | a scale array moved";
        break;
      }
      case 3: {
        const DType dt = static_cast<DType>(r.pick(6));  // f32, f16, bf16 or a quantized type
        a.v.dtype = dt;
        tr += " | v.dtype=" + std::to_string(int(dt));
        break;
      }
      case 4:
        a.q.dtype = kTypes[r.pick(3)];
        tr += " | q quantized";
        break;
      default: {
        Buffer& b = c.buffers[r.chance(128) ? kK : kV];
        if (b.size > 0) {
          b.bytes[r.take<uint16_t>() % b.size] = r.chance(128) ? 0x7F : 0xFC;  // NaN (e4m3, e5m2); -inf (e5m2)
          c.tame = false;
          tr += " | a non-finite code";
        }
      }
    }
  }
}

// Returns whether validate() can read every side-array entry it would read for these arguments.
bool side_arrays_readable(const FuzzCase& c) {
  const CallFields& a = c.args;
  for (const void* p : {static_cast<const void*>(a.cu_seqlens_q), static_cast<const void*>(a.cu_seqlens_k),
                        static_cast<const void*>(a.seqlens_k), static_cast<const void*>(a.alibi_slopes),
                        static_cast<const void*>(a.sinks), static_cast<const void*>(a.block_table)})
    if (side_count(c, p) < 0) return false;
  if (a.sinks && a.q.heads > side_count(c, a.sinks)) return false;
  // validate reads every count of the block mask's lists and the entries below each count, whose
  // rows are max_blocks apart: the arrays must hold lists (and lists x max_blocks) entries.
  const BlockMask& m = a.block_mask;
  const __int128 lists = static_cast<__int128>(m.batch) * m.heads * m.q_blocks;
  const __int128 entries = lists * m.max_blocks;
  for (const int32_t* p : {m.full_count, m.partial_count})
    if (p && (side_count(c, p) < 0 || lists > side_count(c, p))) return false;
  for (const int32_t* p : {m.full_index, m.partial_index})
    if (p && (side_count(c, p) < 0 || entries > side_count(c, p))) return false;
  // validate reads the entries of the pages each sequence's keys occupy: at most the whole
  // [q.batch, block_table_pages] table with its stride (when that geometry itself passes).
  if (a.block_table && a.q.batch > 0 && a.block_table_pages > 0 && a.block_table_stride >= 0) {
    const __int128 stride = a.block_table_stride ? a.block_table_stride : a.block_table_pages;
    if ((a.q.batch - 1) * stride + a.block_table_pages > side_count(c, a.block_table)) return false;
  }
  const bool varlen_read = a.cu_seqlens_q && a.cu_seqlens_k && a.varlen_batch >= 0 && a.varlen_batch < (int64_t{1} << 31);
  if (varlen_read && (a.varlen_batch + 1 > side_count(c, a.cu_seqlens_q) || a.varlen_batch + 1 > side_count(c, a.cu_seqlens_k)))
    return false;
  const int64_t nseq = a.cu_seqlens_q ? a.varlen_batch : a.q.batch;
  if (a.seqlens_k && nseq > side_count(c, a.seqlens_k)) return false;
  // validate reads the scales of quantized K/V (below the count their granularity needs) once the
  // arrays are aligned and the granularity valid: the arrays, or the buffer bytes they point into,
  // must hold that many.
  const ScaleGranularity g = a.kv_scales.granularity;
  if (g == ScaleGranularity::tensor || g == ScaleGranularity::head || g == ScaleGranularity::token) {
    const __int128 need = g == ScaleGranularity::tensor ? 1
                          : g == ScaleGranularity::head ? static_cast<__int128>(a.k.heads)
                                                        : static_cast<__int128>(a.k.batch) * a.k.seq * a.k.heads;
    for (const float* p : {a.kv_scales.k, a.kv_scales.v}) {
      if (!p || reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) continue;
      const int64_t have = side_count(c, p) >= 0 ? side_count(c, p) : static_cast<int64_t>(room_after(c, p) / 4);
      if (need > have) return false;
    }
  }
  if (a.alibi_slopes && nseq > 0 && a.q.heads > 0) {
    const __int128 seqs = a.alibi_batch_stride != 0 ? nseq : 1;
    const __int128 last = (seqs - 1) * a.alibi_batch_stride + a.q.heads - 1;
    if (a.alibi_batch_stride >= 0 && last >= side_count(c, a.alibi_slopes)) return false;
  }
  return true;
}

}  // namespace

bool decode(const uint8_t* data, size_t size, FuzzCase& c) {
  ByteReader r(data, size);
  decode_base(r, c);
  const int mutations = static_cast<int>(r.pick(kMaxMutations + 1));
  for (int m = 0; m < mutations; ++m) mutate(r, c);
  for (uint8_t& x : c.config_choice) x = r.take<uint8_t>();
  c.base_bytes = r.position();
  decode_inference(r, c);
  decode_bias_dropout(r, c);
  c.bias_end = r.position();
  decode_block_mask(r, c);
  c.quantized_at = r.position();
  decode_quantized(r, c);
  return side_arrays_readable(c);
}

std::vector<const Buffer*> all_buffers(const FuzzCase& c) {
  std::vector<const Buffer*> r;
  for (const Buffer& b : c.buffers) r.push_back(&b);
  for (const Buffer* b : {&c.bias_buf, &c.dbias_buf, &c.mask_buf, &c.bits_buf}) r.push_back(b);
  return r;
}

bool inside_buffer(const FuzzCase& c, const void* p, int64_t bytes) {
  return p != nullptr && bytes >= 0 && static_cast<uint64_t>(bytes) <= room_after(c, p);
}

}  // namespace flashattn::fuzz
