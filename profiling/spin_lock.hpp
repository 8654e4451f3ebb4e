// SpinLock: what guards an observer's state against a dump from another
// thread. Recording happens under the allocator's lock already, so the lock
// is almost never contended: taking it is one atomic exchange, where a
// std::mutex costs a few times more on every event. A waiter yields.
#pragma once

#include <atomic>
#include <thread>

namespace memlake {

class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace memlake
