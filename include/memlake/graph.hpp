// memlake::graph: CUDA graphs on memlake memory (docs/graphs.md).
//
// A captured graph replays with the addresses its allocations had during
// the capture, so that memory must stay its own for as long as the graph
// may run. Allocations made while a capture is under way go to a *graph
// pool*: a placement of its own over chunks nobody else may take. A pool's
// blocks keep their addresses and stay mapped until the pool is released;
// eager allocations never get pool memory; a block freed inside a capture
// is reused by the same stream only, in graph order.
//
// Pools declared in one *exclusive group* map the same physical chunks at
// addresses of their own, so graphs that never run at the same time (the
// captured steps of different sequence-length buckets, say) cost about as
// much as the largest of them. They must never run at the same time:
// CapturedGraph::launch (or launch_exclusive) makes each launch wait,
// GPU-side, for the group's previous one; a group created with checking
// on catches launches that overlapped anyway.
//
//   memlake::Allocator alloc;
//   memlake::PoolId pool = memlake::graph_pool_handle(alloc);
//   memlake::CapturedGraph step(alloc, pool, stream, [&](memlake::Stream s) {
//     void* tmp = alloc.allocate(bytes, s);    // from the pool
//     ... enqueue kernels on s ...
//     alloc.deallocate(tmp, bytes, s);
//   });
//   for (int i = 0; i < 1000; ++i) step.launch(stream);
//
// PyTorch reaches the same pools through memlake_torch_begin_allocate_to_pool
// and its siblings (memlake/torch_hooks.h), which memlake.torch.enable()
// installs. All functions are thread-safe; errors are memlake::misuse (a
// pool used against its rules), memlake::out_of_memory and
// memlake::backend_error.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "memlake/allocator.hpp"

namespace memlake {

// A graph pool's name: PyTorch's MempoolId_t. {0, 0} names no pool.
struct PoolId {
  std::uint64_t first = 0;
  std::uint64_t second = 0;
  auto operator<=>(const PoolId&) const = default;
};

using ExclusiveGroupId = std::uint64_t;  // 0: no group
// Which streams allocate to a pool (PyTorch's filter): called under the
// allocator's lock for each allocation while the pool is allocated to, so it
// must not call back into the allocator.
using StreamFilter = std::function<bool(Stream)>;
using GraphHandle = void*;  // a cudaGraphExec_t on CUDA

struct GraphPoolStats {
  ExclusiveGroupId group = 0;  // 0: a pool of its own
  // Physical bytes of the chunks the pool maps; chunks of an exclusive group
  // count in each pool that maps them.
  std::size_t reserved_bytes = 0;
  // Of those, the chunks no other pool of its group maps: those under blocks
  // kept after a capture into an exclusive pool (0 outside a group).
  std::size_t kept_bytes = 0;
  std::size_t mapped_bytes = 0;  // virtual bytes of its ranges
  std::size_t live_bytes = 0;    // blocks the caller holds
  std::size_t live_blocks = 0;
  // Blocks freed on another stream than their own, or used on several:
  // never reused, held until the pool is released.
  std::size_t retired_bytes = 0;
  std::size_t allocations = 0;  // served since the pool was made
  // Pool ranges unmapped while the pool lived: 0, always (the invariant
  // check reports anything else).
  std::size_t unmaps = 0;
  int users = 0;            // captures that use it and were not released
  bool allocating = false;  // between begin_ and end_allocate_to_pool
  bool released = false;    // released with live blocks: gone with the last
};

// --- pools ----------------------------------------------------------------------
// A new pool id (the pool itself is made by its first begin_allocate_to_pool).
PoolId graph_pool_handle(Allocator& alloc);
// A new exclusive group; with `check`, CapturedGraph puts a marker at the
// start and end of each of its graphs, and a graph that starts while another
// of the group runs is reported by the group's next launch, its release, or
// check_exclusive_group().
ExclusiveGroupId new_exclusive_group(Allocator& alloc, bool check = false);
// A new pool id in `group`: its pool shares physical chunks with the group's.
PoolId exclusive_pool_handle(Allocator& alloc, ExclusiveGroupId group);

// Allocations on streams `filter` accepts go to `pool` until
// end_allocate_to_pool (PyTorch's beginAllocateToPool). The first call for a
// pool makes it; each later call counts one more user (a graph sharing it).
void begin_allocate_to_pool(Allocator& alloc, PoolId pool, StreamFilter filter);
// The streams of the capture `origin` is in when allocating: PyTorch's
// filter for torch.cuda.graph (before the capture begins it accepts none).
StreamFilter capture_filter(Allocator& alloc, Stream origin);
// Ends the allocations begin_allocate_to_pool started. If a stream that
// allocated to the pool is in a capture that was invalidated, that capture
// will fail: its use of the pool is released here (PyTorch never releases
// the pool of a failed capture).
void end_allocate_to_pool(Allocator& alloc, PoolId pool);
// One user of the pool is done (its graph was destroyed). With the last,
// the pool is released: the device is synchronized (a graph may still run;
// cudaFree does the same in PyTorch), its ranges are unmapped and its
// chunks go back, at once if no block of it is live, else with the last
// block freed (PyTorch frees graph outputs after the graph). Refused while
// the pool is allocated to; deferred while any capture is under way.
void release_pool(Allocator& alloc, PoolId pool);

GraphPoolStats graph_pool_stats(Allocator& alloc, PoolId pool);
// Physical bytes the chunks of an exclusive group take: about the largest of
// its pools.
std::size_t exclusive_group_bytes(Allocator& alloc, ExclusiveGroupId group);
// Throws misuse if graphs of the group were seen running at the same time
// (groups created with check); the count of such overlaps is
// the graph_exclusive_overlaps statistic.
void check_exclusive_group(Allocator& alloc, ExclusiveGroupId group);

// Launches `graph`, whose memory comes from `pool`, on `stream`; for an
// exclusive pool the launch first waits, GPU-side, for the group's previous
// launch, and the next one waits for it. Never waits on the host.
void launch_exclusive(Allocator& alloc, PoolId pool, GraphHandle graph, Stream stream);

// --- checkpoints ----------------------------------------------------------------
// PyTorch's CUDA graph trees (torch.compile(mode="reduce-overhead")) record
// each graph of a tree into one pool, and before recording a graph that
// follows one already run they put the pool back to how it was when that
// graph was recorded: the blocks live then, at the same addresses.
using PoolBlock = BlockInfo;
// The live blocks of `pool`, in address order.
std::vector<PoolBlock> pool_blocks(Allocator& alloc, PoolId pool);
// Frees every live block of `pool`, then allocates each of `blocks` again at
// its address; returns the pointers freed. Throws misuse, with the pool as it
// was, when a block cannot go back where it was (its bytes are not the
// pool's, or not free once the live blocks are), when a live block was used
// on another stream (record_stream: its memory is held until the pool goes),
// for a pool of an exclusive group (its chunks are the group's), and when
// more than `most_freed` blocks are live (the room a caller has for the
// pointers freed).
std::vector<void*> restore_pool(Allocator& alloc, PoolId pool, const std::vector<PoolBlock>& blocks,
                                std::size_t most_freed = std::numeric_limits<std::size_t>::max());

// --- capture --------------------------------------------------------------------
// A graph captured from `work` on `stream` with the allocator's backend:
// begin_allocate_to_pool(pool, capture_filter(stream)), the capture, end.
// A capture that fails throws backend_error (naming why, e.g. a call that
// invalidated it) and leaves no use of the pool behind.
class CapturedGraph {
 public:
  CapturedGraph(Allocator& alloc, PoolId pool, Stream stream,
                const std::function<void(Stream)>& work);
  ~CapturedGraph();  // destroys the graph and releases its use of the pool
  CapturedGraph(CapturedGraph&& other) noexcept;
  CapturedGraph& operator=(CapturedGraph&&) = delete;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // launch_exclusive on this graph.
  void launch(Stream stream);
  PoolId pool() const { return pool_; }
  GraphHandle handle() const { return graph_; }

 private:
  Allocator* alloc_;
  PoolId pool_;
  GraphHandle graph_ = nullptr;
};

}  // namespace memlake
