// Concurrency: many std::threads calling forward and backward at once — on different problems, and
// on one shared (read-only) input with separate outputs — give the same bits as sequential calls.
// The library keeps no unsafe global state (caches of per-thread scratch, dispatch tables and
// target lists included). Run under ThreadSanitizer by scripts/sanitize.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "flashattn/reference.hpp"
#include "support.hpp"
#ifdef FLASHATTN_RELIABILITY_CPU
#include "flashattn/cpu.hpp"
#endif

namespace flashattn::reliability {
namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 3;  // calls per thread, so calls overlap with others' first and later calls

struct Pass {
  const char* name;
  std::function<void(const ForwardArgs&, const BackwardArgs&)> run;  // forward, then backward (same buffers)
};

std::vector<Pass> passes() {
  std::vector<Pass> r = {{"reference", [](const ForwardArgs& f, const BackwardArgs& a) {
                            reference::forward(f);
                            reference::backward(a);
                          }}};
#ifdef FLASHATTN_RELIABILITY_CPU
  r.push_back({"cpu", [](const ForwardArgs& f, const BackwardArgs& a) {
                 cpu::forward(f);
                 cpu::backward(a);
               }});
  r.push_back({"cpu, 1 OpenMP thread per call", [](const ForwardArgs& f, const BackwardArgs& a) {
                 cpu::Config c;
                 c.threads = 1;
                 cpu::forward(f, c);
                 cpu::backward(a, c);
               }});
#endif
  return r;
}

// Problem t of the set the threads work on: shapes, dtypes and masks differ between threads.
Shape shape_of(int t) {
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  return Shape{1 + t % 2, 5 + 7 * t, 9 + 5 * t, 2 * (1 + t % 3), 1 + t % 3, 8 + 8 * (t % 3), types[t % 3]};
}

ForwardArgs options_of(int t) {
  ForwardArgs a;
  a.causal = t % 2 == 1;
  if (t % 4 == 2) a.window_left = 3;
  if (t % 5 == 3) a.softcap = 20;
  return a;
}

TEST_CASE("threads calling forward and backward on different problems match sequential calls") {
  for (const Pass& pass : passes()) {
    CAPTURE(std::string(pass.name));
    std::vector<std::vector<unsigned char>> expected;
    for (int t = 0; t < kThreads; ++t) {
      Problem p(shape_of(t), 100 + t);
      pass.run(p.forward_args(options_of(t)), p.backward_args(options_of(t)));
      expected.push_back(p.output_bytes());
    }
    std::vector<std::unique_ptr<Problem>> problems;
    for (int t = 0; t < kThreads; ++t) problems.push_back(std::make_unique<Problem>(shape_of(t), 100 + t));
    std::vector<std::vector<std::vector<unsigned char>>> got(kThreads);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();  // start together
        for (int r = 0; r < kRounds; ++r) {
          pass.run(problems[t]->forward_args(options_of(t)), problems[t]->backward_args(options_of(t)));
          got[t].push_back(problems[t]->output_bytes());
        }
      });
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t)
      for (int r = 0; r < kRounds; ++r) {
        CAPTURE(t);
        CAPTURE(r);
        CHECK(got[t][r] == expected[t]);
      }
  }
}

TEST_CASE("threads sharing one read-only input with separate outputs match a sequential call") {
  const Shape s{2, 33, 47, 4, 2, 16, DType::bf16};
  for (const Pass& pass : passes()) {
    CAPTURE(std::string(pass.name));
    Problem reference_run(s, 7);
    ForwardArgs opt;
    opt.causal = true;
    pass.run(reference_run.forward_args(opt), reference_run.backward_args(opt));
    const auto expected = reference_run.output_bytes();
    // One problem holds the shared inputs; each thread writes into its own problem's outputs.
    Problem shared(s, 7);
    std::vector<std::unique_ptr<Problem>> mine;
    for (int t = 0; t < kThreads; ++t) mine.push_back(std::make_unique<Problem>(s, 0));
    const auto inputs_before = shared.bytes(Which::q);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        ForwardArgs f = mine[t]->forward_args(opt);
        BackwardArgs a = mine[t]->backward_args(opt);
        const BackwardArgs in = shared.backward_args(opt);
        f.q = a.q = in.q;
        f.k = a.k = in.k;
        f.v = a.v = in.v;
        a.dout = in.dout;
        for (int r = 0; r < kRounds; ++r) pass.run(f, a);
      });
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) CHECK(mine[t]->output_bytes() == expected);
    CHECK(shared.bytes(Which::q) == inputs_before);
  }
}

}  // namespace
}  // namespace flashattn::reliability
