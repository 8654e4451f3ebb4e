// Observers listen to allocator events (profiling/, tools/). They never change
// what the allocator does. With no observer installed, the hot path pays one
// predictable branch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memlake {

enum class AllocPath : int { stream_cache, exact, split, stitch, fresh, reclaim };
inline constexpr int kAllocPathCount = 6;
const char* alloc_path_name(AllocPath p);

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_alloc(void* /*ptr*/, std::size_t /*bytes*/, void* /*stream*/, AllocPath) {}
  virtual void on_free(void* /*ptr*/, std::size_t /*bytes*/, void* /*stream*/) {}
  // A virtual range was mapped (a new pBlock, or a stitched sBlock).
  virtual void on_map(std::uintptr_t /*va*/, std::size_t /*bytes*/, bool /*stitched*/) {}
  virtual void on_unmap(std::uintptr_t /*va*/, std::size_t /*bytes*/) {}
  virtual void on_oom(std::size_t /*bytes*/, void* /*stream*/) {}
};

}  // namespace memlake
