// Process sharing: a block's physical chunks handed to another process as
// POSIX file descriptors and mapped there (the allocator must be built with
// shareable:true; on CUDA the chunks are then created with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR).
//
//   exporter:  memlake::SharedBlock s = alloc.share(p);   // send s.chunks' fds
//   importer:  memlake::ImportedBlock b(s);               // b.data(): the bytes
//
// Lifetime rules:
//  - The descriptors, and every import, keep the physical memory alive on
//    their own: it stays valid in the importer even after the exporter frees
//    the block or releases its chunks, and goes when the last of them goes.
//  - But once the exporter frees the block, memlake may hand the same
//    chunks to another allocation, whose bytes the importer then sees. Keep
//    the block allocated while any importer uses it (the rule of CUDA IPC).
//  - The descriptors belong to the SharedBlock's owner: close them
//    (close_descriptors()) once they are sent or inherited. ImportedBlock
//    does not take them over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "memlake/config.hpp"

namespace memlake {

class Backend;

struct SharedBlock {
  struct Chunk {
    int fd = -1;
    std::size_t size = 0;  // the chunk's bytes: it is mapped whole
  };
  std::size_t size = 0;       // the block's bytes
  std::size_t offset = 0;     // where the block starts in its first chunk
  std::vector<Chunk> chunks;  // in address order
  void close_descriptors();
};

// The block of a SharedBlock, mapped into this process with a backend of
// `config`'s kind (the exporter's: host or cuda) for as long as it lives.
class ImportedBlock {
 public:
  explicit ImportedBlock(const SharedBlock& block, const Config& config = Config::from_env());
  ~ImportedBlock();
  ImportedBlock(const ImportedBlock&) = delete;
  ImportedBlock& operator=(const ImportedBlock&) = delete;

  void* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void unmap_all();

  std::unique_ptr<Backend> backend_;
  std::uintptr_t va_ = 0;
  std::size_t va_size_ = 0;
  std::vector<std::pair<std::uintptr_t, std::size_t>> mapped_;
  std::vector<std::uint64_t> handles_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace memlake
