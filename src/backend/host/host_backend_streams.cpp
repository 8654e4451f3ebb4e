// HostBackend: streams and events (see host_backend.hpp). A stream is a
// HostStream queue; an event is the (stream, sequence number) pair taken
// when it is recorded, or, recorded in a graph capture, the captured nodes
// it covers (host_backend_capture.cpp). Like the VM calls, none of these throws: a queue or
// table that cannot grow is out_of_host_memory, a thread that cannot start
// is error.
#include <algorithm>
#include <memory>
#include <system_error>
#include <utility>

#include "backend/backend_detail.hpp"
#include "backend/host/host_backend.hpp"
#include "backend/host/host_stream.hpp"

namespace memlake {

using detail::fail;

namespace {

template <typename Body>
Status guarded(const char* call, Body&& body) noexcept {
  return detail::no_throw("host", call, std::forward<Body>(body));
}

}  // namespace

std::shared_ptr<HostStream> HostBackend::find_stream(StreamHandle stream, const char* call) {
  auto it = streams_.find(stream);
  if (it != streams_.end()) return it->second;
  if (stream == nullptr) {
    auto s = std::make_shared<HostStream>();
    streams_.emplace(nullptr, s);
    return s;
  }
  fail(Status::invalid_argument, "host: %s: unknown stream %p", call, stream);
  return nullptr;
}

Status HostBackend::stream_create(StreamHandle* stream) {
  return guarded("stream_create", [&] {
    if (stream == nullptr) {
      return fail(Status::invalid_argument, "host: stream_create: null output pointer");
    }
    try {
      auto s = std::make_shared<HostStream>();
      std::lock_guard lock(stream_mutex_);
      streams_.emplace(s.get(), s);
      *stream = s.get();
    } catch (const std::system_error& e) {
      return fail(Status::error, "host: stream_create: cannot start the stream thread: %s",
                  e.what());
    }
    return Status::ok;
  });
}

Status HostBackend::stream_destroy(StreamHandle stream) {
  return guarded("stream_destroy", [&] {
    if (stream == nullptr) {
      return fail(Status::invalid_argument,
                  "host: stream_destroy: the default stream cannot be "
                  "destroyed");
    }
    std::shared_ptr<HostStream> s;
    {
      std::lock_guard lock(stream_mutex_);
      auto it = streams_.find(stream);
      if (it == streams_.end()) {
        return fail(Status::invalid_argument, "host: stream_destroy: unknown stream %p", stream);
      }
      if (it->second->on_worker_thread()) {
        return fail(Status::invalid_argument,
                    "host: stream_destroy: called from a job of stream %p itself", stream);
      }
      if (HostCapture* c = capture_of(it->second.get()))
        return invalidate(*c, "stream_destroy", "the stream is capturing");
      s = std::move(it->second);
      streams_.erase(it);
    }
    s->shutdown();
    return Status::ok;
  });
}

Status HostBackend::event_create(EventHandle* event) {
  return guarded("event_create", [&] {
    if (event == nullptr) {
      return fail(Status::invalid_argument, "host: event_create: null output pointer");
    }
    auto e = std::make_unique<Event>();
    EventHandle handle = e.get();
    std::lock_guard lock(stream_mutex_);
    events_.emplace(handle, std::move(e));
    *event = handle;
    return Status::ok;
  });
}

Status HostBackend::event_destroy(EventHandle event) {
  return guarded("event_destroy", [&] {
    std::lock_guard lock(stream_mutex_);
    if (events_.erase(event) == 0) {
      return fail(Status::invalid_argument, "host: event_destroy: unknown event %p", event);
    }
    return Status::ok;
  });
}

Status HostBackend::event_record(EventHandle event, StreamHandle stream) {
  return guarded("event_record", [&] {
    std::lock_guard lock(stream_mutex_);
    auto e = events_.find(event);
    if (e == events_.end()) {
      return fail(Status::invalid_argument, "host: event_record: unknown event %p", event);
    }
    auto s = find_stream(stream, "event_record");
    if (!s) return Status::invalid_argument;
    Event& ev = *e->second;
    if (HostCapture* c = capture_of(s.get())) {
      // The event covers the stream's captured work, not anything that runs.
      if (!c->invalidated.empty())
        return invalidate(*c, "event_record", "the stream's capture was invalidated");
      ev.deps = c->frontier[s.get()];
      ev.capture = capturing_.at(s.get());
      return Status::ok;
    }
    ev.capture = nullptr;
    ev.deps.clear();
    ev.stream = s;
    ev.seq = s->tail();
    return Status::ok;
  });
}

Status HostBackend::event_query(EventHandle event) {
  return guarded("event_query", [&] {
    std::shared_ptr<HostStream> s;
    std::uint64_t seq;
    {
      std::lock_guard lock(stream_mutex_);
      auto e = events_.find(event);
      if (e == events_.end()) {
        return fail(Status::invalid_argument, "host: event_query: unknown event %p", event);
      }
      if (HostCapture* c = e->second->capture.get()) {
        if (std::find(captures_.begin(), captures_.end(), e->second->capture) != captures_.end())
          return invalidate(*c, "event_query", "the event was recorded in the capture");
        return fail(Status::invalid_argument,
                    "host: event_query: event %p was last recorded in a graph capture, so it "
                    "covers no work that runs (cudaErrorCapturedEvent)",
                    event);
      }
      if (const Status refused = refuse_if_capturing("event_query"); refused != Status::ok)
        return refused;
      s = e->second->stream;
      seq = e->second->seq;
    }
    if (!s) return Status::ok;  // never recorded: complete, as in CUDA
    return s->reached(seq) ? Status::ok : Status::not_ready;
  });
}

Status HostBackend::stream_wait_event(StreamHandle stream, EventHandle event) {
  return guarded("stream_wait_event", [&] {
    std::shared_ptr<HostStream> s;
    std::shared_ptr<HostStream> target;
    std::uint64_t seq;
    {
      std::lock_guard lock(stream_mutex_);
      auto e = events_.find(event);
      if (e == events_.end()) {
        return fail(Status::invalid_argument, "host: stream_wait_event: unknown event %p", event);
      }
      s = find_stream(stream, "stream_wait_event");
      if (!s) return Status::invalid_argument;
      const Event& ev = *e->second;
      HostCapture* waiter = capture_of(s.get());
      if (ev.capture || waiter) return wait_in_capture(s, ev, waiter);
      target = ev.stream;
      seq = ev.seq;
    }
    // The wait is on the record as it stands now; a later re-record does not
    // move it. Work already finished needs no dependency.
    if (target && !target->reached(seq)) s->enqueue_wait(std::move(target), seq);
    return Status::ok;
  });
}

Status HostBackend::launch_host_func(StreamHandle stream, HostFn fn, void* user) {
  return guarded("launch_host_func", [&] {
    if (fn == nullptr) {
      return fail(Status::invalid_argument, "host: launch_host_func: null function");
    }
    std::shared_ptr<HostStream> s;
    {
      std::lock_guard lock(stream_mutex_);
      s = find_stream(stream, "launch_host_func");
      if (!s) return Status::invalid_argument;
      if (HostCapture* c = capture_of(s.get())) {
        if (!c->invalidated.empty())
          return invalidate(*c, "launch_host_func", "the stream's capture was invalidated");
        c->add_node(s.get(), fn, user);
        return Status::ok;
      }
    }
    s->enqueue(fn, user);
    return Status::ok;
  });
}

Status HostBackend::stream_synchronize(StreamHandle stream) {
  return guarded("stream_synchronize", [&] {
    std::shared_ptr<HostStream> s;
    {
      std::lock_guard lock(stream_mutex_);
      s = find_stream(stream, "stream_synchronize");
      if (!s) return Status::invalid_argument;
      if (HostCapture* c = capture_of(s.get()))
        return invalidate(*c, "stream_synchronize", "the stream is capturing");
      if (const Status refused = refuse_if_capturing("stream_synchronize"); refused != Status::ok)
        return refused;
    }
    if (s->on_worker_thread()) {
      return fail(Status::invalid_argument,
                  "host: stream_synchronize: called from a job of stream %p itself", stream);
    }
    s->drain();
    return Status::ok;
  });
}

Status HostBackend::stream_is_capturing(StreamHandle stream, bool* capturing) {
  return guarded("stream_is_capturing", [&] {
    if (capturing == nullptr) {
      return fail(Status::invalid_argument, "host: stream_is_capturing: null output pointer");
    }
    std::lock_guard lock(stream_mutex_);
    auto s = find_stream(stream, "stream_is_capturing");
    if (!s) return Status::invalid_argument;
    *capturing = capture_of(s.get()) != nullptr;
    return Status::ok;
  });
}

}  // namespace memlake
