// memlake::Allocator: the C++ front end. One Allocator owns one device's lake
// (its chunks and mapped ranges), the stream order of its frees and its
// backend.
//
//   memlake::Allocator alloc(memlake::Config::from_env());
//   void* p = alloc.allocate(64 << 20, stream);
//   alloc.deallocate(p, 64 << 20, stream);
//
// Errors are exceptions: memlake::out_of_memory (with requested, live,
// reserved, largest free block and capacity in its message), memlake::misuse
// for bad pointers and sizes. All member functions are thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memlake/config.hpp"
#include "memlake/errors.hpp"
#include "memlake/observer.hpp"
#include "memlake/stats.hpp"

namespace memlake {

struct SharedBlock;

class Backend;
class AllocatorImpl;

using Stream = void*;  // cudaStream_t on CUDA, a host stream on the HostBackend; nullptr: default

// A live block as callers see it.
struct BlockInfo {
  void* ptr = nullptr;
  std::size_t size = 0;     // as requested
  Stream stream = nullptr;  // the stream it was allocated on
};

class Allocator {
 public:
  explicit Allocator(const Config& config = Config::from_env());
  // For tests and tools: run over a given backend (e.g. an adaptor stack).
  Allocator(const Config& config, std::unique_ptr<Backend> backend);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Never returns nullptr: size 0 yields a unique minimal block.
  void* allocate(std::size_t bytes, Stream stream = nullptr);
  // `bytes` must be the size given to allocate(), or 0 to skip the check.
  void deallocate(void* ptr, std::size_t bytes, Stream stream = nullptr);
  // Frees `ptr` on the stream it was allocated on, its size unchecked: for
  // callers that keep neither (PyTorch's deleter has the pointer alone).
  // False, with nothing changed and nothing reported, when `ptr` is no live
  // block of this allocator (a caller with several devices tries the next).
  bool deallocate_on_own_stream(void* ptr);
  // The block is also used on `stream`: its memory is reused elsewhere only
  // after the work queued on `stream` up to its free has completed.
  void record_stream(void* ptr, Stream stream);
  // Returns cached memory (unused chunks and idle mappings) to the backend.
  void empty_cache();
  // Records the fences of the frees so far (an event each on their streams),
  // so that memory they freed can be unmapped once that work is done;
  // allocations and empty_cache() do this by themselves. Never waits.
  void process_pending_frees();

  Stats stats() const;
  void reset_peak_stats();
  const Config& config() const;
  const char* backend_name() const;
  int device() const;
  std::size_t capacity() const;
  std::size_t granularity() const;
  // The largest block allocate() can hand out now without reclaiming cached
  // ranges: the largest free block, or the free chunks and the capacity not
  // yet reserved, which stitching joins, whichever is larger. What PyTorch's
  // cacheInfo answers, and cuDNN bounds its workspace by.
  std::size_t largest_available() const;
  // Requested size of a live allocation; throws misuse for unknown pointers.
  std::size_t allocation_size(const void* ptr) const;
  // The live block at `ptr`, graph pools' included; none for any other
  // pointer.
  std::optional<BlockInfo> block_info(const void* ptr) const;
  // Every live block, graph pools' included, in address order.
  std::vector<BlockInfo> live_blocks() const;
  // Whether `ptr` is the start of a block this allocator handed out and that
  // is not freed yet.
  bool owns(const void* ptr) const;
  // The live block at `ptr` as file descriptors another process can map
  // (ImportedBlock, include/memlake/sharing.hpp; lifetime rules there).
  // Needs shareable:true.
  SharedBlock share(const void* ptr);

  void add_observer(Observer* observer);
  void remove_observer(Observer* observer);

  // The timeline option's recording (docs/profiling.md); each throws
  // memlake::error when the option is off. dump_timeline writes it as Chrome
  // Trace Event JSON (Perfetto, chrome://tracing) to `path`; timeline_json()
  // is the same text. memory_snapshot_json() is the state (mapped ranges and
  // the blocks in them) and the recent events as PyTorch's memory snapshot
  // in JSON, which memlake.snapshot() pickles for pytorch.org/memory_viz.
  void dump_timeline(const std::string& path) const;
  std::string timeline_json() const;
  std::string memory_snapshot_json() const;

  // Streams of this allocator's backend (host streams on the HostBackend).
  Stream create_stream();
  void destroy_stream(Stream stream);
  // Checks every internal invariant; returns an empty string when all hold,
  // else a description of the first one broken. For tests and debug builds.
  std::string check_invariants() const;

  Backend& backend();
  AllocatorImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<AllocatorImpl> impl_;
};

}  // namespace memlake
