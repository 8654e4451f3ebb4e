// ChunkPool: the physical chunks of one device, and which of them are free.
//
// A chunk is one backend handle, mapped whole wherever it is mapped. The
// pool creates and releases chunks against the capacity, keeps the free ones
// in a set ordered by size, and records who holds each busy one: a *client*
// (the lake; graph pools share the pool the same way) takes a free chunk
// when it places memory in it and gives it back when the chunk is whole and
// free again. Every client hears of the takes and give-backs of the others,
// since several clients may map the same free chunk in ranges of their own;
// a client keeps its own books on its own takes and give-backs (the lake
// marks its segments behind directly, with no virtual call per chunk).
//
// Invariant: every chunk in use is either free (in the free set, held by no
// client, unpinned or pinned by a worker job) or held by exactly one client;
// sum of chunk sizes == reserved_bytes(); sum over the free set ==
// free_bytes(). Not thread-safe: the allocator holds its lock.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "common/observer_list.hpp"
#include "lake/free_chunk_set.hpp"
#include "lake/refusal.hpp"
#include "lake/types.hpp"
#include "memlake/stats.hpp"

namespace memlake::lake {

using ClientId = std::uint32_t;
inline constexpr ClientId kNoClient = kNone;

struct PhysicalChunk {
  ChunkHandle handle = 0;
  std::size_t size = 0;
  ClientId holder = kNoClient;  // kNoClient: free
  bool in_use = false;          // the slot holds a chunk
  bool reserve = false;         // created by the worker ahead of demand, not taken since
};

class ChunkPool {
 public:
  // Told of every chunk that joins or leaves the pool, and of every take
  // and give-back by another client.
  class Client {
   public:
    virtual ~Client() = default;
    virtual void chunk_added(ChunkId id) = 0;
    virtual void chunk_removed(ChunkId id) = 0;
    virtual void chunk_changed(ChunkId id) = 0;  // taken or given back
  };

  ChunkPool(Backend& backend, std::size_t capacity, Stats& stats, ObserverList& observers,
            Refusal& refusal);
  ~ChunkPool();  // releases every chunk still in use
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  // A client attached with `hears_changes` false is not told of takes and
  // give-backs (one per chunk a block claims or frees): it keeps nothing
  // about them.
  ClientId attach(Client* client, bool hears_changes = true);
  void detach(ClientId client);

  // A new free chunk of `size` bytes; kNone when the capacity or a resource
  // of the backend runs out (noted in the Refusal). Throws backend_error for
  // other failures.
  ChunkId create(std::size_t size);
  // Enters a handle the backend created (by a worker job) as a free chunk.
  ChunkId adopt(ChunkHandle handle, std::size_t size);
  // The chunk must be free, unpinned and mapped nowhere. False when the
  // backend refused: the chunk stays in the pool, free, for a later try.
  bool release(ChunkId id);

  // Takes free chunks for `client` / gives back chunks one client holds:
  // one chunk, or a large block's run of them, whose free bytes change once
  // and whose chunks the other clients hear of only when one listens.
  void take_all(std::span<const ChunkId> ids, ClientId client);
  void give_back_all(std::span<const ChunkId> ids);
  void take(ChunkId id, ClientId client);
  void give_back(ChunkId id);
  bool is_free(ChunkId id) const { return chunks_[id].holder == kNoClient; }

  void mark_reserve(ChunkId id);
  void clear_reserve(ChunkId id);

  const PhysicalChunk& operator[](ChunkId id) const { return chunks_[id]; }
  std::size_t size(ChunkId id) const { return chunks_[id].size; }
  // One past the largest chunk id in use so far (clients size tables by it).
  std::size_t slots() const { return chunks_.size(); }
  const FreeChunkSet& free_set() const { return free_; }

  std::size_t capacity() const { return capacity_; }
  std::size_t reserved_bytes() const { return reserved_bytes_; }
  std::size_t free_bytes() const { return free_bytes_; }
  std::size_t reserve_bytes() const { return reserve_bytes_; }
  // A worker job creating chunks without the lock counts them against the
  // capacity meanwhile.
  void begin_creating(std::size_t bytes) { creating_bytes_ = bytes; }
  void end_creating() { creating_bytes_ = 0; }
  std::size_t creating_bytes() const { return creating_bytes_; }
  Backend& backend() const { return backend_; }

  std::string check_invariants() const;

 private:
  void notify_added(ChunkId id);
  void notify_removed(ChunkId id);
  // The length of the run of consecutive ids of one size from ids[k], when
  // the block has at least kLongBlock chunks and the run at least kLongRun,
  // else 1: a block of a few GiB takes hundreds of chunks, made together.
  static constexpr std::size_t kLongBlock = 32;
  static constexpr std::size_t kLongRun = 8;
  std::size_t run_at(std::span<const ChunkId> ids, std::size_t k) const;
  // Calls one(id) for each chunk of `ids`, except that each run run_at
  // finds goes to run(size, lo, hi) whole; returns the bytes of all.
  template <typename One, typename Run>
  std::size_t by_runs(std::span<const ChunkId> ids, One&& one, Run&& run);
  // One chunk's part of a take or give-back, less the free bytes and the
  // other clients' news; returns its size. mark_held and mark_unheld leave
  // the free set to the caller.
  void mark_held(ChunkId id, ClientId client) {
    PhysicalChunk& c = chunks_[id];
    assert(c.holder == kNoClient);
    if (c.reserve) clear_reserve(id);
    c.holder = client;
  }
  std::size_t hold(ChunkId id, ClientId client) {
    const std::size_t size = chunks_[id].size;
    free_.erase({size, id});
    mark_held(id, client);
    return size;
  }
  void mark_unheld(ChunkId id) {
    assert(chunks_[id].holder != kNoClient);
    chunks_[id].holder = kNoClient;
  }
  std::size_t unhold(ChunkId id) {
    mark_unheld(id);
    const std::size_t size = chunks_[id].size;
    free_.emplace(size, id);
    return size;
  }
  // Whether a client other than `by` listens to takes and give-backs.
  bool others_hear(ClientId by) const {
    return hearing_changes_.size() > 1 ||
           (hearing_changes_.size() == 1 && hearing_changes_[0].first != by);
  }
  // A change by the only client that hears (the lake, on its fast path)
  // calls nobody.
  void notify_changed(ChunkId id, ClientId by) {
    for (auto [client, c] : hearing_changes_)
      if (client != by) c->chunk_changed(id);
  }

  Backend& backend_;
  std::size_t capacity_;
  Stats& stats_;
  ObserverList& observers_;
  Refusal& refusal_;
  std::vector<PhysicalChunk> chunks_;
  std::vector<ChunkId> free_slots_;
  FreeChunkSet free_;  // by size, then id
  std::vector<Client*> clients_;
  // The clients attached to hear takes and give-backs.
  std::vector<std::pair<ClientId, Client*>> hearing_changes_;
  std::size_t reserved_bytes_ = 0;
  std::size_t free_bytes_ = 0;
  std::size_t reserve_bytes_ = 0;
  std::size_t creating_bytes_ = 0;
};

}  // namespace memlake::lake
