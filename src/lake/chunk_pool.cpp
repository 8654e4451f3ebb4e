// The chunk pool: creating, releasing, taking and giving back chunks.
#include "lake/chunk_pool.hpp"

#include <algorithm>
#include <cassert>
#include <sstream>
#include <string>

#include "common/stat_update.hpp"
#include "memlake/errors.hpp"

namespace memlake::lake {

ChunkPool::ChunkPool(Backend& backend, std::size_t capacity, Stats& stats, ObserverList& observers,
                     Refusal& refusal)
    : backend_(backend),
      capacity_(capacity),
      stats_(stats),
      observers_(observers),
      refusal_(refusal) {}

ChunkPool::~ChunkPool() {
  for (PhysicalChunk& c : chunks_)
    if (c.in_use) backend_.release_chunk(c.handle);
}

ClientId ChunkPool::attach(Client* client, bool hears_changes) {
  ClientId id = 0;
  while (id < clients_.size() && clients_[id] != nullptr) ++id;
  if (hears_changes) hearing_changes_.emplace_back(id, client);
  if (id == clients_.size())
    clients_.push_back(client);
  else
    clients_[id] = client;
  return id;
}

void ChunkPool::detach(ClientId client) {
  std::erase_if(hearing_changes_, [&](const auto& h) { return h.first == client; });
  clients_[client] = nullptr;
}

void ChunkPool::notify_added(ChunkId id) {
  for (Client* c : clients_)
    if (c) c->chunk_added(id);
}

void ChunkPool::notify_removed(ChunkId id) {
  for (Client* c : clients_)
    if (c) c->chunk_removed(id);
}

ChunkId ChunkPool::create(std::size_t size) {
  if (reserved_bytes_ + creating_bytes_ + size > capacity_) return kNone;
  ChunkHandle handle = 0;
  const Status s = backend_.create_chunk(size, &handle);
  if (is_exhaustion(s)) {
    refusal_.note(s, "create_chunk", backend_.last_error());
    return kNone;
  }
  if (s != Status::ok) {
    throw backend_error(std::string("memlake: create_chunk failed (") + status_name(s) +
                        "): " + backend_.last_error());
  }
  try {
    return adopt(handle, size);
  } catch (...) {  // the host's heap ran out: the handle goes back
    backend_.release_chunk(handle);
    throw;
  }
}

// What needs the heap comes first (a slot, the clients' tables, the free
// set's bits), so that a failure there leaves the pool as it was.
ChunkId ChunkPool::adopt(ChunkHandle handle, std::size_t size) {
  const bool fresh_slot = free_slots_.empty();
  const ChunkId id = fresh_slot ? static_cast<ChunkId>(chunks_.size()) : free_slots_.back();
  if (fresh_slot) chunks_.emplace_back();
  try {
    notify_added(id);
    free_.emplace(size, id);
  } catch (...) {
    if (fresh_slot) chunks_.pop_back();
    throw;
  }
  if (!fresh_slot) free_slots_.pop_back();
  PhysicalChunk& c = chunks_[id];
  c = PhysicalChunk{};
  c.handle = handle;
  c.size = size;
  c.in_use = true;
  free_.emplace(size, id);
  free_bytes_ += size;
  reserved_bytes_ += size;
  gauge(stats_.reserved_bytes, static_cast<std::int64_t>(size));
  gauge(stats_.chunks, 1);
  ++stats_.chunks_created.current;
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_chunk_created(size); });
  return id;
}

bool ChunkPool::release(ChunkId id) {
  PhysicalChunk& c = chunks_[id];
  assert(c.holder == kNoClient);
  const Status s = backend_.release_chunk(c.handle);
  if (s != Status::ok) {
    refusal_.note(s, "release_chunk", backend_.last_error());
    return false;
  }
  if (c.reserve) clear_reserve(id);
  free_.erase({c.size, id});
  free_bytes_ -= c.size;
  reserved_bytes_ -= c.size;
  gauge(stats_.reserved_bytes, -static_cast<std::int64_t>(c.size));
  gauge(stats_.chunks, -1);
  ++stats_.chunks_released.current;
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_chunk_released(c.size); });
  c = PhysicalChunk{};
  free_slots_.push_back(id);
  notify_removed(id);
  return true;
}

void ChunkPool::take(ChunkId id, ClientId client) {
  free_bytes_ -= hold(id, client);
  notify_changed(id, client);
}

void ChunkPool::give_back(ChunkId id) {
  const ClientId by = chunks_[id].holder;
  free_bytes_ += unhold(id);
  notify_changed(id, by);
}

// Runs of consecutive ids of one size change the free set a word at a
// time; a short block pays no more than one test of its length.
std::size_t ChunkPool::run_at(std::span<const ChunkId> ids, std::size_t k) const {
  if (k + kLongRun > ids.size() || ids[k + kLongRun - 1] != ids[k] + (kLongRun - 1)) return 1;
  const ChunkId lo = ids[k];
  const std::size_t size = chunks_[lo].size;
  std::size_t n = 1;
  while (k + n < ids.size() && ids[k + n] == lo + n && chunks_[lo + n].size == size) ++n;
  return n < kLongRun ? 1 : n;
}

template <typename One, typename Run>
std::size_t ChunkPool::by_runs(std::span<const ChunkId> ids, One&& one, Run&& run) {
  std::size_t bytes = 0;
  if (ids.size() < kLongBlock) {
    for (ChunkId id : ids) bytes += one(id);
    return bytes;
  }
  for (std::size_t k = 0; k < ids.size();) {
    const std::size_t n = run_at(ids, k);
    if (n == 1) {
      bytes += one(ids[k++]);
      continue;
    }
    const ChunkId lo = ids[k];
    const std::size_t size = chunks_[lo].size;
    run(size, lo, static_cast<ChunkId>(lo + n));
    bytes += size * n;
    k += n;
  }
  return bytes;
}

void ChunkPool::take_all(std::span<const ChunkId> ids, ClientId client) {
  free_bytes_ -= by_runs(
      ids, [&](ChunkId id) { return hold(id, client); },
      [&](std::size_t size, ChunkId lo, ChunkId hi) {
        for (ChunkId id = lo; id < hi; ++id) mark_held(id, client);
        free_.erase_range(size, lo, hi);
      });
  if (others_hear(client))
    for (ChunkId id : ids) notify_changed(id, client);
}

void ChunkPool::give_back_all(std::span<const ChunkId> ids) {
  if (ids.empty()) return;
  const ClientId by = chunks_[ids.front()].holder;
  free_bytes_ += by_runs(
      ids,
      [&](ChunkId id) {
        assert(chunks_[id].holder == by);
        return unhold(id);
      },
      [&](std::size_t size, ChunkId lo, ChunkId hi) {
        for (ChunkId id = lo; id < hi; ++id) {
          assert(chunks_[id].holder == by);
          mark_unheld(id);
        }
        free_.insert_range(size, lo, hi);
      });
  if (others_hear(by))
    for (ChunkId id : ids) notify_changed(id, by);
}

void ChunkPool::mark_reserve(ChunkId id) {
  PhysicalChunk& c = chunks_[id];
  if (c.reserve) return;
  c.reserve = true;
  reserve_bytes_ += c.size;
  gauge(stats_.reserve_bytes, static_cast<std::int64_t>(c.size));
}

void ChunkPool::clear_reserve(ChunkId id) {
  PhysicalChunk& c = chunks_[id];
  if (!c.reserve) return;
  c.reserve = false;
  reserve_bytes_ -= c.size;
  gauge(stats_.reserve_bytes, -static_cast<std::int64_t>(c.size));
}

std::string ChunkPool::check_invariants() const {
  std::ostringstream err;
  std::size_t reserved = 0, free_bytes = 0, reserve = 0, free_count = 0;
  for (ChunkId id = 0; id < chunks_.size(); ++id) {
    const PhysicalChunk& c = chunks_[id];
    if (!c.in_use) continue;
    reserved += c.size;
    if (c.reserve) reserve += c.size;
    const bool listed = free_.count({c.size, id}) != 0;
    if (listed != (c.holder == kNoClient)) err << "chunk " << id << " free set is off; ";
    if (c.holder == kNoClient) {
      free_bytes += c.size;
      ++free_count;
    } else if (c.holder >= clients_.size() || clients_[c.holder] == nullptr) {
      err << "chunk " << id << " held by an unknown client; ";
    }
    if (c.reserve && c.holder != kNoClient) err << "reserve chunk " << id << " is held; ";
  }
  if (reserved != reserved_bytes_) err << "reserved bytes disagree; ";
  if (free_bytes != free_bytes_) err << "free chunk bytes disagree; ";
  if (reserve != reserve_bytes_) err << "reserve bytes disagree; ";
  if (free_count != free_.size()) err << "free set holds stale entries; ";
  return err.str();
}

}  // namespace memlake::lake
