// Fences: open per stream, recorded as events, waited on GPU-side.
#include "stream/stream_order.hpp"

#include <algorithm>
#include <string>

#include "memlake/errors.hpp"

namespace memlake {

StreamOrder::StreamOrder(Backend& backend, Stats& stats, ObserverList& observers)
    : backend_(backend), stats_(stats), observers_(observers) {}

StreamOrder::~StreamOrder() {
  for (EventHandle e : all_events_) backend_.event_destroy(e);
}

EventHandle StreamOrder::acquire_event() {
  if (!event_pool_.empty()) {
    EventHandle e = event_pool_.back();
    event_pool_.pop_back();
    return e;
  }
  EventHandle e = nullptr;
  if (backend_.event_create(&e) != Status::ok)
    throw backend_error(std::string("memlake: event_create failed: ") + backend_.last_error());
  all_events_.push_back(e);
  return e;
}

std::uint64_t StreamOrder::record(EventHandle event, StreamHandle stream) {
  if (backend_.event_record(event, stream) != Status::ok) {
    event_pool_.push_back(event);
    throw backend_error(std::string("memlake: event_record failed: ") + backend_.last_error());
  }
  ++stats_.events_recorded.current;
  return ++records_;
}

bool StreamOrder::incomplete(EventHandle event, StreamHandle stream, std::uint64_t seq) {
  if (call_depth_ != 0 && std::any_of(behind_.begin(), behind_.end(), [&](const auto& b) {
        return b.first == stream && b.second <= seq;
      }))
    return true;
  ++stats_.event_queries.current;
  if (backend_.event_query(event) != Status::not_ready) return false;
  if (call_depth_ != 0) behind_.emplace_back(stream, seq);
  return true;
}

void StreamOrder::wait(StreamHandle stream, EventHandle event, StreamHandle source) {
  if (backend_.stream_wait_event(stream, event) != Status::ok)
    throw backend_error(std::string("memlake: stream_wait_event failed: ") + backend_.last_error());
  ++stats_.cross_stream_waits.current;
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_stream_wait(stream, source); });
}

bool StreamOrder::admit_lookup(StreamHandle stream) {
  if (streams_.count(stream)) {
    remember_admitted(stream);
    return true;
  }
  bool capturing = false;
  if (backend_.stream_is_capturing(stream, &capturing) != Status::ok) return false;
  // A capturing stream may not wait on events recorded outside its capture:
  // it is admitted once the capture is over.
  if (capturing) return true;
  // Memory freed before this stream was seen may still be in use by work
  // queued on the streams that freed it.
  record_open_fences();
  drop_completed_fences();
  for (Fence& f : fences_) {
    wait(stream, f.event, f.source);
    f.waited.push_back(stream);
  }
  streams_.insert(stream);
  remember_admitted(stream);
  return true;
}

void StreamOrder::remember_admitted(StreamHandle stream) {
  last_admitted_ = stream;
  admitted_last_ = true;
}

StreamOrder::FreeTag StreamOrder::free_on(StreamHandle stream,
                                          const std::vector<StreamHandle>& also_used_on) {
  if (also_used_on.empty()) {  // most frees: the stream's open fence, found once
    const std::size_t i = open_fence_index(stream);
    const FreeTag tag{open_[i].id, streams_.size() > 1};
    if (++open_[i].frees >= kFreesPerFence) close_fence(i);
    return tag;
  }
  FenceId id = open_fence(stream).id;
  for (StreamHandle other : also_used_on) id = std::max(id, open_fence(other).id);
  const FreeTag tag{id, streams_.size() > 1};
  count_free_under(stream);
  for (StreamHandle other : also_used_on) count_free_under(other);
  return tag;
}

FenceId StreamOrder::completed() {
  drop_completed_fences();
  std::uint64_t through = last_fence_;
  for (const Fence& f : fences_) through = std::min(through, f.id.value - 1);
  for (const OpenFence& f : open_) through = std::min(through, f.id.value - 1);
  return FenceId{through};
}

std::size_t StreamOrder::open_fence_of(StreamHandle stream) const {
  std::size_t i = 0;
  while (i < open_.size() && open_[i].source != stream) ++i;
  return i;
}

std::size_t StreamOrder::open_fence_index(StreamHandle stream) {
  const std::size_t i = open_fence_of(stream);
  if (i == open_.size()) open_.push_back(OpenFence{FenceId{++last_fence_}, stream, 0});
  return i;
}

StreamOrder::OpenFence& StreamOrder::open_fence(StreamHandle stream) {
  return open_[open_fence_index(stream)];
}

bool StreamOrder::close_fence(std::size_t i) {
  const OpenFence f = open_[i];
  // An event recorded while capturing belongs to the graph, not the stream.
  bool capturing = false;
  if (backend_.stream_is_capturing(f.source, &capturing) == Status::ok && capturing) return false;
  drop_completed_fences();  // keeps the list short while nothing else asks
  EventHandle e = acquire_event();
  const std::uint64_t seq = record(e, f.source);
  fences_.push_back({f.id, e, seq, f.source, {}});
  open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i));
  return true;
}

void StreamOrder::count_free_under(StreamHandle stream) {
  const std::size_t i = open_fence_of(stream);
  if (i < open_.size() && ++open_[i].frees >= kFreesPerFence) close_fence(i);
}

void StreamOrder::record_open_fences() {
  for (std::size_t i = open_.size(); i-- > 0;) close_fence(i);
}

void StreamOrder::wait_for(StreamHandle stream, FenceId through) {
  // Frees of other streams under a fence not recorded yet: record it now,
  // after their work so far, so that `stream` can wait for it.
  for (std::size_t i = open_.size(); i-- > 0;) {
    const OpenFence& f = open_[i];
    if (f.id > through || f.source == stream) continue;
    if (!close_fence(i))
      throw backend_error(
          "memlake: memory freed on a capturing stream cannot be given to another stream");
  }
  drop_completed_fences();
  for (Fence& f : fences_) {
    if (f.id > through || (f.source == stream && !f.source_gone) ||
        std::find(f.waited.begin(), f.waited.end(), stream) != f.waited.end())
      continue;
    wait(stream, f.event, f.source);
    f.waited.push_back(stream);
  }
}

void StreamOrder::drop_completed_fences() {
  // A query now could invalidate a capture under way (stream_order.hpp).
  // With no fence recorded (the allocator asks often, via completed()),
  // there is nothing to look at.
  if (captures_underway_ || fences_.empty()) return;
  // Once a stream's fence is found incomplete, its later ones are not asked:
  // each call queries about one fence per stream, however many a GPU that
  // runs behind has in flight.
  CallScope one_look(*this);
  std::erase_if(fences_, [&](const Fence& f) {
    if (incomplete(f.event, f.source, f.seq)) return false;
    event_pool_.push_back(f.event);
    return true;
  });
}

void StreamOrder::forget(StreamHandle stream) {
  if (!streams_.count(stream)) return;
  if (const std::size_t i = open_fence_of(stream); i < open_.size()) close_fence(i);
  // A later stream may get the same handle: it is neither the source of
  // this stream's fences (it must wait on them) nor one that waited.
  for (Fence& f : fences_) {
    if (f.source == stream) f.source_gone = true;
    std::erase(f.waited, stream);
  }
  streams_.erase(stream);
  if (stream == last_admitted_) admitted_last_ = false;
}

}  // namespace memlake
