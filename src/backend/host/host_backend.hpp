// HostBackend: the Backend contract on the CPU, with real memory. A chunk is
// a memfd file (committed lazily by the kernel), a reserved range is an
// inaccessible anonymous mapping, map() places a chunk's file over part of a
// reserved range (MAP_FIXED|MAP_SHARED, so two mappings of one chunk show the
// same bytes), set_access() makes mapped bytes readable and writable, and
// unmap() turns the range back into an inaccessible reservation. Streams are
// HostStream queues, each served by its own thread.
//
// Every handle, range and mapping is tracked in tables under one mutex, so a
// wrong argument yields Status::invalid_argument and a message, never a
// crash. With simulate_latency, each call busy-waits for the median H200
// cost measured in traces/vmm_costs.txt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/backend.hpp"

namespace memlake {

class HostStream;

struct HostBackendOptions {
  int device = 0;
  std::size_t granularity = std::size_t{2} << 20;
  std::size_t capacity = std::size_t{80} << 30;
  bool simulate_latency = false;
};

class HostBackend final : public Backend {
 public:
  // Throws backend_error when granularity is not a multiple of the page size.
  explicit HostBackend(HostBackendOptions options = {});
  ~HostBackend() override;  // drains and joins every stream, frees all memory
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  const char* name() const override { return "host"; }
  int device() const override { return options_.device; }
  std::size_t granularity() const override { return options_.granularity; }
  std::size_t capacity() const override { return options_.capacity; }
  // Bytes of chunks created and not yet released (a released chunk that is
  // still mapped no longer counts, as its handle is gone).
  std::size_t physical_bytes() const override;

  Status reserve(std::size_t size, DevicePtr* va) override;
  Status unreserve(DevicePtr va, std::size_t size) override;
  Status create_chunk(std::size_t size, ChunkHandle* chunk) override;
  Status release_chunk(ChunkHandle chunk) override;
  Status map(DevicePtr va, std::size_t size, ChunkHandle chunk) override;
  Status unmap(DevicePtr va, std::size_t size) override;
  Status set_access(DevicePtr va, std::size_t size) override;
  Status export_chunk(ChunkHandle chunk, int* fd) override;
  Status import_chunk(int fd, std::size_t size, ChunkHandle* chunk) override;

  Status stream_create(StreamHandle* stream) override;
  Status stream_destroy(StreamHandle stream) override;
  Status event_create(EventHandle* event) override;
  Status event_destroy(EventHandle event) override;
  Status event_record(EventHandle event, StreamHandle stream) override;
  Status event_query(EventHandle event) override;
  Status stream_wait_event(StreamHandle stream, EventHandle event) override;
  Status launch_host_func(StreamHandle stream, HostFn fn, void* user) override;
  Status stream_synchronize(StreamHandle stream) override;
  Status stream_is_capturing(StreamHandle stream, bool* capturing) override;

  std::string last_error() const override;

  // --- inspection, for tests ----------------------------------------------
  std::size_t live_chunks() const;      // created, not released
  std::size_t reserved_ranges() const;  // reserved, not unreserved
  std::size_t mapped_ranges() const;    // chunk mappings in place
  // True when [va, va+size) is entirely mapped and set_access() covered it.
  bool is_accessible(DevicePtr va, std::size_t size) const;
  // How many times `chunk` is mapped right now (0 for unknown handles).
  std::size_t chunk_mappings(ChunkHandle chunk) const;

 private:
  struct Chunk {
    int fd;
    std::size_t size;
    std::size_t mappings;
  };
  struct Mapping {
    std::size_t size;
    ChunkHandle chunk;
    bool accessible;
  };
  struct Event;

  using MappingMap = std::map<DevicePtr, Mapping>;

  // Reservation holding [va, va+size) whole, or end().
  std::map<DevicePtr, std::size_t>::const_iterator find_reservation(DevicePtr va,
                                                                    std::size_t size) const;
  // Counts the mappings that tile [va, va+size) exactly; 0 if they do not.
  std::size_t tiling_mappings(DevicePtr va, std::size_t size) const;
  // With stream_mutex_ held; creates the default stream on first use.
  std::shared_ptr<HostStream> find_stream(StreamHandle stream, const char* call);
  void simulate(VmmOp op, std::size_t chunks = 1) const;

  const HostBackendOptions options_;

  mutable std::mutex vm_mutex_;  // guards the three tables below
  std::unordered_map<ChunkHandle, Chunk> chunks_;
  std::map<DevicePtr, std::size_t> reservations_;  // start -> size
  MappingMap mappings_;                            // start -> mapping
  ChunkHandle next_chunk_ = 1;
  std::size_t physical_bytes_ = 0;

  mutable std::mutex stream_mutex_;  // guards streams_ and events_
  std::unordered_map<StreamHandle, std::shared_ptr<HostStream>> streams_;
  std::unordered_map<EventHandle, std::unique_ptr<Event>> events_;
};

static_assert(IsBackend<HostBackend>);

}  // namespace memlake
