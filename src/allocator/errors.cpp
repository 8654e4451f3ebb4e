// What the allocator tells a caller that misused it or that it could not
// serve, and the debug build's invariant check after every call.
#include <cstdio>
#include <cstdlib>

#include "allocator/allocator_impl.hpp"

namespace memlake {

namespace {
std::string gib(std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", bytes,
                static_cast<double>(bytes) / (1 << 30));
  return buf;
}
}  // namespace

void AllocatorImpl::misuse(const std::string& message, bool counts) const {
  if (counts) ++stats_.misuse_errors.current;
  if (config_.on_misuse == MisuseAction::abort) {
    std::fprintf(stderr, "memlake: fatal misuse: %s\n", message.c_str());
    std::abort();
  }
  throw memlake::misuse("memlake: " + message);
}

void AllocatorImpl::unknown_stream(const char* what, Stream stream, const void* ptr) const {
  char buf[160];
  if (ptr != nullptr)
    std::snprintf(buf, sizeof buf, "unknown stream %p given to %s %p", stream, what, ptr);
  else
    std::snprintf(buf, sizeof buf, "unknown stream %p: not a stream of this allocator's %s backend",
                  stream, counting_->upstream().name());
  misuse(buf);
}

// Why `ptr` is not a block the caller holds.
std::string AllocatorImpl::bad_pointer(DevicePtr ptr) const {
  return lake_.diagnose_bad_pointer(ptr);
}

void AllocatorImpl::out_of_memory(std::size_t bytes, Stream stream) {
  ++stats_.ooms.current;
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_oom(bytes, stream); });
  std::string msg = "memlake: out of memory on device " + std::to_string(backend_->device()) +
                    " (" + counting_->upstream().name() + "): requested " + gib(bytes);
  if (bytes > lake_.capacity()) msg += ", more than the whole capacity";
  msg += "; live " + gib(static_cast<std::size_t>(stats_.live_bytes.current)) + ", reserved " +
         gib(static_cast<std::size_t>(stats_.reserved_bytes.current)) + ", largest free block " +
         gib(lake_.largest_free_block()) + ", free in unused chunks " +
         gib(lake_.free_chunk_bytes()) + ", capacity " + gib(lake_.capacity());
  if (refusal_.any()) msg += "; the backend refused " + refusal_.text();
  throw memlake::out_of_memory(msg, bytes);
}

void AllocatorImpl::check_debug() const {
  // Called with the lock held.
  const std::string err = lake_.check_invariants();
  if (!err.empty()) {
    std::fprintf(stderr, "memlake: invariant broken: %s\n", err.c_str());
    std::abort();
  }
}

}  // namespace memlake
