// LimitingBackend: caps the physical bytes created through it, so that a
// HostBackend (or a large GPU) behaves like a small device. capacity()
// reports the limit; create_chunk fails with out_of_memory beyond it without
// reaching the upstream backend.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend/adaptors/backend_adaptor.hpp"

namespace memlake {

class LimitingBackend final : public BackendAdaptor {
 public:
  LimitingBackend(std::unique_ptr<Backend> upstream, std::size_t limit);

  std::size_t capacity() const override { return limit_; }
  // Bytes of chunks created through this adaptor and not yet released.
  std::size_t physical_bytes() const override;

  Status create_chunk(std::size_t size, ChunkHandle* chunk) override;
  Status release_chunk(ChunkHandle chunk) override;

 private:
  const std::size_t limit_;
  mutable std::mutex mutex_;
  std::size_t used_ = 0;  // includes creations in flight
  std::unordered_map<ChunkHandle, std::size_t> sizes_;
};

static_assert(IsBackend<LimitingBackend>);

}  // namespace memlake
