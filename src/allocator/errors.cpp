// What the allocator tells a caller that misused it or that it could not
// serve, and the debug build's invariant check after every call.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "allocator/allocator_impl.hpp"
#include "profiling/profiling.hpp"

namespace memlake {

namespace {
std::string gib(std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", bytes,
                static_cast<double>(bytes) / (1 << 30));
  return buf;
}

std::string short_size(std::size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

// "; the 5 largest of 1234 live blocks: 1.50 GiB at 0x7f00 (stream 0x0), ..."
std::string largest_live_blocks(const lake::Lake& lake, std::size_t count) {
  std::vector<std::pair<std::size_t, DevicePtr>> sizes;
  sizes.reserve(lake.allocation_count());
  lake.each_allocation(
      [&](DevicePtr ptr, const lake::Allocation& a) { sizes.emplace_back(a.size, ptr); });
  count = std::min(count, sizes.size());
  std::partial_sort(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(count), sizes.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out = "; the " + std::to_string(count) + " largest of " +
                    std::to_string(sizes.size()) + " live blocks:";
  for (std::size_t i = 0; i < count; ++i) {
    const lake::Allocation& b = *lake.find(sizes[i].second);
    char buf[96];
    if (b.caller.stream == nullptr)
      std::snprintf(buf, sizeof buf, "%s %s at %p (default stream)", i ? "," : "",
                    short_size(b.size).c_str(), reinterpret_cast<void*>(sizes[i].second));
    else
      std::snprintf(buf, sizeof buf, "%s %s at %p (stream %p)", i ? "," : "",
                    short_size(b.size).c_str(), reinterpret_cast<void*>(sizes[i].second),
                    b.caller.stream);
    out += buf;
  }
  return out;
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
  // With profiling on, what holds the memory: the largest live blocks, and
  // where the timeline goes.
  if (!config_.record.empty() || !config_.timeline.empty()) {
    msg += largest_live_blocks(lake_, 5);
    if (!config_.timeline.empty())
      msg += "; the timeline is written to " + profilers_->timeline()->path() +
             " at exit (Allocator::dump_timeline, memlake_timeline_dump: now)";
    std::fprintf(stderr, "%s\n", msg.c_str());
  }
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
