// HostBackend: the Backend contract on the CPU, with real memory. A chunk is
// shared memory (committed lazily by the kernel): a range of one memfd file
// for all chunks (HostArena), or a memfd file of its own when chunks are
// shareable (export_chunk hands out its descriptor). A reserved range is an
// inaccessible anonymous mapping, map() places a chunk over part of a
// reserved range (MAP_FIXED|MAP_SHARED, so two mappings of one chunk show the
// same bytes), set_access() makes mapped bytes readable and writable, and
// unmap() turns the range back into an inaccessible reservation. Streams are
// HostStream queues, each served by its own thread. A capturing stream
// records its work into a host graph (host_capture.hpp) under CUDA's rules
// of global-mode capture (backend.hpp; host_backend_capture.cpp refuses and
// invalidates what CUDA does).
//
// Every handle, range and mapping is tracked in tables under one mutex, so a
// wrong argument yields Status::invalid_argument and a message, never a
// crash. With simulate_latency, each call busy-waits for the median H200
// cost measured in traces/vmm_costs.txt for handles of its size
// (simulated_latency.hpp), one thread at a time.
//
// Limits (backend.hpp): the backend counts the memory mappings it makes the
// kernel hold (each mapped chunk and each unmapped gap of a reservation is
// one), the descriptors it holds and the bytes it reserves, and refuses a
// call that would cross its limit with out_of_mappings, out_of_descriptors
// or out_of_va before asking the kernel. The limit is the machine's budget
// (process_limits.hpp: vm.max_map_count, RLIMIT_NOFILE and RLIMIT_AS less what
// the process used when the first backend started and a headroom), shared
// by every HostBackend of the process, or a lower one set in the options to
// emulate a small machine.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "backend/host/host_arena.hpp"
#include "backend/host/host_capture.hpp"

namespace memlake {

class HostStream;

struct HostBackendOptions {
  int device = 0;
  std::size_t granularity = std::size_t{2} << 20;
  std::size_t capacity = std::size_t{80} << 30;
  bool simulate_latency = false;
  // true: every chunk is a file of its own, exportable (export_chunk), and
  // holds a descriptor until released. false: chunks share one file and
  // export_chunk is not_supported, as on CUDA without shareable.
  bool shareable = true;
  // Emulated limits, for tests and CI (0: the machine's budget alone): most
  // mapping units (each mapped chunk and unmapped gap of a reservation, as
  // the kernel counts them against vm.max_map_count), descriptors held, and
  // reserved bytes.
  std::size_t max_mappings = 0;
  std::size_t max_descriptors = 0;
  std::size_t max_va_bytes = 0;
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
  // The options' limits capped by the machine's budgets.
  BackendLimits limits() const override;
  BackendUsage usage() const override;

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
  Status stream_begin_capture(StreamHandle stream) override;
  Status stream_end_capture(StreamHandle stream, GraphHandle* graph) override;
  Status graph_launch(GraphHandle graph, StreamHandle stream) override;
  Status graph_destroy(GraphHandle graph) override;
  Status stream_capture_info(StreamHandle stream, CaptureState* state, std::uint64_t* id) override;
  Status device_synchronize() override;

  std::string last_error() const override;

  // --- inspection, for tests ----------------------------------------------
  std::size_t live_chunks() const;      // created, not released
  std::size_t reserved_ranges() const;  // reserved, not unreserved
  std::size_t mapped_ranges() const;    // chunk mappings in place
  // True when [va, va+size) is entirely mapped and set_access() covered it.
  bool is_accessible(DevicePtr va, std::size_t size) const;
  // How many times `chunk` is mapped right now (0 for unknown handles).
  std::size_t chunk_mappings(ChunkHandle chunk) const;
  // Chunks released while still mapped, whose memory waits for their last
  // unmap.
  std::size_t released_mapped_chunks() const;

 private:
  struct Chunk {
    int fd;              // its own file; -1: a range of the arena; -2: its own file, closed
    std::size_t offset;  // in the arena
    std::size_t size;
    std::size_t mappings;
  };
  struct Mapping {
    std::size_t size;
    ChunkHandle chunk;
    bool accessible;
  };
  struct Event {
    std::shared_ptr<HostStream> stream;  // null until first recorded
    std::uint64_t seq = 0;
    // Last recorded in a capture: that capture (kept after it ends) and the
    // nodes the event covers.
    std::shared_ptr<HostCapture> capture;
    Frontier deps;
  };

  using ReservationMap = std::map<DevicePtr, std::size_t>;  // start -> size
  using MappingMap = std::map<DevicePtr, Mapping>;          // start -> mapping

  // Reservation holding [va, va+size) whole, or end().
  ReservationMap::const_iterator find_reservation(DevicePtr va, std::size_t size) const;
  // Counts the mappings that tile [va, va+size) exactly; 0 if they do not.
  std::size_t tiling_mappings(DevicePtr va, std::size_t size) const;
  // Mapping units that mapping [va, va+size) inside `r` adds (0 to 2).
  std::size_t map_cost(ReservationMap::const_iterator r, DevicePtr va, std::size_t size) const;
  // Mapping units that unmapping the mappings tiling [va, va+size) frees.
  std::size_t unmap_refund(DevicePtr va, std::size_t size) const;
  // Takes `n` units of each resource from this backend's limit and the
  // process's budget; false (nothing taken, message set) when either is
  // exceeded. With vm_mutex_ held.
  bool claim_mappings(std::size_t n, const char* call);
  bool claim_descriptors(std::size_t n, const char* call);
  bool claim_va(std::size_t bytes, const char* call);
  void give_back_mappings(std::size_t n);
  void give_back_descriptors(std::size_t n);
  void give_back_va(std::size_t bytes);
  // The memory behind a chunk once its handle and its last mapping are gone.
  void free_storage(const Chunk& c);
  // One mapping of `chunk` fewer; frees a released chunk's memory with its
  // last one. With vm_mutex_ held.
  void drop_mapping(ChunkHandle chunk);
  // The status and message for an mmap/munmap/mprotect failure with `err`.
  Status vm_failure(int err, const char* call, DevicePtr va, std::size_t size);
  // With stream_mutex_ held; creates the default stream on first use.
  std::shared_ptr<HostStream> find_stream(StreamHandle stream, const char* call);
  // host_backend_capture.cpp, with stream_mutex_ held.
  // The capture `s` takes part in, or nullptr.
  HostCapture* capture_of(const HostStream* s) const;
  // A call CUDA calls potentially unsafe (a query or synchronization) while
  // a capture is under way: every capture is invalidated and the call
  // refused. ok when no capture is under way.
  Status refuse_if_capturing(const char* call);
  // Refuses `call` on a stream of the capture `c`, invalidating it.
  Status invalidate(HostCapture& c, const char* call, const char* why);
  // The capture's streams stop capturing.
  void end_capture(const std::shared_ptr<HostCapture>& c);
  // stream_wait_event where the event was recorded in a capture or `s`
  // captures (`waiter`): joins, rejoins or refuses.
  Status wait_in_capture(const std::shared_ptr<HostStream>& s, const Event& e, HostCapture* waiter);
  // With simulate_latency, spins for what `op` costs on one handle of
  // `handle_bytes` (simulated_latency.hpp), or for `cost`; the calls of all
  // threads take turns, as the driver's do.
  void simulate(VmmOp op, std::size_t handle_bytes) const;
  void simulate(std::chrono::nanoseconds cost) const;
  std::chrono::nanoseconds tiled_cost(VmmOp op, DevicePtr va, std::size_t n) const;

  const HostBackendOptions options_;

  mutable std::mutex vm_mutex_;  // guards everything down to descriptors_
  std::unordered_map<ChunkHandle, Chunk> chunks_;
  std::unordered_map<ChunkHandle, Chunk> released_mapped_;
  ReservationMap reservations_;
  MappingMap mappings_;
  HostArena arena_;
  ChunkHandle next_chunk_ = 1;
  std::size_t physical_bytes_ = 0;
  std::size_t mapping_units_ = 0;
  std::size_t va_bytes_ = 0;
  std::size_t descriptors_ = 0;

  mutable std::mutex stream_mutex_;  // guards everything below
  std::unordered_map<StreamHandle, std::shared_ptr<HostStream>> streams_;
  std::unordered_map<EventHandle, std::unique_ptr<Event>> events_;
  // Every stream taking part in a capture, and the captures under way.
  std::unordered_map<const HostStream*, std::shared_ptr<HostCapture>> capturing_;
  std::vector<std::shared_ptr<HostCapture>> captures_;
  std::unordered_map<GraphHandle, std::unique_ptr<HostGraph>> graphs_;
};

static_assert(IsBackend<HostBackend>);

}  // namespace memlake
