// Host time spent inside the allocator, for the stats: each allocate and
// deallocate (two reads of the tick clock a call), and waits for the
// allocator's lock (held by another caller or by the mapping worker while
// it plans or commits a job). An uncontended try_lock reads no clock.
#pragma once

#include <cstdint>
#include <mutex>

#include "common/tick_clock.hpp"
#include "memlake/stats.hpp"

namespace memlake {

// Adds the ticks of its lifetime (now_ticks) to a counter, which the stats
// report in nanoseconds (ticks_to_ns).
class ScopedTicks {
 public:
  explicit ScopedTicks(StatValue& total) : total_(total), start_(now_ticks()) {}
  ~ScopedTicks() { total_.current += now_ticks() - start_; }
  std::int64_t elapsed_ns() const { return ticks_to_ns(now_ticks() - start_); }
  ScopedTicks(const ScopedTicks&) = delete;
  ScopedTicks& operator=(const ScopedTicks&) = delete;

 private:
  StatValue& total_;
  std::int64_t start_;
};

// Locks `m`; when another thread holds it, counts the wait once the lock is
// held (the stats are guarded by that lock).
inline std::unique_lock<std::mutex> lock_counting_waits(std::mutex& m, StatValue& waits,
                                                        StatValue& wait_ns) {
  std::unique_lock lock(m, std::try_to_lock);
  if (lock.owns_lock()) [[likely]]
    return lock;
  const std::int64_t start = now_ns();
  lock.lock();
  ++waits.current;
  wait_ns.current += now_ns() - start;
  return lock;
}

}  // namespace memlake
