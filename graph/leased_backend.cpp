// A graph pool's view of the backend (see leased_backend.hpp).
#include "graph/leased_backend.hpp"

#include "backend/backend_detail.hpp"

namespace memlake::graph {

BackendLimits LeasedBackend::limits() const {
  BackendLimits l = upstream_.limits();
  l.mappings = BackendLimits::kUnbounded;
  return l;
}

Status LeasedBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  if (chunk == nullptr)
    return detail::fail(Status::invalid_argument, "graph pool: create_chunk: null output pointer");
  return share_.lease(pool_, size, chunk);
}

Status LeasedBackend::release_chunk(ChunkHandle chunk) {
  if (share_.unlease(pool_, chunk)) return Status::ok;
  return detail::fail(Status::invalid_argument,
                      "graph pool: release_chunk(%#llx): not a chunk this pool leased",
                      static_cast<unsigned long long>(chunk));
}

Status LeasedBackend::unmap(DevicePtr va, std::size_t size) {
  if (!releasing_) ++early_unmaps_;
  return upstream_.unmap(va, size);
}

}  // namespace memlake::graph
