// ChunkShare: the physical chunks of the graph pools of one exclusive group
// (a pool outside any group has a share of its own).
//
// Every chunk comes from the allocator's ChunkPool, held there by the graph
// pools' client, so neither the lake nor its worker can take, map into a
// block, or release it. Each pool of the group may map a chunk of the share
// once: a pool asking for a chunk of some size gets one of the share's
// chunks of that size it does not map yet, or a new one. So the share
// holds, for each chunk size, as many chunks as the pool that maps the most
// of them: the pools together cost about the largest one. A chunk goes back
// to the ChunkPool, as a free chunk, once no pool maps it.
//
// A *kept* chunk belongs to one pool alone: it backs blocks that outlive
// their capture (a graph's outputs, a library's cache), which the group's
// other graphs must not overwrite (LeasedBackend::keep).
//
// Not thread-safe: the allocator holds its lock.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "lake/types.hpp"

namespace memlake::graph {

class ChunkShare {
 public:
  // Where new chunks come from (GraphPools, over the allocator's ChunkPool).
  class Source {
   public:
    virtual ~Source() = default;
    // A new chunk of `size` bytes, taken for the graph pools: false (with
    // the reason in the backend's error slot) when none can be made.
    virtual Status take_new(std::size_t size, lake::ChunkId* id, ChunkHandle* handle) = 0;
    virtual void give_back(lake::ChunkId id) = 0;
  };

  explicit ChunkShare(Source& source) : source_(source) {}
  ~ChunkShare();  // gives back what is left (pools gone first)
  ChunkShare(const ChunkShare&) = delete;
  ChunkShare& operator=(const ChunkShare&) = delete;

  // A chunk of `size` bytes that `pool` does not map yet.
  Status lease(const void* pool, std::size_t size, ChunkHandle* handle);
  // A new chunk of `size` bytes that no other pool may lease.
  Status lease_kept(const void* pool, std::size_t size, ChunkHandle* handle);
  // `pool` maps `handle` no more; false for a chunk it did not lease.
  bool unlease(const void* pool, ChunkHandle handle);

  std::size_t bytes() const { return bytes_; }  // physical bytes held
  std::size_t chunks() const { return chunks_.size(); }
  // The chunks `pool` leased and their bytes.
  std::size_t bytes_of(const void* pool) const;
  // The kept chunks of `pool` and their bytes.
  std::size_t kept_bytes_of(const void* pool) const;
  std::string check_invariants() const;

 private:
  struct Held {
    lake::ChunkId id;
    ChunkHandle handle;
    std::size_t size;
    std::vector<const void*> pools;  // the pools that leased it
    bool kept = false;               // leased by its one pool alone
  };

  Status take(const void* pool, std::size_t size, bool kept, ChunkHandle* handle);

  Source& source_;
  std::vector<Held> chunks_;  // in lease order: the first fit goes first
  std::size_t bytes_ = 0;
};

}  // namespace memlake::graph
