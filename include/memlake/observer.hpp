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

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_alloc(void* /*ptr*/, std::size_t /*bytes*/, void* /*stream*/, Rung) {}
  virtual void on_free(void* /*ptr*/, std::size_t /*bytes*/, void* /*stream*/) {}
  // A virtual range was mapped (a new pBlock, or a stitched sBlock).
  virtual void on_map(std::uintptr_t /*va*/, std::size_t /*bytes*/, bool /*stitched*/) {}
  virtual void on_unmap(std::uintptr_t /*va*/, std::size_t /*bytes*/) {}
  virtual void on_oom(std::size_t /*bytes*/, void* /*stream*/) {}
};

}  // namespace memlake
