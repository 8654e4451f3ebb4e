// Stream order: what makes it safe to hand a freed block to the lake at once.
//
// A block freed on stream S may still be in use by work queued on S (and on
// the streams record_stream named). It goes to the lake at once all the
// same, tagged with S's open fence: a fence id that S records as an event
// later (every kFreesPerFence frees, or when another stream needs it), after
// the work queued by then. From that tag:
//   - S reuses the memory at once: its later work runs after its earlier work;
//   - another stream T given memory freed under fence F first waits on F,
//     GPU-side (wait_for): a device dependency, never a host wait;
//   - the lake unmaps a range only once the newest fence it was freed under
//     has completed (completed()).
// While a single stream is in use, no stream needs to wait at all when given
// memory: a stream seen later waits on every fence not yet complete the first
// time it is seen (admit).
//
// Events recorded while a stream is capturing a CUDA graph belong to the
// graph, so a capturing stream's fence stays open until its capture ends
// (record_stream's uses included: their fences are recorded once the
// capture is over). A capturing stream is not admitted: it may not wait on
// events recorded outside its capture; it is admitted at its first use after
// the capture. While graph pools are being allocated to (captures under
// way, graph/), no event is queried: in CUDA's global capture mode a query
// from any thread invalidates the capture; fences count as incomplete until
// the captures end. Not thread-safe: the allocator holds its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "common/observer_list.hpp"
#include "memlake/stats.hpp"
#include "stream/fence.hpp"

namespace memlake {

// A stream records its open fence after this many frees under it, so that
// no fence stays open long and holds back unmapping.
inline constexpr std::size_t kFreesPerFence = 32;
// An allocation served from mapped memory needs no answer from the fences
// (only unmapping and cross-stream waits do, and they look first), so the
// allocator looks at them once in this many allocations: an event query
// costs about as much as the rest of such an allocation.
inline constexpr std::size_t kAllocationsPerFenceLook = 32;

class StreamOrder {
 public:
  StreamOrder(Backend& backend, Stats& stats, ObserverList& observers);
  ~StreamOrder();
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  // What the lake needs to know of a freed block.
  struct FreeTag {
    FenceId fence;  // no unmapping of its range before this completes
    // A stream given this memory waits for `fence` first (wait_for). False
    // while one stream is in use: every stream seen later waits at admit().
    bool others_wait = false;
  };

  // A stream's first use by this allocator: false when the backend does not
  // know it. A new stream waits (GPU-side) on every fence not yet complete,
  // since memory freed under them may be given to it. Cheap when known: the
  // stream admitted last (every call, while one stream is in use) is not
  // looked up.
  bool admit(StreamHandle stream) {
    if (MEMLAKE_LIKELY(admitted_last_ && stream == last_admitted_)) return true;
    return admit_lookup(stream);
  }
  // A block last used on `stream` and on `also_used_on` (admitted streams)
  // is freed: the tag it goes to the lake with. Whichever stream is given it
  // next, even `stream`, waits for the other streams' work.
  FreeTag free_on(StreamHandle stream, const std::vector<StreamHandle>& also_used_on);
  // `stream` is about to use memory freed under fences up to `through`: it
  // waits on those recorded by other streams and not complete, recording
  // other streams' open fences up to `through` first. Throws backend_error
  // when one of those streams is capturing a graph.
  void wait_for(StreamHandle stream, FenceId through);
  // Every fence up to this id has completed.
  FenceId completed();
  // Records every open fence (of streams not capturing), so that the lake
  // can unmap what was freed under them once their work is done.
  void record_open_fences();
  // Drops the stream; its fences still complete by their events, and a
  // later stream given the same handle waits on them.
  void forget(StreamHandle stream);
  // Whether captures are under way (graph pools being allocated to): no
  // event is queried meanwhile.
  void set_captures_underway(bool underway) { captures_underway_ = underway; }

  // One allocation: a stream whose fence was found incomplete in it is not
  // asked again until it ends (events on a stream complete in order).
  class CallScope {
   public:
    explicit CallScope(StreamOrder& s) : s_(s) { ++s_.call_depth_; }
    ~CallScope() {
      if (--s_.call_depth_ == 0) s_.behind_.clear();
    }
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    StreamOrder& s_;
  };

 private:
  struct Fence {
    FenceId id;
    EventHandle event = nullptr;
    std::uint64_t seq = 0;             // its event's record (records_)
    StreamHandle source = nullptr;     // the stream that recorded it
    std::vector<StreamHandle> waited;  // the streams that waited on it since
    bool source_gone = false;          // forgotten since: a new stream may have its handle
  };
  // A stream's fence not recorded yet: frees go to the lake under its id.
  struct OpenFence {
    FenceId id;
    StreamHandle source = nullptr;
    std::size_t frees = 0;
  };

  bool admit_lookup(StreamHandle stream);
  void remember_admitted(StreamHandle stream);
  EventHandle acquire_event();
  // Returns the record's number (records_).
  std::uint64_t record(EventHandle event, StreamHandle stream);
  // The event of record `seq` on `stream` has not completed (an error counts
  // as complete: its work can no longer be waited for).
  bool incomplete(EventHandle event, StreamHandle stream, std::uint64_t seq);
  // A GPU-side wait of `stream` on `event` of `source`; throws backend_error
  // on failure.
  void wait(StreamHandle stream, EventHandle event, StreamHandle source);
  std::size_t open_fence_of(StreamHandle stream) const;
  // The stream's open fence (opened now if it has none), by index / itself.
  std::size_t open_fence_index(StreamHandle stream);
  OpenFence& open_fence(StreamHandle stream);
  // Records open fence `i`, unless its stream is capturing; false then.
  bool close_fence(std::size_t i);
  void count_free_under(StreamHandle stream);
  void drop_completed_fences();

  Backend& backend_;
  Stats& stats_;
  ObserverList& observers_;
  std::unordered_set<StreamHandle> streams_;
  // The last stream admit found in streams_ (any handle, nullptr included,
  // may be a stream: hence the flag).
  StreamHandle last_admitted_ = nullptr;
  bool admitted_last_ = false;
  std::vector<EventHandle> event_pool_;
  std::vector<EventHandle> all_events_;
  std::vector<Fence> fences_;    // recorded, not known complete
  std::vector<OpenFence> open_;  // one per stream at most
  std::uint64_t last_fence_ = 0;
  std::uint64_t records_ = 0;  // events recorded so far
  int call_depth_ = 0;         // CallScopes open
  bool captures_underway_ = false;
  // In a CallScope: streams with an event found incomplete, and its record.
  std::vector<std::pair<StreamHandle, std::uint64_t>> behind_;
};

}  // namespace memlake
