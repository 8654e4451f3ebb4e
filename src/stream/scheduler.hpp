// Stream-ordered deferred frees. A block freed on stream S is still in use by
// work queued on S (and on streams named by record_stream), so it is not
// handed to the lake (which serves every stream) until events recorded after
// that work complete. Until then:
//   - it is reusable on S at once: S's later work runs after S's earlier work
//     (no sync required);
//   - another stream T may take it by a GPU-side wait on its event
//     (stream_wait_event): a device dependency, never a host wait.
// Frees on one stream share one event per batch, so the cost is one event
// record per batch and one query per batch retired; completed batches are
// retired oldest first per stream, so no scan over all pending blocks.
// Direct frees (defer_direct, the default) skip the batches: the block goes
// to the lake at once under a fence of its stream, and the lake makes any
// other stream given its memory wait on that fence.
// Not thread-safe: the allocator holds its lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "memlake/stats.hpp"
#include "node_pool.hpp"

namespace memlake {

class StreamScheduler {
 public:
  struct Block {
    DevicePtr ptr = 0;
    std::size_t size = 0;  // the lake block's rounded size
  };

  StreamScheduler(Backend& backend, Stats& stats, std::size_t free_batch,
                  std::size_t free_batch_bytes = 0, bool direct_free = false,
                  bool direct_streams = false);
  ~StreamScheduler();
  StreamScheduler(const StreamScheduler&) = delete;
  StreamScheduler& operator=(const StreamScheduler&) = delete;

  // Defers the free of a block last used on `stream` and on `also_used_on`.
  // Throws backend_error if an event cannot be recorded.
  void defer(Block block, StreamHandle stream, const std::vector<StreamHandle>& also_used_on);

  // Direct frees (direct_free): while `stream` is the only stream known (or
  // with direct_streams, on any stream), a block freed on it needs no event
  // and goes to `release(block, fence, others_wait)` at once, for the lake,
  // under `stream`'s open fence: the lake may unmap it once that fence
  // completes. No other stream is given it before waiting on the fence: a
  // stream seen later waits on it first thing (known_stream), and with
  // several streams (`others_wait`) the one given the memory waits
  // (wait_for_fences), which records the fence first if it is still open.
  // An event is recorded every free_batch frees of a stream. Returns false
  // when `stream`'s frees are not direct: defer() the block.
  // A block also used on other streams (record_stream) goes to the lake
  // under the newest of their open fences and `stream`'s: whichever stream
  // is given it, even `stream`, waits for the others' work.
  template <class Release>
  bool defer_direct(Block block, StreamHandle stream, const std::vector<StreamHandle>& also_used_on,
                    Release&& release);
  // Records the open direct fences (those of streams not capturing), so
  // that they can complete.
  void close_direct_fence();

  // One allocation's slow path (or one harvest): an event found incomplete
  // in it is taken as still incomplete until it ends, and so are the events
  // recorded after it on its stream (events on a stream complete in order):
  // they are not asked. Scopes nest.
  class CallScope {
   public:
    explicit CallScope(StreamScheduler& s) : s_(s) { ++s_.call_depth_; }
    ~CallScope() {
      if (--s_.call_depth_ == 0) s_.behind_.clear();
    }
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    StreamScheduler& s_;
  };

  // A block freed on `stream` alone, of size in [min_size, max_size].
  bool take_same_stream(StreamHandle stream, std::size_t min_size, std::size_t max_size,
                        Block* out);
  // A block pending on other streams, handed over by making `stream` wait on
  // its events.
  bool take_cross_stream(StreamHandle stream, std::size_t min_size, std::size_t max_size,
                         Block* out);

  // The smallest pending block of at least min_size on any stream (the
  // caller's own first on a tie); one of another stream is handed over by a
  // wait on its event. For memory pressure: the caller may split it.
  bool take_smallest(StreamHandle stream, std::size_t min_size, Block* out);

  // Memory pressure, when no single pending block serves: every pending
  // block becomes free for every stream. Each stream with pending frees
  // records one event after its work so far, and every other stream waits
  // on it (GPU-side waits, no host wait); a stream first seen later waits on
  // the fences not yet complete. Not while a stream involved is capturing a
  // graph. Hands each block to `release`; returns the number released.
  // `release(block, fence)`: the fence's id, for completed_fences().
  template <class Release>
  std::size_t fence_all(Release&& release);
  // Memory the lake lacks without mapping: the blocks pending on `stream`
  // alone become free, under a fence that `stream` records after its work
  // so far. `stream` itself may reuse them at once (stream order); another
  // stream given memory freed under this fence first waits on it
  // (wait_for_fences), a GPU-side wait, and only then. Not while `stream` is
  // capturing a graph. `release(block, fence)` as for fence_all.
  template <class Release>
  std::size_t release_own(StreamHandle stream, Release&& release);
  // `stream` is about to use memory freed under fences up to `through`:
  // it waits on those of them recorded by other streams and not complete
  // (fence_all's fences were waited on by every stream already), recording
  // other streams' open direct fences up to `through` first. Throws
  // backend_error when one of those streams is capturing a graph.
  void wait_for_fences(StreamHandle stream, std::uint64_t through);
  // Every fence up to this id has completed.
  std::uint64_t completed_fences();

  // Records an event for every stream's open batch.
  void close_open_batches();
  // Hands every block whose events have completed to `release`; returns the
  // number of blocks released.
  template <class Release>
  std::size_t harvest(Release&& release);
  // The same for at most `limit` blocks of `stream`'s oldest batches, with
  // at most one event query: a free does a bounded share of the retiring,
  // so that the next allocation does not find all of it at once.
  template <class Release>
  std::size_t retire_some(StreamHandle stream, std::size_t limit, Release&& release);

  // The stream is valid for this backend (checked once per stream).
  bool known_stream(StreamHandle stream);
  // Drops the stream's state; blocks still pending on it stay pending until
  // their events complete.
  void forget_stream(StreamHandle stream);
  std::size_t pending_blocks() const { return pending_count_; }
  // Batches with a recorded event not yet retired.
  std::size_t closed_batches() const { return closed_count_; }
  std::size_t pending_bytes() const { return pending_bytes_; }
  bool is_pending(DevicePtr ptr) const { return where_.count(ptr) != 0; }

 private:
  struct Pending {
    Block block;
    StreamHandle stream = nullptr;
    std::vector<EventHandle> events;    // record_stream blocks: one per stream used
    EventHandle batch_event = nullptr;  // the batch event once recorded
    bool taken = false;
    bool indexed = false;               // in its stream's by_size
    std::vector<StreamHandle> used_on;  // record_stream blocks: the streams of `events`
    // record_stream blocks: the record of their first event (the others
    // follow it), and how many are known complete.
    std::uint64_t seq = 0;
    std::size_t events_done = 0;
  };
  struct Batch {
    EventHandle event = nullptr;
    std::uint64_t seq = 0;  // its event's record
    std::vector<Pending*> blocks;
    std::size_t done = 0;   // blocks before this one are retired
    bool complete = false;  // its event has completed
  };
  using BySizeAllocator = PoolAllocator<std::pair<const std::size_t, Pending*>>;
  using BySize = std::multimap<std::size_t, Pending*, std::less<std::size_t>, BySizeAllocator>;
  struct StreamState {
    std::vector<Pending*> open;
    std::size_t open_bytes = 0;  // of the open batch
    std::deque<Batch> closed;
    BySize by_size;  // reusable on this stream
  };

  StreamState new_stream_state() { return {{}, 0, {}, BySize(BySizeAllocator(&pool_))}; }
  Pending* new_pending(const Block& block, StreamHandle stream) {
    return new (pool_.get(sizeof(Pending))) Pending{block, stream, {}, nullptr, false};
  }
  void delete_pending(Pending* p) {
    p->~Pending();
    pool_.put(p, sizeof(Pending));
  }
  EventHandle acquire_event();
  // Returns the record's number (records_).
  std::uint64_t record(EventHandle event, StreamHandle stream);
  // The event of record `seq` on `stream` has not completed (an error counts
  // as complete: its work can no longer be waited for). In a CallScope it is
  // not asked where a record of the stream no later was found incomplete.
  bool incomplete(EventHandle event, StreamHandle stream, std::uint64_t seq);
  // A GPU-side wait of `stream` on `event`; throws backend_error on failure.
  void wait(StreamHandle stream, EventHandle event);
  void close_batch(StreamHandle stream, StreamState& st);
  // Frees on `stream` are direct: on every stream with direct_streams, else
  // while it is the only stream in use.
  bool direct(StreamHandle stream) const {
    if (!direct_free_) return false;
    if (direct_streams_) return true;
    return streams_.size() == 1 && streams_.begin()->first == stream;
  }
  struct OpenFence;
  // The index in open_ of `stream`'s open fence; open_.size() if none.
  std::size_t open_fence_of(StreamHandle stream) const;
  // The fence `stream`'s direct frees go to the lake under (opened on first
  // use).
  OpenFence& direct_fence(StreamHandle stream);
  // Records the open fence `i` (an event on its stream), unless its stream
  // is capturing; false then.
  bool close_fence(std::size_t i);
  // One more free under `stream`'s open fence: it closes at free_batch, also
  // for a stream that only has blocks recorded to it (a communication
  // stream), so that no fence stays open long and holds back unmapping.
  void count_free_under(StreamHandle stream);
  void unindex(Pending* p);
  Block take(BySize& by_size, BySize::iterator it);
  // Marks an unindexed block taken (its Pending stays in its batch).
  Block take_pending(Pending* p);
  void finish(Pending* p);
  // finish(), then hands the block to `release`.
  template <class Release>
  void finish_and_release(Pending* p, Release& release) {
    const Block b = p->block;
    finish(p);
    release(b);
  }
  // Every event of record_stream block `p` has completed; asks only events
  // not known complete (and, in a CallScope, see incomplete()).
  bool events_complete(Pending* p);
  // Streams whose queued work pending blocks wait for; false if one of them
  // (or a stream that would wait) is capturing.
  bool fence_sources(std::vector<StreamHandle>* out);
  // All its streams are streams of this scheduler (not destroyed since).
  bool fenceable(const Pending* p) const;
  // Each source records an event after its work so far, under one new fence
  // id; with `wait_now` every other stream waits on it at once, else only
  // those later given memory freed under it (wait_for_fences).
  std::uint64_t fence(const std::vector<StreamHandle>& sources, bool wait_now);
  // Hands every untaken block pending on `st` to `release` under fence `id`;
  // each stays in its batch, deleted when that retires, as a taken block is.
  template <class Release>
  std::size_t release_untaken(StreamState& st, std::uint64_t id, Release& release);
  void wait_on_fences(StreamHandle stream);
  // Retires `st`'s closed batches oldest first while their events have
  // completed, at most `limit` blocks and `queries` event queries.
  template <class Release>
  std::size_t retire_batches(StreamHandle stream, StreamState& st, std::size_t limit,
                             std::size_t queries, Release& release);
  void drop_completed_fences();

  Backend& backend_;
  Stats& stats_;
  std::size_t free_batch_;
  std::size_t free_batch_bytes_;
  NodePool pool_;  // before every container that draws from it
  std::unordered_map<StreamHandle, StreamState> streams_;
  // Forgotten streams with batches in flight. A later stream may get the
  // same handle: incomplete() then only asks less, never hands out early.
  std::vector<std::pair<StreamHandle, StreamState>> retired_;
  std::vector<Pending*> tagged_;  // blocks with record_stream events
  using Where =
      std::unordered_map<DevicePtr, Pending*, std::hash<DevicePtr>, std::equal_to<DevicePtr>,
                         PoolAllocator<std::pair<const DevicePtr, Pending*>>>;
  Where where_{0, std::hash<DevicePtr>{}, std::equal_to<DevicePtr>{},
               Where::allocator_type(&pool_)};
  std::vector<EventHandle> event_pool_;
  std::vector<EventHandle> all_events_;
  struct Fence {
    std::uint64_t id = 0;
    EventHandle event = nullptr;
    std::uint64_t seq = 0;             // its event's record
    StreamHandle source = nullptr;     // the stream that recorded it
    bool waited_by_all = false;        // fence_all's: every other stream waits at once
    std::vector<StreamHandle> waited;  // release_own's: the streams that waited since
    bool source_gone = false;          // forgotten since: a new stream may have its handle
  };
  std::vector<Fence> fences_;  // recorded by fence(), not yet complete
  // Direct frees' fences not recorded yet, one per stream at most.
  struct OpenFence {
    std::uint64_t id = 0;
    StreamHandle source = nullptr;
    std::size_t frees = 0;
  };
  std::vector<OpenFence> open_;
  bool direct_free_;
  bool direct_streams_;
  std::uint64_t last_fence_ = 0;
  std::uint64_t records_ = 0;  // events recorded so far
  int call_depth_ = 0;         // CallScopes open
  // In a CallScope: streams with an event found incomplete, and its record.
  std::vector<std::pair<StreamHandle, std::uint64_t>> behind_;
  std::size_t pending_count_ = 0;
  std::size_t closed_count_ = 0;
  std::size_t pending_bytes_ = 0;
};

template <class Release>
std::size_t StreamScheduler::retire_batches(StreamHandle stream, StreamState& st, std::size_t limit,
                                            std::size_t queries, Release& release) {
  std::size_t released = 0;
  while (!st.closed.empty()) {
    Batch& batch = st.closed.front();
    if (!batch.complete) {
      if (queries-- == 0) break;
      // An error here means the event (or its stream) is gone; its work can
      // no longer be waited for, so treat the batch as complete.
      if (incomplete(batch.event, stream, batch.seq)) break;
      batch.complete = true;
    }
    for (; batch.done < batch.blocks.size(); ++batch.done) {
      Pending* p = batch.blocks[batch.done];
      if (p->taken) {
        delete_pending(p);
        continue;
      }
      if (released == limit) return released;
      unindex(p);
      finish_and_release(p, release);
      ++released;
    }
    event_pool_.push_back(batch.event);
    st.closed.pop_front();
    --closed_count_;
  }
  return released;
}

template <class Release>
std::size_t StreamScheduler::harvest(Release&& release) {
  constexpr std::size_t kAll = SIZE_MAX;
  CallScope one_look(*this);
  std::size_t released = 0;
  for (auto& [stream, st] : streams_) released += retire_batches(stream, st, kAll, kAll, release);
  for (auto& [stream, st] : retired_) released += retire_batches(stream, st, kAll, kAll, release);
  std::erase_if(retired_, [](const auto& r) { return r.second.closed.empty(); });
  // In the order they were freed, so that a stream found behind spares the
  // queries of every later block's event there.
  std::erase_if(tagged_, [&](Pending* p) {
    if (!events_complete(p)) return false;
    finish_and_release(p, release);
    ++released;
    return true;
  });
  return released;
}

template <class Release>
std::size_t StreamScheduler::retire_some(StreamHandle stream, std::size_t limit,
                                         Release&& release) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return 0;
  return retire_batches(stream, it->second, limit, /*queries=*/1, release);
}

template <class Release>
bool StreamScheduler::defer_direct(Block block, StreamHandle stream,
                                   const std::vector<StreamHandle>& also_used_on,
                                   Release&& release) {
  if (!also_used_on.empty() && !direct_streams_) return false;
  if (!direct(stream)) return false;
  std::uint64_t id = direct_fence(stream).id;
  for (StreamHandle other : also_used_on) id = std::max(id, direct_fence(other).id);
  // With one stream, every stream seen later waits for its work at first
  // sight (known_stream); with several, the one given the memory waits for
  // the fences up to the newest it was freed under (wait_for_fences).
  release(block, id, /*others_wait=*/streams_.size() > 1);
  ++stats_.direct_frees.current;
  count_free_under(stream);
  for (StreamHandle other : also_used_on) count_free_under(other);
  return true;
}

template <class Release>
std::size_t StreamScheduler::release_own(StreamHandle stream, Release&& release) {
  auto it = streams_.find(stream);
  if (it == streams_.end() || it->second.by_size.empty()) return 0;
  bool capturing = false;
  if (backend_.stream_is_capturing(stream, &capturing) != Status::ok || capturing) return 0;
  StreamState& st = it->second;
  close_batch(stream, st);
  const std::uint64_t id = fence({stream}, /*wait_now=*/false);
  ++stats_.own_releases.current;
  return release_untaken(st, id, release);
}

template <class Release>
std::size_t StreamScheduler::release_untaken(StreamState& st, std::uint64_t id, Release& release) {
  const std::size_t released = st.by_size.size();
  for (auto& [size, p] : st.by_size) {
    p->indexed = false;
    release(take_pending(p), id);
  }
  st.by_size.clear();
  return released;
}

template <class Release>
std::size_t StreamScheduler::fence_all(Release&& release) {
  std::vector<StreamHandle> sources;
  if (pending_count_ == 0 || !fence_sources(&sources)) return 0;
  close_open_batches();
  const std::uint64_t id = fence(sources, /*wait_now=*/true);
  ++stats_.fences.current;
  std::size_t released = 0;
  for (auto& [stream, st] : streams_) released += release_untaken(st, id, release);
  // record_stream blocks whose streams are all alive and fenced.
  std::erase_if(tagged_, [&](Pending* p) {
    if (!fenceable(p)) return false;
    Block b = p->block;
    finish(p);
    release(b, id);
    ++released;
    return true;
  });
  return released;
}

}  // namespace memlake
