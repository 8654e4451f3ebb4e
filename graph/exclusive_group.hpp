// ExclusiveGroup: graph pools whose graphs never run at the same time, and
// so share physical chunks (ChunkShare); a pool outside any group has a
// group of its own (id 0), whose chunks nobody shares.
//
// The contract is enforced where memlake sees the launches: launch() makes
// each launch wait, GPU-side, for the group's previous one (an event
// recorded after it), so launches through it never overlap, whatever
// streams they are on. Launches memlake does not see (cudaGraphLaunch,
// torch.cuda.CUDAGraph.replay) are checked when the group checks: the
// graphs CapturedGraph captures then begin and end with a host function
// (OverlapCheck's markers) that counts the group's graphs running, and a
// graph that starts while another runs is an overlap, reported by the
// group's next launch, release or check.
//
// Not thread-safe, except the markers: the allocator holds its lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "graph/chunk_share.hpp"
#include "memlake/graph.hpp"

namespace memlake::graph {

// The markers of a checking group. Kept as long as the allocator, since a
// destroyed graph may still be running its last marker.
class OverlapCheck {
 public:
  struct Marker {
    OverlapCheck* check;
    PoolId pool;
  };
  // A marker for the graphs of `pool`; its address is stable.
  Marker* marker(PoolId pool);
  // Host functions: the first and the last node of a checked graph.
  static void begin(void* marker);
  static void end(void* marker);

  std::uint64_t overlaps() const { return overlaps_.load(std::memory_order_acquire); }
  // The overlaps not yet reported, and a description of the latest one; 0
  // when there is none new.
  std::uint64_t take_unreported(std::string* what);

 private:
  std::deque<Marker> markers_;
  std::atomic<int> running_{0};
  std::atomic<std::uint64_t> overlaps_{0};
  std::atomic<const Marker*> last_running_{nullptr};
  std::atomic<const Marker*> last_overlap_started_{nullptr};
  std::atomic<const Marker*> last_overlap_running_{nullptr};
  std::uint64_t reported_ = 0;
};

struct ExclusiveGroup {
  ExclusiveGroup(ExclusiveGroupId id, ChunkShare::Source& source, Backend& backend,
                 std::shared_ptr<OverlapCheck> check)
      : id(id), share(source), backend(backend), check(std::move(check)) {}
  ~ExclusiveGroup();
  ExclusiveGroup(const ExclusiveGroup&) = delete;
  ExclusiveGroup& operator=(const ExclusiveGroup&) = delete;

  // Launches `graph` on `stream` after the group's previous launch (GPU-side).
  // Returns whether it had to wait on another stream; throws backend_error.
  bool launch(GraphHandle graph, StreamHandle stream);

  const ExclusiveGroupId id;
  ChunkShare share;
  Backend& backend;
  std::shared_ptr<OverlapCheck> check;  // null unless the group checks

 private:
  EventHandle last_ = nullptr;  // recorded after the previous launch
  StreamHandle last_stream_ = nullptr;
  bool launched_ = false;
};

}  // namespace memlake::graph
