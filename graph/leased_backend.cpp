// A graph pool's view of the backend (see leased_backend.hpp).
#include "graph/leased_backend.hpp"

#include <algorithm>
#include <iterator>
#include <vector>

#include "backend/backend_detail.hpp"

namespace memlake::graph {

BackendLimits LeasedBackend::limits() const {
  BackendLimits l = upstream_.limits();
  l.mappings = BackendLimits::kUnbounded;
  return l;
}

ChunkHandle LeasedBackend::actual(ChunkHandle chunk) const {
  auto it = actual_.find(chunk);
  return it == actual_.end() ? 0 : it->second;
}

Status LeasedBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  if (chunk == nullptr)
    return detail::fail(Status::invalid_argument, "graph pool: create_chunk: null output pointer");
  ChunkHandle leased = 0;
  actual_.reserve(actual_.size() + 1);  // nothing to undo once the chunk is leased
  const Status s = share_.lease(pool_, size, &leased);
  if (s != Status::ok) return s;
  *chunk = next_handle_++;
  actual_.emplace(*chunk, leased);
  return Status::ok;
}

Status LeasedBackend::release_chunk(ChunkHandle chunk) {
  auto it = actual_.find(chunk);
  if (it == actual_.end() || !share_.unlease(pool_, it->second))
    return detail::fail(Status::invalid_argument,
                        "graph pool: release_chunk(%#llx): not a chunk this pool leased",
                        static_cast<unsigned long long>(chunk));
  actual_.erase(it);
  kept_.erase(chunk);
  return Status::ok;
}

Status LeasedBackend::import_chunk(int, std::size_t, ChunkHandle*) {
  return detail::fail(Status::invalid_argument,
                      "graph pool: import_chunk: graph pools map only chunks of their group");
}

Status LeasedBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  const ChunkHandle a = actual(chunk);
  if (a == 0)
    return detail::fail(Status::invalid_argument,
                        "graph pool: map(%#llx): not a chunk this pool leased",
                        static_cast<unsigned long long>(chunk));
  const Status s = upstream_.map(va, size, a);
  if (s == Status::ok) mappings_[va] = Mapping{chunk, size};
  return s;
}

Status LeasedBackend::unmap(DevicePtr va, std::size_t size) {
  if (!releasing_) ++early_unmaps_;
  const Status s = upstream_.unmap(va, size);
  if (s == Status::ok) mappings_.erase(mappings_.lower_bound(va), mappings_.lower_bound(va + size));
  return s;
}

// --- keeping chunks ---------------------------------------------------------------

std::vector<std::pair<ChunkHandle, std::size_t>> LeasedBackend::shared_chunks_under(
    DevicePtr ptr, std::size_t size) const {
  std::vector<std::pair<ChunkHandle, std::size_t>> shared;
  auto it = mappings_.upper_bound(ptr);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < ptr + size; ++it) {
    const Mapping& m = it->second;
    if (it->first + m.size <= ptr || kept_.count(m.chunk)) continue;
    if (std::none_of(shared.begin(), shared.end(), [&](auto& c) { return c.first == m.chunk; }))
      shared.emplace_back(m.chunk, m.size);
  }
  return shared;
}

Status LeasedBackend::remap(ChunkHandle chunk, ChunkHandle from, ChunkHandle with) {
  std::vector<std::pair<DevicePtr, std::size_t>> at;
  for (const auto& [va, m] : mappings_)
    if (m.chunk == chunk) at.emplace_back(va, m.size);
  // How far one address got: 0 nothing done, 1 unmapped, 2 mapped, 3 accessible.
  auto move = [&](DevicePtr va, std::size_t size, ChunkHandle to, int* stage) {
    Status s = upstream_.unmap(va, size);
    if (s != Status::ok) return s;
    *stage = 1;
    if ((s = upstream_.map(va, size, to)) != Status::ok) return s;
    *stage = 2;
    if ((s = upstream_.set_access(va, size)) != Status::ok) return s;
    *stage = 3;
    return s;
  };
  for (std::size_t i = 0; i < at.size(); ++i) {
    int stage = 0;
    const Status s = move(at[i].first, at[i].second, with, &stage);
    if (s == Status::ok) continue;
    const std::string why = upstream_.last_error();
    // Back to `from` wherever the move got: nothing of the pool stays unmapped.
    for (std::size_t j = 0; j <= i; ++j) {
      const auto [va, size] = at[j];
      const int got = j < i ? 3 : stage;
      if (got >= 2) upstream_.unmap(va, size);
      if (got >= 1 && upstream_.map(va, size, from) == Status::ok) upstream_.set_access(va, size);
    }
    return detail::fail(s, "graph pool: giving a kept block a chunk of its own: %s", why.c_str());
  }
  return Status::ok;
}

Status LeasedBackend::keep(DevicePtr ptr, std::size_t size, std::size_t* kept) {
  for (const auto& [chunk, chunk_size] : shared_chunks_under(ptr, size)) {
    const ChunkHandle from = actual(chunk);
    ChunkHandle with = 0;
    kept_.reserve(kept_.size() + 1);
    Status s = share_.lease_kept(pool_, chunk_size, &with);
    if (s != Status::ok) return s;
    if ((s = remap(chunk, from, with)) != Status::ok) {
      share_.unlease(pool_, with);
      return s;
    }
    share_.unlease(pool_, from);
    actual_[chunk] = with;
    kept_.insert(chunk);
    ++*kept;
  }
  return Status::ok;
}

}  // namespace memlake::graph
