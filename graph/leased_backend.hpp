// LeasedBackend: the backend a graph pool's placement sees. Chunks are
// leased from the pool's ChunkShare instead of created, and given back to it
// instead of released; everything else goes to the allocator's backend.
//
// It also keeps the pool's promise that its ranges stay mapped: it reports
// no bound on mappings, so the pool's segment table never evicts to make
// room, and it counts every unmap made before the pool is released, which
// the invariant check reports (there must be none).
//
// The lake names chunks by handles of this backend's own, which it
// translates to the share's: so a chunk under a block that outlives its
// capture can be given to the pool alone (keep), a kept chunk of the share
// replacing it at every address the pool maps it while the lake's handle
// stays. The addresses do not change, so neither does anything a captured
// graph holds.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "graph/chunk_share.hpp"

namespace memlake::graph {

class LeasedBackend final : public Backend {
 public:
  LeasedBackend(Backend& upstream, ChunkShare& share, const void* pool)
      : upstream_(upstream), share_(share), pool_(pool) {}

  // From now on unmaps are the pool's release, not a broken promise.
  void releasing() { releasing_ = true; }
  std::size_t early_unmaps() const { return early_unmaps_; }

  // Whether a chunk under [ptr, ptr + size) is still shared with the group.
  bool shares_chunks_under(DevicePtr ptr, std::size_t size) const {
    return !shared_chunks_under(ptr, size).empty();
  }
  // Replaces every shared chunk under [ptr, ptr + size) by a kept one, at
  // every address this pool maps it; adds the chunks replaced to `*kept`.
  // Nothing may run on those addresses meanwhile (the caller sees to it).
  // A failure leaves the chunk it was replacing as it was.
  Status keep(DevicePtr ptr, std::size_t size, std::size_t* kept);

  const char* name() const override { return "graph_pool"; }
  int device() const override { return upstream_.device(); }
  std::size_t granularity() const override { return upstream_.granularity(); }
  std::size_t capacity() const override { return upstream_.capacity(); }
  std::size_t physical_bytes() const override { return share_.bytes_of(pool_); }
  BackendLimits limits() const override;
  BackendUsage usage() const override { return upstream_.usage(); }

  Status reserve(std::size_t size, DevicePtr* va) override { return upstream_.reserve(size, va); }
  Status unreserve(DevicePtr va, std::size_t size) override {
    return upstream_.unreserve(va, size);
  }
  Status create_chunk(std::size_t size, ChunkHandle* chunk) override;
  Status release_chunk(ChunkHandle chunk) override;
  Status map(DevicePtr va, std::size_t size, ChunkHandle chunk) override;
  Status unmap(DevicePtr va, std::size_t size) override;
  Status set_access(DevicePtr va, std::size_t size) override {
    return upstream_.set_access(va, size);
  }
  Status export_chunk(ChunkHandle chunk, int* fd) override {
    return upstream_.export_chunk(actual(chunk), fd);
  }
  Status import_chunk(int fd, std::size_t size, ChunkHandle* chunk) override;

  Status stream_create(StreamHandle* stream) override { return upstream_.stream_create(stream); }
  Status stream_destroy(StreamHandle stream) override { return upstream_.stream_destroy(stream); }
  Status event_create(EventHandle* event) override { return upstream_.event_create(event); }
  Status event_destroy(EventHandle event) override { return upstream_.event_destroy(event); }
  Status event_record(EventHandle event, StreamHandle stream) override {
    return upstream_.event_record(event, stream);
  }
  Status event_query(EventHandle event) override { return upstream_.event_query(event); }
  Status stream_wait_event(StreamHandle stream, EventHandle event) override {
    return upstream_.stream_wait_event(stream, event);
  }
  Status launch_host_func(StreamHandle stream, HostFn fn, void* user) override {
    return upstream_.launch_host_func(stream, fn, user);
  }
  Status stream_synchronize(StreamHandle stream) override {
    return upstream_.stream_synchronize(stream);
  }
  Status stream_is_capturing(StreamHandle stream, bool* capturing) override {
    return upstream_.stream_is_capturing(stream, capturing);
  }

  std::string last_error() const override { return upstream_.last_error(); }

 private:
  // A mapping the lake made: `chunk` is the handle the lake knows.
  struct Mapping {
    ChunkHandle chunk;
    std::size_t size;
  };

  // The chunks under [ptr, ptr + size) still shared with the group: the
  // lake's handle and the chunk's size, each once.
  std::vector<std::pair<ChunkHandle, std::size_t>> shared_chunks_under(DevicePtr ptr,
                                                                       std::size_t size) const;
  // The share's chunk behind the lake's handle (0 for an unknown handle).
  ChunkHandle actual(ChunkHandle chunk) const;
  // Maps `with` wherever the pool maps the lake's `chunk` (`from` until now).
  Status remap(ChunkHandle chunk, ChunkHandle from, ChunkHandle with);

  Backend& upstream_;
  ChunkShare& share_;
  const void* pool_;
  bool releasing_ = false;
  std::size_t early_unmaps_ = 0;
  std::map<DevicePtr, Mapping> mappings_;                // by address
  std::unordered_map<ChunkHandle, ChunkHandle> actual_;  // the lake's handle -> the share's
  std::unordered_set<ChunkHandle> kept_;                 // the lake's handles of kept chunks
  ChunkHandle next_handle_ = 1;
};

}  // namespace memlake::graph
