// Observers listen to allocator events (profiling/, tools/). They never change
// what the allocator does. With no observer installed, the hot path pays one
// predictable branch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memlake {

// The rungs of the allocation ladder (docs/architecture.md), cheapest first:
// each request is served by exactly one, which stats (rung_<name>) and
// observers report.
#define MEMLAKE_RUNGS(X)                                                                     \
  X(remembered, "the place the same request had in an earlier step")                         \
  X(fragment, "free space inside a chunk that holds other blocks")                           \
  X(idle_segment, "a whole cached range of the right size")                                  \
  X(continuation, "from a recent block's free tail on into the free chunks mapped after it") \
  X(run_between_pieces, "a run of free chunks with the free pieces on either side")          \
  X(free_run, "the first chunks of a run of free chunks mapped in a range")                  \
  X(extend, "continuation past a range's end: chunks mapped into its reserved room")         \
  X(grow, "a range whose free end holds half the request, grown by the difference")          \
  X(borrowed_ends, "a new range across the free tail and head of two chunks in use")         \
  X(stitch, "a new range over free chunks, with new chunks for what they lack")              \
  X(reserve, "chunks the worker created and mapped ahead of demand")                         \
  X(new_memory, "a new range over new chunks only")                                          \
  X(reclaim_retry, "any rung, after cached ranges and unused chunks were released")

enum class Rung : int {
#define MEMLAKE_RUNG_ENUM(name, help) name,
  MEMLAKE_RUNGS(MEMLAKE_RUNG_ENUM)
#undef MEMLAKE_RUNG_ENUM
};
#define MEMLAKE_RUNG_COUNT(name, help) +1
inline constexpr int kRungCount = 0 MEMLAKE_RUNGS(MEMLAKE_RUNG_COUNT);
#undef MEMLAKE_RUNG_COUNT
// "remembered", "fragment", ...: the stat is rung_<name>.
const char* rung_name(Rung r);

// An allocation handed out.
struct AllocEvent {
  void* ptr = nullptr;
  std::size_t bytes = 0;  // as asked
  std::size_t size = 0;   // as held: rounded to 512 bytes
  void* stream = nullptr;
  Rung rung = Rung::fragment;  // the rung that served it
  std::int64_t ns = 0;         // host time inside allocate, lock wait excluded
};

struct FreeEvent {
  void* ptr = nullptr;
  std::size_t bytes = 0;  // as asked at allocation
  void* stream = nullptr;
};

// A virtual range mapped (a new pBlock, a stitched sBlock, or an extension
// of one at its end) or unmapped.
struct MapEvent {
  std::uintptr_t va = 0;
  std::size_t bytes = 0;
  bool stitched = false;  // over chunks that existed before it
};

enum class WorkerJobKind : int { reserve, eviction };
inline constexpr int kWorkerJobKinds = 2;
const char* worker_job_name(WorkerJobKind k);

// A job of the mapping worker, once committed: what it mapped or unmapped,
// and when its driver calls ran (steady-clock nanoseconds).
struct WorkerJobEvent {
  WorkerJobKind kind = WorkerJobKind::reserve;
  std::size_t bytes = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  bool failed = false;  // the lake was left as it was
};

// Work whose cost is driver calls, bracketed so that a profiler can show it
// as a range while it runs: an allocation that found no free memory already
// mapped (what follows maps, creates chunks or reclaims), and a job of the
// mapping worker (its driver calls run between begin and end).
enum class SlowWork : int { allocation, worker_job };

// A graph pool (memlake/graph.hpp): allocation to it began or ended, or it
// was released (its memory goes back).
struct PoolEvent {
  std::uint64_t pool_first = 0;  // its PoolId
  std::uint64_t pool_second = 0;
  std::uint64_t group = 0;         // its exclusive group, 0 for none
  std::size_t reserved_bytes = 0;  // physical bytes of the chunks it maps
  std::size_t live_bytes = 0;      // of its blocks the caller holds
};

// Every callback runs under the allocator's lock, on the thread that made
// the call (the worker's commits included), and must not call back into the
// allocator.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_alloc(const AllocEvent&) {}
  virtual void on_free(const FreeEvent&) {}
  virtual void on_map(const MapEvent&) {}
  virtual void on_unmap(const MapEvent&) {}
  virtual void on_chunk_created(std::size_t /*bytes*/) {}
  virtual void on_chunk_released(std::size_t /*bytes*/) {}
  // Cached ranges were unmapped and unused chunks released before a retry
  // (or by empty_cache); `released` physical bytes went back.
  virtual void on_reclaim(std::size_t /*released*/) {}
  // `stream` waits, GPU-side, for the work queued on `source` before a
  // fence of its frees (never a host wait).
  virtual void on_stream_wait(void* /*stream*/, void* /*source*/) {}
  virtual void on_worker_job(const WorkerJobEvent&) {}
  virtual void on_oom(std::size_t /*bytes*/, void* /*stream*/) {}
  // Begin and end of slow work come in pairs, on one thread, nested when an
  // inline worker job runs inside an allocation. For an allocation, `bytes`
  // and `stream` are the request's (its AllocEvent or on_oom comes after
  // the end); for a worker job, 0 and nullptr (its WorkerJobEvents come
  // before the end).
  virtual void on_slow_begin(SlowWork, std::size_t /*bytes*/, void* /*stream*/) {}
  virtual void on_slow_end(SlowWork) {}
  virtual void on_pool_begin(const PoolEvent&) {}
  virtual void on_pool_end(const PoolEvent&) {}
  virtual void on_pool_release(const PoolEvent&) {}
};

}  // namespace memlake
