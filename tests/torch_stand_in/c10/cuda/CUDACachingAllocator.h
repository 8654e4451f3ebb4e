// Stand-in for PyTorch's c10/cuda/CUDACachingAllocator.h: the statistics
// struct, checkpoint types and the CUDAAllocator interface, only the members
// memlake's PyTorch allocator overrides or fills, with PyTorch's names and
// types.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "c10/core/Device.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace c10 {

using MempoolId_t = std::pair<unsigned long long, unsigned long long>;

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

struct CheckpointDelta {
  std::vector<void*> ptrs_freed;
  std::vector<c10::DataPtr> dataptrs_allocd;
};

class CUDAAllocator {
 public:
  virtual ~CUDAAllocator() = default;
  virtual c10::DeleterFnPtr raw_deleter() const = 0;
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
};

}  // namespace CUDACachingAllocator
}  // namespace cuda
}  // namespace c10
