// Process sharing: Allocator::share() exports a live block's chunks as file
// descriptors; ImportedBlock maps them into a range of this process.
#include "memlake/sharing.hpp"

#include <unistd.h>

#include <string>

#include "allocator/allocator_impl.hpp"
#include "backend/make_backend.hpp"
#include "memlake/errors.hpp"

namespace memlake {

void SharedBlock::close_descriptors() {
  for (Chunk& c : chunks) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
  }
}

SharedBlock AllocatorImpl::share(const void* ptr) {
  std::lock_guard lock(mutex_);
  const auto key = reinterpret_cast<DevicePtr>(ptr);
  const lake::Allocation* block = lake_.find(key);
  if (block == nullptr) misuse("share: " + bad_pointer(key));
  if (!config_.shareable) {
    misuse("share: the allocator's chunks are not exportable; create it with shareable:true");
  }
  SharedBlock out;
  out.size = block->caller.requested;
  std::vector<std::pair<ChunkHandle, std::size_t>> chunks;
  lake_.chunks_of(key, &chunks, &out.offset);
  for (auto [handle, size] : chunks) {
    int fd = -1;
    const Status s = backend_->export_chunk(handle, &fd);
    if (s != Status::ok) {
      const std::string cause = backend_->last_error();
      out.close_descriptors();
      throw backend_error("memlake: share: exporting a chunk failed (" +
                          std::string(status_name(s)) + "): " + cause);
    }
    out.chunks.push_back({fd, size});
  }
  return out;
}

SharedBlock Allocator::share(const void* ptr) {
  return impl_->share(ptr);
}

ImportedBlock::ImportedBlock(const SharedBlock& block, const Config& config)
    : backend_(make_backend(config)) {
  std::size_t total = 0;
  for (const SharedBlock::Chunk& c : block.chunks) total += c.size;
  if (block.chunks.empty() || block.offset + block.size > total) {
    throw misuse("memlake: ImportedBlock: the block's " + std::to_string(block.size) +
                 " bytes at offset " + std::to_string(block.offset) + " do not fit in its " +
                 std::to_string(block.chunks.size()) + " chunk(s) of " + std::to_string(total) +
                 " bytes");
  }
  auto fail = [&](const char* what, Status s) {
    const std::string cause = backend_->last_error();
    unmap_all();
    throw backend_error(std::string("memlake: ImportedBlock: ") + what + " failed (" +
                        status_name(s) + "): " + cause);
  };
  DevicePtr va = 0;
  if (Status s = backend_->reserve(total, &va); s != Status::ok) fail("reserve", s);
  va_ = va;
  va_size_ = total;
  std::size_t offset = 0;
  for (const SharedBlock::Chunk& c : block.chunks) {
    ChunkHandle h = 0;
    if (Status s = backend_->import_chunk(c.fd, c.size, &h); s != Status::ok) fail("import", s);
    handles_.push_back(h);
    if (Status s = backend_->map(va + offset, c.size, h); s != Status::ok) fail("map", s);
    mapped_.emplace_back(va + offset, c.size);
    offset += c.size;
  }
  if (Status s = backend_->set_access(va, total); s != Status::ok) fail("set_access", s);
  data_ = reinterpret_cast<void*>(va + block.offset);
  size_ = block.size;
}

ImportedBlock::~ImportedBlock() {
  unmap_all();
}

// Mappings first, then handles (the memory goes with the last reference),
// then the range.
void ImportedBlock::unmap_all() {
  for (auto [at, len] : mapped_) backend_->unmap(at, len);
  mapped_.clear();
  for (ChunkHandle h : handles_) backend_->release_chunk(h);
  handles_.clear();
  if (va_size_ != 0) backend_->unreserve(va_, va_size_);
  va_size_ = 0;
  data_ = nullptr;
}

}  // namespace memlake
