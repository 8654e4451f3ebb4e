// HostArena: one shared memory file (memfd) that holds the HostBackend's
// chunks that are never exported, each at an offset of its own. The backend
// then holds one descriptor for all of them, where a file per chunk would
// run out of descriptors at RLIMIT_NOFILE (1,024 on most machines: 2 GiB of
// 2 MiB chunks). The file is sparse: only the pages written hold memory,
// and a freed range is punched out of it (its memory goes back to the
// system and reads as zeros when its offsets are used again).
//
// Not thread-safe: the HostBackend calls it under its table lock. Nothing
// here throws.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <utility>

#include "backend/backend.hpp"

namespace memlake {

class HostArena {
 public:
  HostArena() = default;
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // Finds `size` bytes (a multiple of the page size) of the file, creating
  // or growing it as needed. ok; out_of_descriptors when the file cannot be
  // created for want of descriptors; out_of_memory when it cannot grow;
  // out_of_host_memory when the free list cannot; error otherwise (the
  // message is in the error slot).
  Status allocate(std::size_t size, std::size_t* offset);
  // Gives the memory of [offset, offset+size) back to the system and its
  // offsets back for reuse. The range must be mapped nowhere.
  void free(std::size_t offset, std::size_t size);

  // The file's descriptor; -1 until the first allocate().
  int fd() const { return fd_; }
  // Bytes handed out and not freed.
  std::size_t allocated_bytes() const { return allocated_; }

 private:
  bool grow_to(std::size_t end);
  void add_free(std::size_t offset, std::size_t size);

  int fd_ = -1;
  std::size_t file_size_ = 0;
  std::size_t end_ = 0;  // offsets past end_ were never handed out
  std::size_t allocated_ = 0;
  std::map<std::size_t, std::size_t> free_by_offset_;           // offset -> size
  std::set<std::pair<std::size_t, std::size_t>> free_by_size_;  // (size, offset)
};

}  // namespace memlake
