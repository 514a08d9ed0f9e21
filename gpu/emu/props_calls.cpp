// The property tests' emulated calls in the GPU layout (props_calls.hpp).
#include "emu/props_calls.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu/check.hpp"
#include "emu/emu_api.hpp"
#include "flashattn/types.hpp"
#include "flashattn/validate.hpp"
#include "props/buffers.hpp"

namespace flashattn::gpu_emu {
namespace {

// A copy of one tensor view of a call in props::gpu_layout (the aligned rows flashattn::gpu
// requires; the case's own layout may be unaligned), in a guarded props::Buffer: the kernels run on
// the copies, which Guards registers with the emulator like every other buffer.
struct Copy {
  props::Buffer buffer;
  Tensor view;
  ConstTensor original;
  bool output = false;
};

// Calls f(copy row, original row, row bytes) for every (batch, seq, head) row of c.
template <class F>
void each_row(const Copy& c, F&& f) {
  const size_t es = dtype_size(c.view.dtype);
  for (int64_t b = 0; b < c.view.batch; ++b)
    for (int64_t r = 0; r < c.view.seq; ++r)
      for (int64_t h = 0; h < c.view.heads; ++h)
        f(static_cast<size_t>(c.view.offset(b, r, h)) * es, static_cast<size_t>(c.original.offset(b, r, h)) * es,
          static_cast<size_t>(c.view.dim) * es);
}

// The copies of a call's tensors. Outputs start as the original's elements (the harness's poison)
// and are copied back by finish(), after checking every copy: inputs unchanged, nothing written
// outside the views (std::logic_error otherwise, like the emulator's own checks).
class Copies {
 public:
  template <class View>
  void add(View& t, const char* name, bool output) {
    if (t.data == nullptr) return;
    Copy c;
    c.original = t;
    c.output = output;
    c.view = props::gpu_layout(t);
    c.buffer = props::Buffer(name, static_cast<size_t>(props::span_elems(c.view)) * dtype_size(t.dtype), 0);
    c.view.data = c.buffer.data();
    each_row(c, [&](size_t to, size_t from, size_t n) {
      std::memcpy(c.buffer.data() + to, static_cast<const unsigned char*>(t.data) + from, n);
      c.buffer.cover(to, n);
    });
    c.buffer.snapshot();
    t.data = c.view.data;
    t.stride_batch = c.view.stride_batch, t.stride_seq = c.view.stride_seq, t.stride_head = c.view.stride_head;
    copies_.push_back(std::move(c));
  }
  void finish() {
    for (Copy& c : copies_) {
      const std::string damage = c.buffer.check_outside_view();
      if (!damage.empty()) throw std::logic_error("emu (gpu-layout copy): " + damage);
      if (!c.output) {
        const std::string changed = c.buffer.unchanged_since_snapshot();
        if (!changed.empty()) throw std::logic_error("emu (gpu-layout copy): " + changed);
        continue;
      }
      each_row(c, [&](size_t to, size_t from, size_t n) {
        std::memcpy(static_cast<unsigned char*>(const_cast<void*>(c.original.data)) + from, c.buffer.data() + to, n);
      });
    }
  }

 private:
  std::vector<Copy> copies_;
};

// Copies the tensors of a forward call (q, k, v, out, the append's caches and new rows); the
// per-element bias keeps its layout (the kernels read it element by element).
Copies aligned(ForwardArgs& a) {
  Copies c;
  c.add(a.q, "q", false), c.add(a.k, "k", false), c.add(a.v, "v", false), c.add(a.out, "out", true);
  c.add(a.append.k_cache, "append.k_cache", true), c.add(a.append.v_cache, "append.v_cache", true);
  c.add(a.append.k_new, "append.k_new", false), c.add(a.append.v_new, "append.v_new", false);
  return c;
}
Copies aligned(BackwardArgs& a) {
  Copies c;
  c.add(a.q, "q", false), c.add(a.k, "k", false), c.add(a.v, "v", false), c.add(a.out, "out", false);
  c.add(a.dout, "dout", false), c.add(a.dq, "dq", true), c.add(a.dk, "dk", true), c.add(a.dv, "dv", true);
  return c;
}

// Registers every live harness buffer (the call's tensors and arrays, with their guard zones) with
// the emulator for the duration of a call.
struct Guards {
  Guards() {
    for (const props::Allocation& a : props::live_allocations())
      emu::register_guarded(a.begin, a.end, a.payload, a.bytes, a.name.c_str());
  }
  ~Guards() { emu::clear_guarded(); }
  Guards(const Guards&) = delete;
  Guards& operator=(const Guards&) = delete;
};

template <class Args>
void run_copied(const Args& a, const std::function<void(const Args&)>& run) {
  validate(a);  // the errors of the case's own layout, before copying
  Args call = a;
  Copies copies = aligned(call);
  {
    const Guards g;
    run(call);
  }
  copies.finish();
}

}  // namespace

void in_gpu_layout(const ForwardArgs& a, const std::function<void(const ForwardArgs&)>& run) { run_copied(a, run); }
void in_gpu_layout(const BackwardArgs& a, const std::function<void(const BackwardArgs&)>& run) { run_copied(a, run); }

void forward_in_gpu_layout(const ForwardArgs& a, bool sm90) {
  in_gpu_layout(a, [sm90](const ForwardArgs& call) { sm90 ? forward_on_sm90(call) : forward(call); });
}
void backward_in_gpu_layout(const BackwardArgs& a, bool deterministic) {
  in_gpu_layout(a, [&](const BackwardArgs& call) { backward(call, deterministic); });
}

}  // namespace flashattn::gpu_emu
