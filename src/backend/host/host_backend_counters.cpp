// HostBackend: host counters (see backend.hpp). A stream waits on a counter
// with a job that blocks the stream's thread until the counter is high
// enough, as cuStreamWaitValue64 holds a CUDA stream; the job holds the
// counter, so destroying it (which first sets it to kCounterReleased)
// never pulls it from under a waiting job. The wait compares as CUDA's
// does, cyclically, so what would hang a GPU stream hangs a host one.
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>

#include "backend/backend_detail.hpp"
#include "backend/host/host_backend.hpp"
#include "backend/host/host_stream.hpp"

namespace memlake {

using detail::fail;

struct HostBackend::Counter {
  std::mutex mutex;
  std::condition_variable raised;
  std::uint64_t value = 0;

  void set(std::uint64_t v) {
    {
      std::lock_guard lock(mutex);
      if (v > value) value = v;
    }
    raised.notify_all();
  }
  void wait_for(std::uint64_t v) {
    std::unique_lock lock(mutex);
    raised.wait(lock, [&] { return static_cast<std::int64_t>(value - v) >= 0; });
  }
};

namespace {

template <typename Body>
Status guarded(const char* call, Body&& body) noexcept {
  return detail::no_throw("host", call, std::forward<Body>(body));
}

}  // namespace

std::shared_ptr<HostBackend::Counter> HostBackend::find_counter(CounterHandle counter,
                                                                const char* call) {
  auto it = counters_.find(counter);
  if (it != counters_.end()) return it->second;
  fail(Status::invalid_argument, "host: %s: unknown counter %p", call, counter);
  return nullptr;
}

Status HostBackend::counter_create(CounterHandle* counter) {
  return guarded("counter_create", [&] {
    if (counter == nullptr)
      return fail(Status::invalid_argument, "host: counter_create: null output");
    auto c = std::make_shared<Counter>();
    std::lock_guard lock(stream_mutex_);
    counters_.emplace(c.get(), c);
    *counter = c.get();
    return Status::ok;
  });
}

Status HostBackend::counter_destroy(CounterHandle counter) {
  return guarded("counter_destroy", [&] {
    std::shared_ptr<Counter> c;
    {
      std::lock_guard lock(stream_mutex_);
      c = find_counter(counter, "counter_destroy");
      if (!c) return Status::invalid_argument;
      counters_.erase(counter);
    }
    c->set(kCounterReleased);
    return Status::ok;
  });
}

Status HostBackend::counter_set(CounterHandle counter, std::uint64_t value) {
  return guarded("counter_set", [&] {
    if (Status s = detail::check_counter_value("host", "counter_set", value); s != Status::ok)
      return s;
    std::shared_ptr<Counter> c;
    {
      std::lock_guard lock(stream_mutex_);
      c = find_counter(counter, "counter_set");
      if (!c) return Status::invalid_argument;
    }
    c->set(value);
    return Status::ok;
  });
}

Status HostBackend::stream_wait_counter(StreamHandle stream, CounterHandle counter,
                                        std::uint64_t value) {
  struct Wait {
    std::shared_ptr<Counter> counter;
    std::uint64_t value;
    static void run(void* user) {
      std::unique_ptr<Wait> w(static_cast<Wait*>(user));
      w->counter->wait_for(w->value);
    }
  };
  return guarded("stream_wait_counter", [&] {
    if (Status s = detail::check_counter_value("host", "stream_wait_counter", value);
        s != Status::ok)
      return s;
    std::shared_ptr<HostStream> s;
    auto wait = std::make_unique<Wait>();
    wait->value = value;
    {
      std::lock_guard lock(stream_mutex_);
      wait->counter = find_counter(counter, "stream_wait_counter");
      if (!wait->counter) return Status::invalid_argument;
      s = find_stream(stream, "stream_wait_counter");
      if (!s) return Status::invalid_argument;
      if (capture_of(s.get()) != nullptr) {
        return fail(Status::not_supported,
                    "host: stream_wait_counter: stream %p is capturing a graph", stream);
      }
    }
    s->enqueue(&Wait::run, wait.get());
    wait.release();
    return Status::ok;
  });
}

}  // namespace memlake
