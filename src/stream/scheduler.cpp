// Deferred frees: batches, the event pool and cross-stream handover.
#include "stream/scheduler.hpp"

#include <algorithm>
#include <string>

#include "memlake/errors.hpp"

namespace memlake {

StreamScheduler::StreamScheduler(Backend& backend, Stats& stats, std::size_t free_batch,
                                 std::size_t free_batch_bytes, bool direct_free,
                                 bool direct_streams)
    : backend_(backend),
      stats_(stats),
      free_batch_(free_batch == 0 ? 1 : free_batch),
      free_batch_bytes_(free_batch_bytes),
      direct_free_(direct_free),
      direct_streams_(direct_free && direct_streams) {}

StreamScheduler::~StreamScheduler() {
  auto drop = [this](StreamState& st) {
    for (Pending* p : st.open) delete_pending(p);
    for (Batch& b : st.closed)
      for (std::size_t i = b.done; i < b.blocks.size(); ++i) delete_pending(b.blocks[i]);
  };
  for (auto& [stream, st] : streams_) drop(st);
  for (auto& [stream, st] : retired_) drop(st);
  for (Pending* p : tagged_) delete_pending(p);
  for (EventHandle e : all_events_) backend_.event_destroy(e);
}

EventHandle StreamScheduler::acquire_event() {
  if (!event_pool_.empty()) {
    EventHandle e = event_pool_.back();
    event_pool_.pop_back();
    return e;
  }
  EventHandle e = nullptr;
  Status s = backend_.event_create(&e);
  if (s != Status::ok)
    throw backend_error(std::string("memlake: event_create failed: ") + backend_.last_error());
  all_events_.push_back(e);
  return e;
}

std::uint64_t StreamScheduler::record(EventHandle event, StreamHandle stream) {
  Status s = backend_.event_record(event, stream);
  if (s != Status::ok) {
    event_pool_.push_back(event);
    throw backend_error(std::string("memlake: event_record failed: ") + backend_.last_error());
  }
  ++stats_.events_recorded.current;
  return ++records_;
}

bool StreamScheduler::incomplete(EventHandle event, StreamHandle stream, std::uint64_t seq) {
  if (call_depth_ != 0 && std::any_of(behind_.begin(), behind_.end(), [&](const auto& b) {
        return b.first == stream && b.second <= seq;
      }))
    return true;
  ++stats_.event_queries.current;
  if (backend_.event_query(event) != Status::not_ready) return false;
  if (call_depth_ != 0) behind_.emplace_back(stream, seq);
  return true;
}

void StreamScheduler::wait(StreamHandle stream, EventHandle event) {
  if (backend_.stream_wait_event(stream, event) != Status::ok)
    throw backend_error(std::string("memlake: stream_wait_event failed: ") + backend_.last_error());
  ++stats_.cross_stream_waits.current;
}

bool StreamScheduler::known_stream(StreamHandle stream) {
  if (streams_.count(stream)) return true;
  bool capturing = false;
  if (backend_.stream_is_capturing(stream, &capturing) != Status::ok) return false;
  // Memory fenced before this stream was seen may still be in use by work
  // queued on the fenced streams: direct frees' too.
  close_direct_fence();
  if (!fences_.empty()) wait_on_fences(stream);
  streams_.emplace(stream, new_stream_state());
  return true;
}

bool StreamScheduler::fence_sources(std::vector<StreamHandle>* out) {
  auto add = [&](StreamHandle s) {
    if (std::find(out->begin(), out->end(), s) == out->end()) out->push_back(s);
  };
  // A live stream's blocks not taken are exactly those in its by_size.
  for (auto& [stream, st] : streams_)
    if (!st.by_size.empty()) add(stream);
  for (const Pending* p : tagged_) {
    if (!fenceable(p)) continue;
    add(p->stream);
    for (StreamHandle s : p->used_on) add(s);
  }
  // Every source is one of streams_ (fenceable), and every one of them waits.
  for (auto& [stream, st] : streams_) {
    bool capturing = false;
    if (backend_.stream_is_capturing(stream, &capturing) != Status::ok || capturing) return false;
  }
  return !out->empty();
}

bool StreamScheduler::fenceable(const Pending* p) const {
  if (!streams_.count(p->stream)) return false;
  return std::all_of(p->used_on.begin(), p->used_on.end(),
                     [&](StreamHandle s) { return streams_.count(s) != 0; });
}

std::uint64_t StreamScheduler::fence(const std::vector<StreamHandle>& sources, bool wait_now) {
  drop_completed_fences();
  const std::uint64_t id = ++last_fence_;
  for (StreamHandle source : sources) {
    EventHandle e = acquire_event();
    const std::uint64_t seq = record(e, source);
    if (wait_now)
      for (auto& [stream, st] : streams_)
        if (stream != source) wait(stream, e);
    fences_.push_back({id, e, seq, source, wait_now, {}});
  }
  return id;
}

std::uint64_t StreamScheduler::completed_fences() {
  drop_completed_fences();
  std::uint64_t through = last_fence_;
  for (const Fence& f : fences_) through = std::min(through, f.id - 1);
  for (const OpenFence& f : open_) through = std::min(through, f.id - 1);
  return through;
}

std::size_t StreamScheduler::open_fence_of(StreamHandle stream) const {
  std::size_t i = 0;
  while (i < open_.size() && open_[i].source != stream) ++i;
  return i;
}

StreamScheduler::OpenFence& StreamScheduler::direct_fence(StreamHandle stream) {
  if (const std::size_t i = open_fence_of(stream); i < open_.size()) return open_[i];
  return open_.emplace_back(OpenFence{++last_fence_, stream, 0});
}

bool StreamScheduler::close_fence(std::size_t i) {
  const OpenFence f = open_[i];
  // An event recorded while capturing belongs to the graph, not the stream.
  bool capturing = false;
  if (backend_.stream_is_capturing(f.source, &capturing) == Status::ok && capturing) return false;
  drop_completed_fences();  // keeps the list short while nothing else asks
  EventHandle e = acquire_event();
  const std::uint64_t seq = record(e, f.source);
  fences_.push_back({f.id, e, seq, f.source, false, {}});
  open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i));
  return true;
}

void StreamScheduler::count_free_under(StreamHandle stream) {
  const std::size_t i = open_fence_of(stream);
  if (i < open_.size() && ++open_[i].frees >= free_batch_) close_fence(i);
}

void StreamScheduler::close_direct_fence() {
  for (std::size_t i = open_.size(); i-- > 0;) close_fence(i);
}

void StreamScheduler::wait_for_fences(StreamHandle stream, std::uint64_t through) {
  // Direct frees of other streams under a fence not recorded yet: record it
  // now, after their work so far, so that `stream` can wait for it.
  for (std::size_t i = open_.size(); i-- > 0;) {
    const OpenFence& f = open_[i];
    if (f.id > through || f.source == stream) continue;
    if (!close_fence(i))
      throw backend_error(
          "memlake: memory freed on a capturing stream cannot be given to another stream");
  }
  drop_completed_fences();
  for (Fence& f : fences_) {
    if (f.id > through || f.waited_by_all || (f.source == stream && !f.source_gone) ||
        std::find(f.waited.begin(), f.waited.end(), stream) != f.waited.end())
      continue;
    wait(stream, f.event);
    f.waited.push_back(stream);
  }
}

void StreamScheduler::wait_on_fences(StreamHandle stream) {
  drop_completed_fences();
  for (Fence& f : fences_) {
    wait(stream, f.event);
    f.waited.push_back(stream);
  }
}

void StreamScheduler::drop_completed_fences() {
  // Once a stream's fence is found incomplete, its later ones are not asked
  // (incomplete()): each call queries about one fence per stream, however
  // many a GPU that runs behind has in flight (every slow-path call asks).
  CallScope one_look(*this);
  std::erase_if(fences_, [&](const Fence& f) {
    if (incomplete(f.event, f.source, f.seq)) return false;
    event_pool_.push_back(f.event);
    return true;
  });
}

void StreamScheduler::forget_stream(StreamHandle stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  if (const std::size_t i = open_fence_of(stream); i < open_.size()) close_fence(i);
  // A later stream may get the same handle: it is neither the source of
  // this stream's fences (it must wait on them) nor one that waited.
  for (Fence& f : fences_) {
    if (f.source == stream) f.source_gone = true;
    std::erase(f.waited, stream);
  }
  StreamState& st = it->second;
  close_batch(stream, st);
  // Its batches still retire by their events, but nothing is reused on the
  // stream any more.
  for (auto& [size, p] : st.by_size) p->indexed = false;
  st.by_size.clear();
  retired_.emplace_back(stream, std::move(st));
  streams_.erase(it);
}

void StreamScheduler::defer(Block block, StreamHandle stream,
                            const std::vector<StreamHandle>& also_used_on) {
  Pending* p = new_pending(block, stream);
  if (also_used_on.empty()) {
    auto it = streams_.find(stream);
    if (it == streams_.end()) it = streams_.emplace(stream, new_stream_state()).first;
    StreamState& st = it->second;
    st.open.push_back(p);
    st.by_size.emplace(block.size, p);
    p->indexed = true;
    st.open_bytes += block.size;
    if (st.open.size() >= free_batch_ ||
        (free_batch_bytes_ != 0 && st.open_bytes >= free_batch_bytes_))
      close_batch(stream, st);
  } else {
    // record_stream blocks wait for every stream they were used on; they are
    // rare, so each gets its own events.
    try {
      for (StreamHandle s : also_used_on) {
        EventHandle e = acquire_event();
        p->events.push_back(e);
        record(e, s);
      }
      p->used_on = also_used_on;
      EventHandle e = acquire_event();
      p->events.push_back(e);
      p->seq = record(e, stream) + 1 - p->events.size();
    } catch (...) {
      p->events.pop_back();
      for (EventHandle e : p->events) event_pool_.push_back(e);
      delete_pending(p);
      throw;
    }
    tagged_.push_back(p);
  }
  where_.emplace(block.ptr, p);
  ++pending_count_;
  pending_bytes_ += block.size;
  stats_.pending_free_bytes.current = static_cast<std::int64_t>(pending_bytes_);
  if (stats_.pending_free_bytes.current > stats_.pending_free_bytes.peak)
    stats_.pending_free_bytes.peak = stats_.pending_free_bytes.current;
}

void StreamScheduler::close_batch(StreamHandle stream, StreamState& st) {
  if (st.open.empty()) return;
  EventHandle e = acquire_event();
  const std::uint64_t seq = record(e, stream);
  for (Pending* p : st.open) p->batch_event = e;
  st.closed.push_back(Batch{e, seq, std::move(st.open)});
  ++closed_count_;
  st.open.clear();
  st.open_bytes = 0;
}

void StreamScheduler::close_open_batches() {
  for (auto& [stream, st] : streams_) close_batch(stream, st);
}

void StreamScheduler::unindex(Pending* p) {
  if (!p->indexed) return;
  p->indexed = false;
  auto& by_size = streams_.at(p->stream).by_size;
  auto [lo, hi] = by_size.equal_range(p->block.size);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == p) {
      by_size.erase(it);
      return;
    }
  }
}

void StreamScheduler::finish(Pending* p) {
  where_.erase(p->block.ptr);
  --pending_count_;
  pending_bytes_ -= p->block.size;
  stats_.pending_free_bytes.current = static_cast<std::int64_t>(pending_bytes_);
  for (EventHandle e : p->events) event_pool_.push_back(e);
  delete_pending(p);
}

bool StreamScheduler::events_complete(Pending* p) {
  for (; p->events_done < p->events.size(); ++p->events_done) {
    const std::size_t i = p->events_done;
    const StreamHandle s = i < p->used_on.size() ? p->used_on[i] : p->stream;
    if (incomplete(p->events[i], s, p->seq + i)) return false;
  }
  return true;
}

StreamScheduler::Block StreamScheduler::take(BySize& by_size, BySize::iterator it) {
  Pending* p = it->second;
  by_size.erase(it);
  p->indexed = false;
  return take_pending(p);
}

StreamScheduler::Block StreamScheduler::take_pending(Pending* p) {
  // The Pending stays in its open list or batch, marked taken, and is freed
  // when that batch retires.
  p->taken = true;
  where_.erase(p->block.ptr);
  --pending_count_;
  pending_bytes_ -= p->block.size;
  stats_.pending_free_bytes.current = static_cast<std::int64_t>(pending_bytes_);
  return p->block;
}

bool StreamScheduler::take_same_stream(StreamHandle stream, std::size_t min_size,
                                       std::size_t max_size, Block* out) {
  auto sit = streams_.find(stream);
  if (sit == streams_.end()) return false;
  auto& by_size = sit->second.by_size;
  auto it = by_size.lower_bound(min_size);
  if (it == by_size.end() || it->first > max_size) return false;
  *out = take(by_size, it);
  return true;
}

bool StreamScheduler::take_smallest(StreamHandle stream, std::size_t min_size, Block* out) {
  StreamHandle best_stream = nullptr;
  StreamState* best = nullptr;
  BySize::iterator best_it;
  for (auto& [other, st] : streams_) {
    auto it = st.by_size.lower_bound(min_size);
    if (it == st.by_size.end()) continue;
    // The smallest fit; on a tie the caller's own stream (no wait needed).
    if (best && (it->first > best_it->first || (it->first == best_it->first && other != stream)))
      continue;
    best_stream = other;
    best = &st;
    best_it = it;
  }
  if (!best) return false;
  if (best_stream != stream) {
    Pending* p = best_it->second;
    if (p->batch_event == nullptr) close_batch(best_stream, *best);
    if (backend_.stream_wait_event(stream, p->batch_event) != Status::ok) return false;
    ++stats_.cross_stream_waits.current;
  }
  *out = take(best->by_size, best_it);
  return true;
}

bool StreamScheduler::take_cross_stream(StreamHandle stream, std::size_t min_size,
                                        std::size_t max_size, Block* out) {
  for (auto& [other, st] : streams_) {
    if (other == stream) continue;
    auto it = st.by_size.lower_bound(min_size);
    if (it == st.by_size.end() || it->first > max_size) continue;
    Pending* p = it->second;
    if (p->batch_event == nullptr) close_batch(other, st);
    if (backend_.stream_wait_event(stream, p->batch_event) != Status::ok) continue;
    ++stats_.cross_stream_waits.current;
    *out = take(st.by_size, it);
    return true;
  }
  return false;
}

}  // namespace memlake
