// Stand-in for PyTorch's c10/cuda/CUDACachingAllocator.h: the statistics
// struct, checkpoint types, the memory history's types (those of torch
// 2.11, which defines them in c10/core/CachingDeviceAllocator.h) and the
// CUDAAllocator interface, only the members memlake's PyTorch allocator
// overrides or fills, with PyTorch's names and types.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "c10/core/Device.h"
#include "c10/util/Exception.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace c10 {

using MempoolId_t = std::pair<unsigned long long, unsigned long long>;

// c10/core/Allocator.h: what a context recorder gathers (a stack).
struct GatheredContext {
  virtual ~GatheredContext() = default;
};

// c10/util/ApproximateClock.h.
using approx_time_t = int64_t;
inline approx_time_t getApproximateTime() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

namespace CachingDeviceAllocator {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;
};
using StatArray = std::array<Stat, 3>;  // aggregate, small pool, large pool

struct DeviceStats {
  StatArray allocation;
  StatArray segment;
  StatArray active;
  StatArray inactive_split;
  StatArray allocated_bytes;
  StatArray reserved_bytes;
  StatArray active_bytes;
  StatArray inactive_split_bytes;
  StatArray requested_bytes;
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
  Stat oversize_allocations;
  Stat oversize_segments;
  int64_t num_sync_all_streams = 0;
  int64_t num_device_alloc = 0;
  int64_t num_device_free = 0;
  int64_t max_split_size = 0;
};

}  // namespace CachingDeviceAllocator

namespace cuda {

using MempoolId_t = c10::MempoolId_t;

namespace CUDACachingAllocator {

struct AllocatorState {
  virtual ~AllocatorState() = default;
};

using CreateContextFn = std::shared_ptr<GatheredContext> (*)();

enum struct RecordContext {
  NEVER = 0,
  STATE = 1,  // stacks for active allocations only
  ALLOC = 2,  // also for allocations in the trace
  ALL = 3,    // also for frees
};

struct BlockInfo {
  size_t size = 0;
  size_t requested_size = 0;
  int32_t gc_counter = 0;
  bool allocated = false;
  bool active = false;
  std::shared_ptr<GatheredContext> context_when_allocated;
};

struct SegmentInfo {
  c10::DeviceIndex device = 0;
  int32_t registration_counter = -1;
  size_t address = 0;
  size_t total_size = 0;
  size_t requested_size = 0;
  size_t allocated_size = 0;
  size_t active_size = 0;
  void* stream = nullptr;
  bool is_large = false;
  bool is_expandable = false;
  MempoolId_t owner_private_pool_id = {0, 0};
  std::vector<BlockInfo> blocks;
  std::shared_ptr<GatheredContext> context_when_allocated;
};

union trace_time_ {
  time_t t_;
  approx_time_t approx_t_;
};

struct TraceEntry {
  enum Action {
    ALLOC,
    FREE_REQUESTED,
    FREE_COMPLETED,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    SEGMENT_MAP,
    SEGMENT_UNMAP,
    SNAPSHOT,
    OOM
  };
  TraceEntry(Action action, c10::DeviceIndex device, size_t addr, size_t size, void* stream,
             MempoolId_t mempool, approx_time_t time,
             std::shared_ptr<GatheredContext> context = nullptr, std::string compile_context = "",
             std::string user_metadata = "")
      : action_(action),
        device_(device),
        addr_(addr),
        context_(std::move(context)),
        stream_(stream),
        size_(size),
        mempool_(std::move(mempool)),
        compile_context_(std::move(compile_context)),
        user_metadata_(std::move(user_metadata)) {
    time_.approx_t_ = time;
  }
  Action action_;
  c10::DeviceIndex device_;
  size_t addr_;
  std::shared_ptr<GatheredContext> context_;
  void* stream_{};
  size_t size_;
  MempoolId_t mempool_;
  trace_time_ time_{};
  std::string compile_context_;
  std::string user_metadata_;
};

struct AllocatorConfigInfo {
  double garbage_collection_threshold;
  size_t max_split_size;
  bool expandable_segments;
  std::string last_allocator_settings;
};

struct SnapshotInfo {
  std::vector<SegmentInfo> segments;
  std::vector<std::vector<TraceEntry>> device_traces;
  AllocatorConfigInfo config_metadata;
};

struct CheckpointDelta {
  std::vector<void*> ptrs_freed;
  std::vector<c10::DataPtr> dataptrs_allocd;
};

class CUDAAllocator {
 public:
  virtual ~CUDAAllocator() = default;
  // c10::Allocator's: a tensor's memory, on the current device and stream.
  virtual c10::DataPtr allocate(size_t n) = 0;
  virtual c10::DeleterFnPtr raw_deleter() const = 0;
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) = 0;
  virtual void raw_delete(void* ptr) = 0;
  virtual void init(int device_count) = 0;
  virtual void cacheInfo(c10::DeviceIndex device, size_t* largest_block) = 0;
  virtual CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) = 0;
  virtual void resetAccumulatedStats(c10::DeviceIndex device) = 0;
  virtual void resetPeakStats(c10::DeviceIndex device) = 0;
  virtual void beginAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id,
                                   std::function<bool(cudaStream_t)> filter) = 0;
  virtual void endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id) = 0;
  virtual void releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) = 0;
  virtual std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                             MempoolId_t id) = 0;
  virtual CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                                 std::shared_ptr<AllocatorState> pps) = 0;
  virtual bool checkPoolLiveAllocations(c10::DeviceIndex device, MempoolId_t mempool_id,
                                        const std::unordered_set<void*>& expected) = 0;
  virtual SnapshotInfo snapshot(MempoolId_t mempool_id = {0, 0}, bool include_traces = true) = 0;
  virtual bool isHistoryEnabled() {
    c10::torch_check_failed("CUDAAllocator does not yet support recordHistory.");
  }
  virtual void recordHistory(bool enabled, CreateContextFn context_recorder,
                             size_t alloc_trace_max_entries, RecordContext when, bool clearHistory,
                             const std::vector<std::string>& skip_actions) = 0;
};

}  // namespace CUDACachingAllocator
}  // namespace cuda
}  // namespace c10
