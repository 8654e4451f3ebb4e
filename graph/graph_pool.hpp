// GraphPool: one graph pool. Its blocks are placed by lakes of its own (one
// per stream that allocates to it: a block freed on a stream is reused by
// that stream only, in the order the graph runs), over chunks leased from
// its group's ChunkShare, with no mapping worker and no eviction: nothing
// unmaps, re-stitches or evicts its ranges until it is released, so every
// address a captured graph holds stays mapped to the same chunks.
//
// A block freed on another stream than its own, or used on several streams
// (record_stream), may still be in use by the graph's work on the others:
// it is retired, never reused, until the pool goes (PyTorch's pools never
// reuse it across streams either).
//
// Not thread-safe: the allocator holds its lock.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "allocator/request_history.hpp"
#include "backend/backend.hpp"
#include "common/observer_list.hpp"
#include "graph/exclusive_group.hpp"
#include "graph/leased_backend.hpp"
#include "lake/chunk_pool.hpp"
#include "lake/lake.hpp"
#include "memlake/graph.hpp"
#include "memlake/stats.hpp"

namespace memlake::graph {

class GraphPool {
 public:
  GraphPool(PoolId id, std::shared_ptr<ExclusiveGroup> group, Backend& backend,
            const lake::LakeOptions& options, std::size_t capacity);
  // Unmaps its ranges and gives its chunks back to the share (the device is
  // synchronized by then: graph_pools.cpp).
  ~GraphPool();
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;

  // Places `bytes` for `stream`; empty when the pool cannot grow (the
  // refusal is in last_refusal()).
  lake::Placed allocate(std::size_t bytes, StreamHandle stream);
  // Places `bytes` for `stream` at `ptr`, where a block of the pool was
  // before and whose bytes are free again (a checkpoint put back); empty
  // when they are not.
  lake::Placed allocate_at(DevicePtr ptr, std::size_t bytes, StreamHandle stream);
  // The block at `ptr`, of `size` bytes, allocated on `owner`, is freed on
  // `stream`; `shared` when it was used on other streams too.
  void free(DevicePtr ptr, std::size_t size, StreamHandle owner, StreamHandle stream, bool shared);
  // Whether the block at `ptr` (allocated on `owner`) lies on chunks the
  // pool's group shares.
  bool shares_chunks_under(DevicePtr ptr, std::size_t size, StreamHandle owner);
  // Gives the chunks under that block to this pool alone
  // (LeasedBackend::keep); adds the chunks replaced to `*kept`.
  Status keep(DevicePtr ptr, std::size_t size, StreamHandle owner, std::size_t* kept);
  // Why the last allocate() failed, for the out-of-memory report.
  std::string last_refusal() const { return refusal_; }

  PoolId id() const { return id_; }
  ExclusiveGroup& group() { return *group_; }
  GraphPoolStats stats() const;
  std::size_t mapped_bytes() const;
  std::size_t live_blocks() const { return live_blocks_; }
  std::string check_invariants() const;

  // Lifetime (PyTorch's use_count): captures that use it and were not
  // released; routes that allocate to it now; released with live blocks.
  int users = 0;
  int allocating = 0;
  int captures = 0;  // begin_allocate calls so far
  bool released = false;

 private:
  // What one stream's blocks are placed by.
  struct Placement {
    Placement(Backend& backend, ExclusiveGroup& group, const void* pool,
              const lake::LakeOptions& options, std::size_t capacity);
    LeasedBackend backend;
    Stats stats;
    ObserverList observers;  // none: the allocator reports the pool's events
    lake::Refusal refusal;
    lake::ChunkPool chunks;  // before the lake, which takes its chunks
    lake::Lake lake;
    RequestHistory history;
  };

  Placement& placement(StreamHandle stream);
  // A request's size as its lake places it.
  static std::size_t rounded(std::size_t bytes);
  // Counts a block placed in the pool.
  lake::Placed counted(const lake::Placed& placed);

  PoolId id_;
  std::shared_ptr<ExclusiveGroup> group_;
  Backend& backend_;
  lake::LakeOptions options_;
  std::size_t capacity_;
  std::map<StreamHandle, std::unique_ptr<Placement>> placements_;
  std::size_t live_bytes_ = 0;
  std::size_t live_blocks_ = 0;
  std::size_t retired_bytes_ = 0;
  std::size_t allocations_ = 0;
  std::string refusal_;
};

}  // namespace memlake::graph
