// Host functions for stream tests: a gate that blocks its stream until the
// test opens it, and jobs made from lambdas.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "backend/backend.hpp"

namespace memlake::test {

// A host function that blocks its stream until the test opens the gate.
class Gate {
 public:
  void wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  static void job(void* self) { static_cast<Gate*>(self)->wait(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Host functions from lambdas; the deque keeps their addresses stable
// until the Jobs object goes, which must be after they ran.
class Jobs {
 public:
  void launch(Backend& b, StreamHandle s, std::function<void()> fn) {
    jobs_.push_back(std::move(fn));
    ASSERT_EQ(b.launch_host_func(s, &Jobs::run, &jobs_.back()), Status::ok) << b.last_error();
  }

 private:
  static void run(void* fn) { (*static_cast<std::function<void()>*>(fn))(); }
  std::deque<std::function<void()>> jobs_;
};

}  // namespace memlake::test
