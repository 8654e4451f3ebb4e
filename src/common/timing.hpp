// Host time spent inside the allocator, for the stats: each allocate and
// deallocate (two clock reads a call), and waits for the allocator's lock
// (held by another caller or by the mapping worker while it plans or
// commits a job). An uncontended try_lock reads no clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "memlake/stats.hpp"

namespace memlake {

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Adds the nanoseconds of its lifetime to a counter.
class ScopedNanos {
 public:
  explicit ScopedNanos(StatValue& total) : total_(total), start_(now_ns()) {}
  ~ScopedNanos() { total_.current += now_ns() - start_; }
  std::int64_t elapsed() const { return now_ns() - start_; }
  ScopedNanos(const ScopedNanos&) = delete;
  ScopedNanos& operator=(const ScopedNanos&) = delete;

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
