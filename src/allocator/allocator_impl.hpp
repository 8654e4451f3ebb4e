// AllocatorImpl: one device's allocator. It holds the lock, tracks what the
// caller holds (live blocks with their streams), and drives the layers below:
// StreamOrder for the fences frees go to the lake under, the Lake for memory,
// the mapping worker for driver work off the allocating thread.
//
// allocate: admit the caller's stream, then climb the ladder (src/lake/
// ladder.cpp) in budget order: every rung that makes no new memory, a nudge
// to the worker (a synchronization point), the rungs that create chunks,
// and after a reclaim the whole ladder once more; else out_of_memory. Memory
// freed under another stream's fence makes the caller's stream wait for it,
// GPU-side (never the host).
// deallocate: the block goes to the lake at once, under its stream's fence.
//
// Graph pools (graph/): while a pool is being allocated to, allocate asks
// the pools first (one predictable branch otherwise); a pointer the caller
// frees or records that is not a live lake block may be a pool's.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/request_history.hpp"
#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/turn_taking_backend.hpp"
#include "backend/backend.hpp"
#include "common/node_pool.hpp"
#include "common/observer_list.hpp"
#include "common/timing.hpp"
#include "graph/graph_pools.hpp"
#include "lake/lake.hpp"
#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "memlake/sharing.hpp"
#include "stream/stream_order.hpp"
#include "worker/mapping_worker.hpp"

namespace memlake {

class Profilers;  // profiling/profiling.hpp

class AllocatorImpl {
 public:
  AllocatorImpl(const Config& config, std::unique_ptr<Backend> backend);
  ~AllocatorImpl();

  void* allocate(std::size_t bytes, Stream stream);
  // The body of allocate, under the lock.
  void* allocate_locked(std::size_t bytes, Stream stream);
  // On *stream, or where stream is null on the stream the block was
  // allocated on.
  void deallocate(void* ptr, std::size_t bytes, const Stream* stream);
  // On the block's own stream; false, with nothing changed, when `ptr` is
  // no live block.
  bool deallocate_if_live(void* ptr);
  void record_stream(void* ptr, Stream stream);
  void empty_cache();
  void process_pending_frees();

  Stats stats() const;
  void reset_peak_stats();
  const Config& config() const { return config_; }
  Backend& backend() { return *counting_; }
  const Backend& backend() const { return *counting_; }
  const CountingBackend& counting() const { return *counting_; }
  std::size_t capacity() const { return pool_.capacity(); }
  // Not const: the lake catches its segment entries up first.
  std::size_t largest_available();
  std::size_t allocation_size(const void* ptr) const;
  std::optional<BlockInfo> block_info(const void* ptr) const;
  std::vector<BlockInfo> live_blocks() const;
  bool owns(const void* ptr) const;
  SharedBlock share(const void* ptr);
  void add_observer(Observer* o);
  void remove_observer(Observer* o);
  Stream create_stream();
  void destroy_stream(Stream stream);
  std::string check_invariants() const;
  // Other addresses showing the bytes of a live block (tests of stitching).
  std::vector<std::pair<DevicePtr, std::size_t>> aliases(const void* ptr) const;
  // For diagnostics and tests; the caller must not run allocations meanwhile.
  const lake::Lake& lake() const { return lake_; }
  lake::Lake& lake() { return lake_; }
  // The driver turns the worker's threads give way to; a test that holds
  // one keeps them from making VMM calls meanwhile.
  DriverTurns& driver_turns() { return *turns_; }
  // nullptr when no profiling option is on.
  const Profilers* profilers() const { return profilers_.get(); }
  // The graph pools, for `body(graphs)` under the allocator's lock
  // (graph/api.cpp).
  template <class F>
  decltype(auto) with_graphs(F&& body) {
    std::lock_guard lock(mutex_);
    return body(graphs_);
  }

 private:
  // The body of both deallocates, under the lock: false when `ptr` is no
  // live block.
  bool free_locked(void* ptr, std::size_t bytes, const Stream* stream);
  // The streams other than `freed_on` whose work may still use the block at
  // `key`, allocated on `own`: those record_stream named and its own; the
  // block's entry in other_streams_ goes.
  std::vector<Stream> streams_to_wait_for(DevicePtr key, Stream own, Stream freed_on);
  // The ladder in budget order, reclaim included; an empty Placed when
  // nothing serves.
  lake::Placed climb(const lake::Request& request, Stream stream);
  // Asks the stream order which fences have completed and tells the lake;
  // returns the newest. Allocations look once in kAllocationsPerFenceLook
  // calls (stream_order.hpp), before they map and before a wait.
  FenceId look_at_fences();
  // `timed` has run since the lock was taken: observers get its time.
  void* hand_out(const lake::Placed& p, std::size_t requested, Stream stream,
                 const ScopedTicks& timed);
  // errors.cpp
  // Counts in misuse_errors unless the call was a query (allocation_size).
  [[noreturn]] void misuse(const std::string& message, bool counts = true) const;
  [[noreturn]] void unknown_stream(const char* what, Stream stream, const void* ptr) const;
  std::string bad_pointer(DevicePtr ptr) const;
  [[noreturn]] void out_of_memory(std::size_t bytes, Stream stream);
  void check_debug() const;

  Config config_;
  // Thrown (as a copy, which allocates nothing) when the host's heap runs out
  // inside a call: made while memory is there.
  const memlake::out_of_memory host_oom_;
  CountingBackend* counting_ = nullptr;  // owned through backend_
  DriverTurns* turns_ = nullptr;         // owned through backend_
  std::unique_ptr<Backend> backend_;
  mutable std::mutex mutex_;
  // allocate_ns and deallocate_ns count ticks (ScopedTicks); stats() reports
  // nanoseconds.
  mutable Stats stats_;
  ObserverList observers_;
  // The observers of the options record, timeline and nvtx; they outlive the
  // lake's events.
  std::unique_ptr<Profilers> profilers_;
  lake::Refusal refusal_;  // the latest refusal for want of a resource, for the OOM report
  lake::ChunkPool pool_;   // before the lake, which takes its chunks
  lake::Lake lake_;
  StreamOrder order_;
  graph::GraphPools graphs_;  // before the lake and pool go: it holds their chunks
  // The live blocks are the lake's: each one's requested size and stream
  // are its lake::CallerNote. Blocks used on streams other than their own
  // (record_stream) list those here until they are freed; empty while every
  // block stays on its stream.
  std::unordered_map<DevicePtr, std::vector<Stream>> other_streams_;
  RequestHistory history_;                        // where in a repeated step a request comes
  std::size_t allocations_since_fence_look_ = 0;  // see kAllocationsPerFenceLook
  MappingWorker worker_;                          // last: stopped before the lake goes
};

}  // namespace memlake
