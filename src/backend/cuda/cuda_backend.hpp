// CudaBackend: the Backend contract on an NVIDIA GPU. Virtual memory goes
// through the driver's VMM calls (cuMemCreate, cuMemAddressReserve, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), reached via
// cudaGetDriverEntryPointByVersion so that nothing links libcuda; streams and
// events go through the static CUDA runtime, and so does graph capture
// (cudaStreamBeginCapture in global mode, cudaStreamEndCapture, an
// instantiated cudaGraphExec_t per GraphHandle).
//
// Every call runs with the backend's device primary context current and puts
// the caller's context (and so its current device) back afterwards. The
// header stays free of CUDA headers; handles are the runtime's own pointers
// (a StreamHandle is a cudaStream_t, an EventHandle a cudaEvent_t).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"

namespace memlake {

struct CudaBackendOptions {
  int device = 0;
  // Physical bytes the backend may hold. 0 with capacity_fraction 0: the
  // device's free memory when the backend is built.
  std::size_t capacity = 0;
  // When > 0 (and capacity is 0): this share of the device's total memory.
  double capacity_fraction = 0;
  // Devices (bit d: device d) granted read/write access to every mapping;
  // all bits: every device that can access this one peer to peer.
  std::uint64_t peer_access = 0;
  // Chunks are created exportable as POSIX file descriptors (export_chunk).
  bool shareable = false;
};

class CudaBackend final : public Backend {
 public:
  // Throws backend_error (with the reason) when there is no driver or GPU,
  // the device does not exist or does not support virtual memory management.
  explicit CudaBackend(CudaBackendOptions options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Number of CUDA devices; 0 when there is no driver or no GPU. Never throws.
  static int device_count();

  const char* name() const override { return "cuda"; }
  int device() const override { return device_; }
  std::size_t granularity() const override { return granularity_; }
  std::size_t capacity() const override { return capacity_; }
  std::size_t physical_bytes() const override;
  BackendLimits limits() const override;
  BackendUsage usage() const override;
  std::size_t total_memory() const { return total_memory_; }
  // The peer devices every mapping is opened to, besides device().
  const std::vector<int>& peers() const { return peers_; }

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

 private:
  class ContextGuard;

  int device_ = 0;
  int cu_device_ = 0;            // CUdevice
  void* primary_ctx_ = nullptr;  // CUcontext, retained for the backend's lifetime
  std::size_t granularity_ = 0;
  std::size_t capacity_ = 0;
  std::size_t total_memory_ = 0;
  std::vector<int> peers_;
  bool shareable_ = false;

  mutable std::mutex mutex_;        // guards the two below
  std::size_t physical_bytes_ = 0;  // includes creations in flight
  std::unordered_map<ChunkHandle, std::size_t> chunks_;
  std::atomic<std::size_t> va_bytes_{0};  // reserved, not yet freed
};

static_assert(IsBackend<CudaBackend>);

}  // namespace memlake
