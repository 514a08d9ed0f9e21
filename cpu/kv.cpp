// SharedKv (see kv.h): fp32 head copies shared by the threads of one forward call.
#include "kv.h"

namespace flashattn::cpu::detail {

SharedKv::SharedKv(float* buffer, const Plan& p)
    : slots_(static_cast<size_t>(shared_kv_slots(p))), buffer_(buffer), max_k_(p.max_k), dim_(p.dim), ld_(p.kv_ld) {}

void SharedKv::acquire(const AttentionArgs& a, const Sequence& seq, int64_t kvh, int& held, Rows& k, Rows& v,
                       RowReaders read) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto rows_of = [&](int slot) {
    k = {data(slot), ld_};
    v = {data(slot) + max_k_ * ld_, ld_};
  };
  if (held >= 0 && slots_[held].sequence == seq.index && slots_[held].head == kvh) {
    slots_[held].last_use = ++clock_;
    rows_of(held);
    return;
  }
  if (held >= 0) --slots_[held].users;
  held = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.sequence == seq.index && s.head == kvh) {  // filled, or being filled by another thread
      ++s.users;
      s.last_use = ++clock_;
      held = static_cast<int>(i);
      filled_.wait(lock, [&] { return slots_[i].ready; });
      rows_of(held);
      return;
    }
  }
  // A free slot, least recently used first (one exists: one slot per thread, and this thread holds none now).
  int pick = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].users == 0 && (pick < 0 || slots_[i].last_use < slots_[pick].last_use)) pick = static_cast<int>(i);
  }
  Slot& s = slots_[pick];
  s = Slot{seq.index, kvh, 1, false, ++clock_};
  held = pick;
  lock.unlock();
  copy_head(a, seq, kvh, dim_, ld_, data(pick), data(pick) + max_k_ * ld_, read);
  lock.lock();
  s.ready = true;
  filled_.notify_all();
  rows_of(pick);
}

}  // namespace flashattn::cpu::detail
