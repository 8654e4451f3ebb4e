// LimitingBackend: byte accounting per chunk handle (see limiting_backend.hpp).
#include "backend/adaptors/limiting_backend.hpp"

#include <new>

#include "backend/backend_detail.hpp"

namespace memlake {

LimitingBackend::LimitingBackend(std::unique_ptr<Backend> upstream, std::size_t limit)
    : BackendAdaptor(std::move(upstream), "limiting"), limit_(limit) {}

std::size_t LimitingBackend::physical_bytes() const {
  std::lock_guard lock(mutex_);
  return used_;
}

Status LimitingBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  if (chunk == nullptr) return BackendAdaptor::create_chunk(size, chunk);  // upstream reports it
  {
    // Claim the bytes before creating, so concurrent creations cannot
    // overshoot the limit together.
    std::lock_guard lock(mutex_);
    if (size > limit_ || used_ > limit_ - size) {
      return detail::fail(Status::out_of_memory,
                          "%s: create_chunk(size=%zu): out of memory: %zu of %zu bytes in use",
                          name(), size, used_, limit_);
    }
    used_ += size;
  }
  ChunkHandle handle = 0;
  const Status s = BackendAdaptor::create_chunk(size, &handle);
  std::lock_guard lock(mutex_);
  if (s != Status::ok) {
    used_ -= size;
    return s;
  }
  try {
    sizes_.emplace(handle, size);
  } catch (const std::bad_alloc&) {
    // Untracked, the chunk's bytes could never be given back: undo it.
    used_ -= size;
    BackendAdaptor::release_chunk(handle);
    return detail::fail(Status::out_of_host_memory,
                        "%s: create_chunk(size=%zu): out of host memory for the adaptor's table",
                        name(), size);
  }
  *chunk = handle;
  return s;
}

Status LimitingBackend::release_chunk(ChunkHandle chunk) {
  const Status s = BackendAdaptor::release_chunk(chunk);
  if (s == Status::ok) {
    std::lock_guard lock(mutex_);
    auto it = sizes_.find(chunk);
    if (it != sizes_.end()) {
      used_ -= it->second;
      sizes_.erase(it);
    }
  }
  return s;
}

}  // namespace memlake
