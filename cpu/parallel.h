// The OpenMP loop of the forward and the backward: work items claimed dynamically, per-thread state
// made once per thread, and exceptions carried out of the region (one that left an OpenMP region
// would terminate the program).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <type_traits>

namespace flashattn::cpu::detail {

// Runs body(item, state) for every item in [0, items) on `threads` OpenMP threads; returns when all
// have finished. Each thread first makes its own state with make_state() (its scratch, what it keeps
// from item to item) and passes it to every item it runs. Items are claimed dynamically in chunks of
// `chunk` consecutive items: chunk k, [k·chunk, (k+1)·chunk), runs on one thread in order, so an item
// that is not the last of its chunk knows the thread's next item. The first exception thrown by
// make_state or body on any thread is rethrown here after the region; the items not yet started
// then do not run.
template <class MakeState, class Body>
void ParallelFor(int threads, int64_t items, int64_t chunk, MakeState&& make_state, Body&& body) {
  std::exception_ptr error;
  std::mutex error_mutex;
  std::atomic<bool> failed{false};
  const auto capture = [&] {  // called inside a handler
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!error) error = std::current_exception();
    failed.store(true, std::memory_order_relaxed);
  };
#pragma omp parallel num_threads(threads)
  {
    std::optional<std::invoke_result_t<MakeState&>> state;
    try {
      state.emplace(make_state());
    } catch (...) {
      capture();
    }
#pragma omp for schedule(dynamic, chunk)
    for (int64_t it = 0; it < items; ++it) {
      if (!state || failed.load(std::memory_order_relaxed)) continue;
      try {
        body(it, *state);
      } catch (...) {
        capture();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace flashattn::cpu::detail
