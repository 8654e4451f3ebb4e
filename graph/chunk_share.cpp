// A group's shared chunks (see chunk_share.hpp).
#include "graph/chunk_share.hpp"

#include <algorithm>
#include <sstream>

namespace memlake::graph {

ChunkShare::~ChunkShare() {
  for (const Held& h : chunks_) source_.give_back(h.id);
}

Status ChunkShare::lease(const void* pool, std::size_t size, ChunkHandle* handle) {
  for (Held& h : chunks_) {
    if (h.size != size || h.kept ||
        std::find(h.pools.begin(), h.pools.end(), pool) != h.pools.end())
      continue;
    h.pools.push_back(pool);
    *handle = h.handle;
    return Status::ok;
  }
  return take(pool, size, /*kept=*/false, handle);
}

Status ChunkShare::lease_kept(const void* pool, std::size_t size, ChunkHandle* handle) {
  return take(pool, size, /*kept=*/true, handle);
}

Status ChunkShare::take(const void* pool, std::size_t size, bool kept, ChunkHandle* handle) {
  Held h{lake::kNone, 0, size, {pool}, kept};
  chunks_.reserve(chunks_.size() + 1);  // nothing to undo once the chunk is taken
  const Status s = source_.take_new(size, &h.id, &h.handle);
  if (s != Status::ok) return s;
  chunks_.push_back(std::move(h));
  bytes_ += size;
  *handle = chunks_.back().handle;
  return Status::ok;
}

bool ChunkShare::unlease(const void* pool, ChunkHandle handle) {
  for (auto it = chunks_.begin(); it != chunks_.end(); ++it) {
    if (it->handle != handle) continue;
    if (std::erase(it->pools, pool) == 0) return false;
    if (it->pools.empty()) {
      source_.give_back(it->id);
      bytes_ -= it->size;
      chunks_.erase(it);
    }
    return true;
  }
  return false;
}

std::size_t ChunkShare::bytes_of(const void* pool) const {
  std::size_t n = 0;
  for (const Held& h : chunks_)
    if (std::find(h.pools.begin(), h.pools.end(), pool) != h.pools.end()) n += h.size;
  return n;
}

std::size_t ChunkShare::kept_bytes_of(const void* pool) const {
  std::size_t n = 0;
  for (const Held& h : chunks_)
    if (h.kept && h.pools.size() == 1 && h.pools[0] == pool) n += h.size;
  return n;
}

std::string ChunkShare::check_invariants() const {
  std::ostringstream err;
  std::size_t bytes = 0;
  for (const Held& h : chunks_) {
    bytes += h.size;
    if (h.pools.empty()) err << "shared chunk " << h.id << " is leased by no pool; ";
    if (h.kept && h.pools.size() > 1) err << "kept chunk " << h.id << " is leased by two pools; ";
    for (std::size_t i = 0; i < h.pools.size(); ++i)
      if (std::find(h.pools.begin() + i + 1, h.pools.end(), h.pools[i]) != h.pools.end())
        err << "shared chunk " << h.id << " is leased twice by one pool; ";
  }
  if (bytes != bytes_) err << "shared chunk bytes disagree; ";
  return err.str();
}

}  // namespace memlake::graph
