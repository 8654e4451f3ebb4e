// memlake/graph.hpp's functions over the allocator's GraphPools, each under
// the allocator's lock.
#include <utility>

#include "allocator/allocator_impl.hpp"
#include "memlake/graph.hpp"

namespace memlake {

namespace {
template <class F>
decltype(auto) graphs(Allocator& alloc, F&& body) {
  return alloc.impl().with_graphs(std::forward<F>(body));
}
}  // namespace

PoolId graph_pool_handle(Allocator& alloc) {
  return graphs(alloc, [](graph::GraphPools& g) { return g.new_pool_id(0); });
}

ExclusiveGroupId new_exclusive_group(Allocator& alloc, bool check) {
  return graphs(alloc, [&](graph::GraphPools& g) { return g.new_group(check); });
}

PoolId exclusive_pool_handle(Allocator& alloc, ExclusiveGroupId group) {
  return graphs(alloc, [&](graph::GraphPools& g) { return g.new_pool_id(group); });
}

void begin_allocate_to_pool(Allocator& alloc, PoolId pool, StreamFilter filter) {
  graphs(alloc, [&](graph::GraphPools& g) { g.begin_allocate(pool, std::move(filter)); });
}

void end_allocate_to_pool(Allocator& alloc, PoolId pool) {
  graphs(alloc, [&](graph::GraphPools& g) { g.end_allocate(pool); });
}

void release_pool(Allocator& alloc, PoolId pool) {
  graphs(alloc, [&](graph::GraphPools& g) { g.release(pool); });
}

// The origin is taken while it captures, valid or not (allocations of an
// invalidated capture are harmless: the capture fails and drops its pool);
// another stream while it is in the origin's active capture.
StreamFilter capture_filter(Allocator& alloc, Stream origin) {
  Backend* b = &alloc.backend();
  return [b, origin](Stream s) {
    CaptureState state = CaptureState::none;
    std::uint64_t id = 0;
    if (b->stream_capture_info(origin, &state, &id) != Status::ok || state == CaptureState::none)
      return false;
    if (s == origin) return true;
    CaptureState other = CaptureState::none;
    std::uint64_t other_id = 0;
    return state == CaptureState::active &&
           b->stream_capture_info(s, &other, &other_id) == Status::ok &&
           other == CaptureState::active && other_id == id;
  };
}

GraphPoolStats graph_pool_stats(Allocator& alloc, PoolId pool) {
  return graphs(alloc, [&](graph::GraphPools& g) { return g.pool_stats(pool); });
}

std::size_t exclusive_group_bytes(Allocator& alloc, ExclusiveGroupId group) {
  return graphs(alloc, [&](graph::GraphPools& g) { return g.group_bytes(group); });
}

void check_exclusive_group(Allocator& alloc, ExclusiveGroupId group) {
  graphs(alloc, [&](graph::GraphPools& g) { g.check_group(group); });
}

std::vector<PoolBlock> pool_blocks(Allocator& alloc, PoolId pool) {
  return graphs(alloc, [&](graph::GraphPools& g) { return g.live_blocks(pool); });
}

std::vector<void*> restore_pool(Allocator& alloc, PoolId pool, const std::vector<PoolBlock>& blocks,
                                std::size_t most_freed) {
  return graphs(alloc, [&](graph::GraphPools& g) { return g.restore(pool, blocks, most_freed); });
}

void launch_exclusive(Allocator& alloc, PoolId pool, GraphHandle graph, Stream stream) {
  graphs(alloc, [&](graph::GraphPools& g) { g.launch(pool, graph, stream); });
}

}  // namespace memlake
