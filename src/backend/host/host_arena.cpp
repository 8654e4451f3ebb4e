// The HostBackend's shared chunk file (see host_arena.hpp): best-fit over
// freed ranges, merged with their neighbours, else the end of the file.
#include "backend/host/host_arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <new>

#include "backend/backend_detail.hpp"

namespace memlake {

using detail::fail;

namespace {
// The file grows in steps of this much (its size costs nothing: only pages
// written hold memory), so that growth is rare.
constexpr std::size_t kGrowthStep = std::size_t{1} << 30;
}  // namespace

HostArena::~HostArena() {
  if (fd_ >= 0) ::close(fd_);
}

bool HostArena::grow_to(std::size_t end) {
  if (end <= file_size_) return true;
  const std::size_t size = (end + kGrowthStep - 1) / kGrowthStep * kGrowthStep;
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return false;
  file_size_ = size;
  return true;
}

Status HostArena::allocate(std::size_t size, std::size_t* offset) {
  if (fd_ < 0) {
    const int fd = ::memfd_create("memlake-chunks", MFD_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      const Status s = err == EMFILE || err == ENFILE ? Status::out_of_descriptors
                       : err == ENOMEM                ? Status::out_of_memory
                                                      : Status::error;
      return fail(s, "memfd_create of the chunk file failed: %s", std::strerror(err));
    }
    fd_ = fd;
  }
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit != free_by_size_.end()) {
    const auto [free_size, free_offset] = *fit;
    free_by_size_.erase(fit);
    free_by_offset_.erase(free_offset);
    if (free_size > size) add_free(free_offset + size, free_size - size);
    *offset = free_offset;
    allocated_ += size;
    return Status::ok;
  }
  if (!grow_to(end_ + size)) {
    const int err = errno;
    return fail(
        err == ENOSPC || err == EFBIG || err == ENOMEM ? Status::out_of_memory : Status::error,
        "growing the chunk file to %zu bytes failed: %s", end_ + size, std::strerror(err));
  }
  *offset = end_;
  end_ += size;
  allocated_ += size;
  return Status::ok;
}

void HostArena::free(std::size_t offset, std::size_t size) {
  allocated_ -= size;
  // Punching keeps the file's size; the pages' memory goes back at once.
  while (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                     static_cast<off_t>(size)) != 0 &&
         errno == EINTR) {
  }
  add_free(offset, size);
}

// Merges [offset, offset+size) with free neighbours; a range that reaches
// the end moves the end back instead. When the free list cannot grow the
// range's offsets are not reused (its memory is already back).
void HostArena::add_free(std::size_t offset, std::size_t size) {
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && offset + size == next->first) {
    size += next->second;
    free_by_size_.erase({next->second, next->first});
    next = free_by_offset_.erase(next);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_by_size_.erase({prev->second, prev->first});
      free_by_offset_.erase(prev);
    }
  }
  if (offset + size == end_) {
    end_ = offset;
    return;
  }
  try {
    free_by_offset_.emplace(offset, size);
    try {
      free_by_size_.emplace(size, offset);
    } catch (const std::bad_alloc&) {
      free_by_offset_.erase(offset);
    }
  } catch (const std::bad_alloc&) {
  }
}

}  // namespace memlake
