// Timeline: an observer that keeps the allocator's last events in a bounded
// ring and the state they lead to (live blocks, mapped ranges, byte totals),
// and writes them on demand:
//
//   trace_json()     Chrome Trace Event JSON (Perfetto, chrome://tracing):
//                    counters of live, reserved and mapped bytes; a track
//                    per stream with every allocation as a slice (its time
//                    inside allocate, named by the rung that served it) and
//                    frees as instants; the mapping worker's jobs as slices;
//                    maps and unmaps on a track of their own; OOM and
//                    reclaim as instants (timeline_json.cpp)
//   snapshot_json()  the state and the events in the form of PyTorch's memory
//                    snapshot (segments with their blocks, device_traces), for
//                    pytorch.org/memory_viz (memory_snapshot.cpp)
//
// Installed by the `timeline` option, which also writes trace_json() to its
// path at exit; tools add one with Allocator::add_observer. The ring holds
// max_events events (the oldest go first); the state before the oldest one
// kept is worked out backwards from the current state, so counters and live
// blocks stay exact however long the run was. Mapped ranges are kept as
// intervals: an extension of a range joins it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "memlake/observer.hpp"
#include "profiling/at_exit.hpp"
#include "profiling/block_table.hpp"
#include "profiling/spin_lock.hpp"

namespace memlake {

class Timeline final : public Observer, private ClosesAtExit {
 public:
  enum class Kind : std::uint8_t {
    alloc,
    free,
    map,
    unmap,
    chunk_created,
    chunk_released,
    reclaim,
    stream_wait,
    worker_job,
    oom,
  };

  // One event, 48 bytes. Times are nanoseconds since the timeline began.
  struct Record {
    std::int64_t ns = 0;          // when it happened (a worker job: when its driver calls began)
    std::uint64_t addr = 0;       // block, range; a stream wait: the stream waited for
    std::uint64_t size = 0;       // as held; range, chunk or job bytes; released; OOM: asked
    std::uint64_t requested = 0;  // alloc and free: bytes as asked
    void* stream = nullptr;
    std::uint32_t dur_ns = 0;  // alloc: time inside allocate; worker job: its driver calls
                               // (at most 4.29 s)
    Kind kind = Kind::alloc;
    std::uint8_t detail = 0;  // alloc: Rung; map, unmap: stitched; job: WorkerJobKind
    bool failed = false;      // worker job
  };
  static_assert(sizeof(Record) == 48);

  struct Block {
    std::uint64_t size = 0, requested = 0;
    void* stream = nullptr;
  };
  struct Range {
    std::uint64_t bytes = 0;
    bool stitched = false;
  };
  // Byte totals: they equal the allocator's live_bytes, reserved_bytes and
  // mapped_bytes stats when the timeline saw every event since the
  // allocator was made.
  struct Totals {
    std::int64_t live = 0, reserved = 0, mapped = 0;
  };

  // What a dump works from: a consistent copy, taken under the lock.
  struct Copy {
    int device = 0;
    std::size_t capacity_events = 0;
    std::uint64_t recorded = 0;  // events seen in all; recorded - records.size() were dropped
    std::int64_t now_ns = 0;
    std::vector<Record> records;  // oldest first
    std::unordered_map<std::uint64_t, Block> live;
    std::map<std::uint64_t, Range> ranges;
    Totals totals;
    std::uint64_t capacity_bytes = 0;
  };

  // `path` ("{device}" and "{pid}" replaced) is written at exit and when the
  // timeline goes; empty: only on demand. `capacity_bytes` is what the
  // allocator may hold (for the free bytes an OOM reports).
  Timeline(int device, std::size_t max_events, const std::string& path = {},
           std::uint64_t capacity_bytes = 0);
  ~Timeline() override;
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  void on_alloc(const AllocEvent& e) override;
  void on_free(const FreeEvent& e) override;
  void on_map(const MapEvent& e) override;
  void on_unmap(const MapEvent& e) override;
  void on_chunk_created(std::size_t bytes) override;
  void on_chunk_released(std::size_t bytes) override;
  void on_reclaim(std::size_t released) override;
  void on_stream_wait(void* stream, void* source) override;
  void on_worker_job(const WorkerJobEvent& e) override;
  void on_oom(std::size_t bytes, void* stream) override;

  Copy copy() const;
  std::string trace_json() const { return trace_json_of(copy()); }
  std::string snapshot_json() const { return snapshot_json_of(copy()); }
  // Writes trace_json() to `path`; throws memlake::error naming the file.
  void write(const std::string& path) const;
  // Writes to the path given at construction, once (later calls do nothing).
  // Reports a failure on stderr: it runs at exit.
  void close_at_exit() override;
  Totals totals() const;
  const std::string& path() const { return path_; }

  static std::string trace_json_of(const Copy& c);     // timeline_json.cpp
  static std::string snapshot_json_of(const Copy& c);  // memory_snapshot.cpp
  // The fields both describe the recorded window with: "device",
  // "events_kept", "events_dropped" (timeline_json.cpp).
  static void window_fields(std::string& out, const Copy& c);

 private:
  std::int64_t now() const;
  void push(const Record& r);                       // with lock_ held
  void push_mapping(Kind kind, const MapEvent& e);  // with lock_ held
  void add_range(std::uint64_t va, std::uint64_t bytes, bool stitched);
  void remove_range(std::uint64_t va, std::uint64_t bytes);

  mutable SpinLock lock_;
  const int device_;
  const std::size_t max_events_;
  const std::string path_;
  const std::uint64_t capacity_bytes_;
  const std::int64_t start_ns_;
  bool written_ = false;
  std::vector<Record> ring_;
  std::size_t next_ = 0;  // where the next record goes once the ring is full
  std::uint64_t recorded_ = 0;
  BlockTable<Block> live_;
  std::map<std::uint64_t, Range> ranges_;
  Totals totals_;
};

// Adds [va, va + bytes) to a set of disjoint intervals (va -> Range): a range
// that starts where another ends joins it. Removing cuts it out of whatever
// holds it.
void interval_add(std::map<std::uint64_t, Timeline::Range>& ranges, std::uint64_t va,
                  std::uint64_t bytes, bool stitched);
void interval_remove(std::map<std::uint64_t, Timeline::Range>& ranges, std::uint64_t va,
                     std::uint64_t bytes);

}  // namespace memlake
