// HostBackend: graph capture and launch, under the rules of CUDA's stream
// capture in global mode (the CUDA Programming Guide, "Prohibited and
// Unhandled Operations" and "Invalidation"):
//  - synchronizing or querying a capturing stream, or querying an event
//    recorded in a capture, is invalid: the call fails and the capture is
//    invalidated;
//  - in global mode, any thread's event query or synchronization while a
//    capture is under way is potentially unsafe: it fails and invalidates
//    every capture (PyTorch met this as the NCCL watchdog's event queries);
//  - a capturing stream may wait only on events recorded in its own capture:
//    an event recorded outside it (or never recorded) is an isolation error,
//    one of another capture a merge error, and both invalidate;
//  - a stream that is not capturing joins a capture by waiting on an event
//    recorded in it, and must rejoin the origin stream before the capture
//    ends, else the end fails (cudaErrorStreamCaptureUnjoined);
//  - an invalidated capture refuses further work until it ends; its end
//    fails and gives no graph; every stream of a capture stops capturing
//    when it ends, valid or not;
//  - a global-mode capture ends on the thread that began it.
// VMM calls stay legal during a capture. A graph launched on a capturing
// stream is captured as its nodes, one after the other.
#include <algorithm>
#include <memory>
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

unsigned long long ull(std::uint64_t v) {
  return static_cast<unsigned long long>(v);
}

}  // namespace

HostCapture* HostBackend::capture_of(const HostStream* s) const {
  auto it = capturing_.find(s);
  return it == capturing_.end() ? nullptr : it->second.get();
}

Status HostBackend::invalidate(HostCapture& c, const char* call, const char* why) {
  c.invalidate(std::string(call) + ": " + why);
  return fail(Status::error,
              "host: %s: not permitted during graph capture: %s; capture %llu is invalidated (its "
              "end will fail)",
              call, why, ull(c.id));
}

Status HostBackend::refuse_if_capturing(const char* call) {
  if (captures_.empty()) return Status::ok;
  for (auto& c : captures_)
    c->invalidate(std::string(call) +
                  ": potentially unsafe while a global-mode capture is under way");
  return fail(Status::error,
              "host: %s: potentially unsafe while %zu graph capture(s) are under way in global "
              "mode (cudaErrorStreamCaptureUnsupported); every capture under way is invalidated",
              call, captures_.size());
}

void HostBackend::end_capture(const std::shared_ptr<HostCapture>& c) {
  std::erase_if(capturing_, [&](const auto& entry) { return entry.second == c; });
  std::erase(captures_, c);
}

Status HostBackend::wait_in_capture(const std::shared_ptr<HostStream>& s, const Event& e,
                                    HostCapture* waiter) {
  HostCapture* recorded_in = e.capture.get();
  const bool live = recorded_in != nullptr &&
                    std::find(captures_.begin(), captures_.end(), e.capture) != captures_.end();
  if (recorded_in != nullptr && !live) {
    if (waiter) return invalidate(*waiter, "stream_wait_event", "the event's capture has ended");
    return fail(Status::invalid_argument,
                "host: stream_wait_event: the event was last recorded in a graph capture that has "
                "ended, so it covers no work that runs (cudaErrorCapturedEvent)");
  }
  if (waiter == nullptr) {
    // A stream joins the capture by waiting on one of its events.
    if (!recorded_in->invalidated.empty())
      return invalidate(*recorded_in, "stream_wait_event", "the event's capture was invalidated");
    capturing_[s.get()] = e.capture;
    recorded_in->frontier[s.get()] = e.deps;
    return Status::ok;
  }
  if (recorded_in == nullptr) {
    return invalidate(*waiter, "stream_wait_event",
                      "a capturing stream waits on an event recorded outside the capture "
                      "(cudaErrorStreamCaptureIsolation; CUDA wants cudaEventWaitExternal)");
  }
  if (recorded_in != waiter) {
    recorded_in->invalidate("stream_wait_event: merges two captures");
    return invalidate(*waiter, "stream_wait_event",
                      "the event belongs to another capture (cudaErrorStreamCaptureMerge)");
  }
  if (!waiter->invalidated.empty())
    return invalidate(*waiter, "stream_wait_event", "the stream's capture was invalidated");
  waiter->add_dependencies(s.get(), e.deps);
  return Status::ok;
}

Status HostBackend::stream_begin_capture(StreamHandle stream) {
  return guarded("stream_begin_capture", [&] {
    if (stream == nullptr) {
      return fail(Status::invalid_argument,
                  "host: stream_begin_capture: the default stream cannot be captured (as CUDA's "
                  "legacy stream cannot)");
    }
    std::lock_guard lock(stream_mutex_);
    auto s = find_stream(stream, "stream_begin_capture");
    if (!s) return Status::invalid_argument;
    if (HostCapture* c = capture_of(s.get())) {
      return fail(Status::invalid_argument,
                  "host: stream_begin_capture: stream %p takes part in capture %llu already",
                  stream, ull(c->id));
    }
    auto c = std::make_shared<HostCapture>();
    c->id = HostCapture::next_id();
    c->origin = s.get();
    c->thread = std::this_thread::get_id();
    c->frontier[s.get()];
    captures_.reserve(captures_.size() + 1);
    capturing_.emplace(s.get(), c);
    captures_.push_back(std::move(c));
    return Status::ok;
  });
}

Status HostBackend::stream_end_capture(StreamHandle stream, GraphHandle* graph) {
  return guarded("stream_end_capture", [&] {
    if (graph == nullptr) {
      return fail(Status::invalid_argument, "host: stream_end_capture: null output pointer");
    }
    *graph = nullptr;
    std::lock_guard lock(stream_mutex_);
    auto s = find_stream(stream, "stream_end_capture");
    if (!s) return Status::invalid_argument;
    auto it = capturing_.find(s.get());
    if (it == capturing_.end()) {
      return fail(Status::invalid_argument, "host: stream_end_capture: stream %p is not capturing",
                  stream);
    }
    const std::shared_ptr<HostCapture> c = it->second;
    if (c->origin != s.get()) {
      return fail(Status::invalid_argument,
                  "host: stream_end_capture: capture %llu was not begun on stream %p "
                  "(cudaErrorStreamCaptureUnmatched)",
                  ull(c->id), stream);
    }
    if (c->thread != std::this_thread::get_id()) {
      return fail(Status::invalid_argument,
                  "host: stream_end_capture: a global-mode capture ends on the thread that began "
                  "it (cudaErrorStreamCaptureWrongThread)");
    }
    end_capture(c);
    if (!c->invalidated.empty()) {
      return fail(Status::error,
                  "host: stream_end_capture: capture %llu was invalidated by %s; no graph "
                  "(cudaErrorStreamCaptureInvalidated)",
                  ull(c->id), c->invalidated.c_str());
    }
    if (!c->joined()) {
      return fail(Status::error,
                  "host: stream_end_capture: capture %llu has work on a stream that did not "
                  "rejoin the origin stream (cudaErrorStreamCaptureUnjoined); no graph",
                  ull(c->id));
    }
    auto g = std::make_unique<HostGraph>(std::move(c->graph));
    GraphHandle handle = g.get();
    graphs_.emplace(handle, std::move(g));
    *graph = handle;
    return Status::ok;
  });
}

Status HostBackend::graph_launch(GraphHandle graph, StreamHandle stream) {
  return guarded("graph_launch", [&] {
    // The lock is held while enqueuing so that the graph cannot go meanwhile;
    // a host stream's thread never takes it.
    std::lock_guard lock(stream_mutex_);
    auto g = graphs_.find(graph);
    if (g == graphs_.end()) {
      return fail(Status::invalid_argument, "host: graph_launch: unknown graph %p", graph);
    }
    auto s = find_stream(stream, "graph_launch");
    if (!s) return Status::invalid_argument;
    if (HostCapture* c = capture_of(s.get())) {
      if (!c->invalidated.empty())
        return invalidate(*c, "graph_launch", "the stream's capture was invalidated");
      for (const HostGraphNode& n : g->second->nodes) c->add_node(s.get(), n.fn, n.user);
      return Status::ok;
    }
    for (const HostGraphNode& n : g->second->nodes) s->enqueue(n.fn, n.user);
    return Status::ok;
  });
}

Status HostBackend::graph_destroy(GraphHandle graph) {
  return guarded("graph_destroy", [&] {
    std::lock_guard lock(stream_mutex_);
    // Launched work holds the functions, not the graph: it runs on.
    if (graphs_.erase(graph) == 0) {
      return fail(Status::invalid_argument, "host: graph_destroy: unknown graph %p", graph);
    }
    return Status::ok;
  });
}

Status HostBackend::stream_capture_info(StreamHandle stream, CaptureState* state,
                                        std::uint64_t* id) {
  return guarded("stream_capture_info", [&] {
    if (state == nullptr || id == nullptr) {
      return fail(Status::invalid_argument, "host: stream_capture_info: null output pointer");
    }
    std::lock_guard lock(stream_mutex_);
    auto s = find_stream(stream, "stream_capture_info");
    if (!s) return Status::invalid_argument;
    const HostCapture* c = capture_of(s.get());
    *state = c == nullptr             ? CaptureState::none
             : c->invalidated.empty() ? CaptureState::active
                                      : CaptureState::invalidated;
    *id = *state == CaptureState::active ? c->id : 0;
    return Status::ok;
  });
}

Status HostBackend::device_synchronize() {
  return guarded("device_synchronize", [&] {
    std::vector<std::shared_ptr<HostStream>> all;
    {
      std::lock_guard lock(stream_mutex_);
      if (const Status refused = refuse_if_capturing("device_synchronize"); refused != Status::ok)
        return refused;
      all.reserve(streams_.size());
      for (const auto& [handle, s] : streams_) {
        if (s->on_worker_thread()) {
          return fail(Status::invalid_argument,
                      "host: device_synchronize: called from a job of stream %p", handle);
        }
        all.push_back(s);
      }
    }
    for (const auto& s : all) s->drain();
    return Status::ok;
  });
}

}  // namespace memlake
