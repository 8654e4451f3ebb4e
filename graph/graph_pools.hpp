// GraphPools: the graph pools of one allocator, and the routing of its
// allocations to them while captures are under way.
//
// Routing is PyTorch's: begin_allocate(pool, filter) adds a route, and
// while any route is open every allocation asks the routes' filters, in
// order, whether its stream allocates to their pool (routing() is the one
// branch the allocator's common path pays). An allocation no filter claims
// goes to the lake, unless its stream is capturing: then it is refused,
// since lake memory given to a graph could be handed to someone else while
// the graph still replays into it. While routes are open the stream order
// queries no events (stream_order.hpp).
//
// Pools are made by their first begin_allocate and counted (users) like
// PyTorch's: each later begin on the same pool is one more graph sharing it,
// each release_pool one less; the last release frees it once its blocks are
// freed, after a device synchronization, and never while a capture is under
// way (pending_ waits for the next begin_allocate, release or empty_cache).
// A route whose capture was invalidated by the time it ends is abandoned:
// its use of the pool is released there.
//
// Chunks come from the allocator's ChunkPool, held there by this client, so
// the lake and its worker never take or release them (ChunkShare).
//
// Not thread-safe: the allocator holds its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "common/observer_list.hpp"
#include "graph/chunk_share.hpp"
#include "graph/exclusive_group.hpp"
#include "graph/graph_pool.hpp"
#include "lake/chunk_pool.hpp"
#include "lake/lake.hpp"
#include "memlake/config.hpp"
#include "memlake/graph.hpp"
#include "memlake/stats.hpp"
#include "stream/stream_order.hpp"

namespace memlake::graph {

class GraphPools final : private lake::ChunkPool::Client, private ChunkShare::Source {
 public:
  GraphPools(Backend& backend, lake::ChunkPool& chunks, lake::Lake& lake, StreamOrder& order,
             Stats& stats, ObserverList& observers, const lake::LakeOptions& options,
             MisuseAction on_misuse);
  ~GraphPools() override;
  GraphPools(const GraphPools&) = delete;
  GraphPools& operator=(const GraphPools&) = delete;

  // True while a pool is being allocated to: the allocator then asks
  // allocate() first.
  bool routing() const { return !routes_.empty(); }

  // A block for `stream` from the pool whose filter claims it; nullptr when
  // none does and the stream is not capturing. Throws out_of_memory when
  // the pool cannot grow, misuse for a capturing stream no pool claims.
  void* allocate(std::size_t bytes, StreamHandle stream);
  // False when `ptr` is no live block of a pool (the allocator then reports
  // the bad pointer); throws misuse for a wrong size.
  // The free is on *stream, or where stream is null on the block's own.
  bool deallocate(DevicePtr ptr, std::size_t bytes, const StreamHandle* stream);
  bool record_stream(DevicePtr ptr, StreamHandle stream);
  // The live pool block at `ptr`; none when there is no such block.
  std::optional<BlockInfo> block_info(DevicePtr ptr) const;
  // The live blocks of every pool, in no order.
  std::vector<BlockInfo> all_live_blocks() const;

  PoolId new_pool_id(ExclusiveGroupId group);
  ExclusiveGroupId new_group(bool check);
  void begin_allocate(PoolId id, StreamFilter filter);
  void end_allocate(PoolId id);
  void release(PoolId id);
  // Frees the pools whose release waits (device synchronization); nothing
  // while a capture is under way.
  void release_pending();

  // Checkpoints (memlake/graph.hpp): a pool's live blocks, in address
  // order, and the pool put back to such a list.
  std::vector<PoolBlock> live_blocks(PoolId id);
  std::vector<void*> restore(PoolId id, const std::vector<PoolBlock>& blocks,
                             std::size_t most_freed);

  GraphPoolStats pool_stats(PoolId id) const;
  std::size_t group_bytes(ExclusiveGroupId group) const;
  void check_group(ExclusiveGroupId group);
  void launch(PoolId id, GraphHandle graph, StreamHandle stream);
  // The marker host functions of a checking group's pool; null marker when
  // the pool's group does not check.
  OverlapCheck::Marker* marker(PoolId id);

  // Blocks handed out from every pool and not yet freed.
  std::size_t block_count() const { return blocks_.size(); }
  std::string check_invariants() const;

 private:
  struct Route {
    PoolId id;
    GraphPool* pool;
    StreamFilter filter;
    std::vector<StreamHandle> streams;  // that allocated through it
  };
  struct Block {
    GraphPool* pool;
    std::size_t size;
    std::size_t requested;
    StreamHandle stream;
    bool shared;  // also used on another stream
  };
  // A live block as callers see it.
  static BlockInfo info(DevicePtr ptr, const Block& b);

  // lake::ChunkPool::Client: the lake's business; nothing to keep here.
  void chunk_added(lake::ChunkId) override {}
  void chunk_removed(lake::ChunkId) override {}
  void chunk_changed(lake::ChunkId) override {}  // not called: attached not to hear them
  // ChunkShare::Source
  Status take_new(std::size_t size, lake::ChunkId* id, ChunkHandle* handle) override;
  void give_back(lake::ChunkId id) override;
  ChunkShare::Source& source() { return *this; }

  GraphPool& pool(PoolId id, const char* call);
  std::shared_ptr<ExclusiveGroup> group_for(PoolId id);
  // The pool's last user is gone: freed now or when possible.
  void retire(PoolId id);
  void destroy(PoolId id);
  void set_routing();
  // Gives the blocks of an exclusive pool that outlive its capture chunks
  // of their own (see end_allocate).
  void keep_captured_blocks(GraphPool& p);
  // Enters a block placed in `p` for `bytes` on `stream`.
  void* enter(GraphPool& p, const lake::Placed& placed, std::size_t bytes, StreamHandle stream);
  // Places each block in `p` at its address; returns how many went back
  // (all of them, or the first that could not go back is blocks[n]).
  std::size_t place_back(GraphPool& p, const std::vector<PoolBlock>& blocks);
  void refresh_mapped();
  void check_overlaps(ExclusiveGroup& group);
  [[noreturn]] void misuse(const std::string& message) const;
  void notify(void (Observer::*event)(const PoolEvent&), const GraphPool& p) const;

  Backend& backend_;
  lake::ChunkPool& chunks_;
  lake::Lake& lake_;
  StreamOrder& order_;
  Stats& stats_;
  ObserverList& observers_;
  lake::LakeOptions options_;
  MisuseAction on_misuse_;
  lake::ClientId client_;
  std::vector<Route> routes_;
  std::map<PoolId, std::unique_ptr<GraphPool>> pools_;
  std::map<PoolId, ExclusiveGroupId> declared_;  // made by new_pool_id, not begun yet
  std::map<ExclusiveGroupId, std::shared_ptr<ExclusiveGroup>> groups_;
  std::vector<std::shared_ptr<OverlapCheck>> checks_;  // as long as the allocator
  std::unordered_map<DevicePtr, Block> blocks_;
  std::vector<PoolId> pending_;      // released, waiting for a synchronization
  std::map<PoolId, int> abandoned_;  // uses released by a failed capture
  std::set<PoolId> gone_;            // freed: their ids name no pool again
  std::uint64_t next_id_ = 0;
  std::size_t mapped_ = 0;  // graph_pool_mapped_bytes as last set
};

}  // namespace memlake::graph
