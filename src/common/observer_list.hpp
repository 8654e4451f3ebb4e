// The observers installed on one allocator. Callers test empty() first, so
// with nobody listening an event costs one predictable branch.
//
// SlowWorkScope brackets slow work (Observer::on_slow_begin / on_slow_end):
// begin() once the work turns out slow, the end when the scope closes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "memlake/observer.hpp"

namespace memlake {

#if defined(__GNUC__)
#define MEMLAKE_LIKELY(x) __builtin_expect(!!(x), 1)
#define MEMLAKE_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define MEMLAKE_NOINLINE __attribute__((noinline))
#else
#define MEMLAKE_LIKELY(x) (x)
#define MEMLAKE_UNLIKELY(x) (x)
#define MEMLAKE_NOINLINE
#endif

class ObserverList {
 public:
  bool empty() const { return observers_.empty(); }
  void add(Observer* o) {
    if (std::find(observers_.begin(), observers_.end(), o) == observers_.end())
      observers_.push_back(o);
  }
  void remove(Observer* o) { std::erase(observers_, o); }
  template <class F>
  void each(F&& f) const {
    for (Observer* o : observers_) f(*o);
  }

 private:
  std::vector<Observer*> observers_;
};

class SlowWorkScope {
 public:
  SlowWorkScope(const ObserverList& observers, SlowWork work)
      : observers_(observers), work_(work) {}
  ~SlowWorkScope() {
    if (MEMLAKE_UNLIKELY(begun_)) observers_.each([&](Observer& o) { o.on_slow_end(work_); });
  }
  SlowWorkScope(const SlowWorkScope&) = delete;
  SlowWorkScope& operator=(const SlowWorkScope&) = delete;

  void begin(std::size_t bytes, void* stream) {
    if (MEMLAKE_LIKELY(observers_.empty())) return;
    begun_ = true;
    observers_.each([&](Observer& o) { o.on_slow_begin(work_, bytes, stream); });
  }

 private:
  const ObserverList& observers_;
  SlowWork work_;
  bool begun_ = false;
};

}  // namespace memlake
