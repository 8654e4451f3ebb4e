// Stand-in for PyTorch's torch/csrc/cuda/CUDAPluggableAllocator.h: the
// pluggable allocator with the members memlake's subclass uses, behaving as
// PyTorch's (pluggable_allocator.cpp): its malloc keeps each block's size,
// device and stream for raw_delete, the hooks are called when set, and the
// calls it does not support throw.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "c10/cuda/CUDACachingAllocator.h"
#include "c10/cuda/CUDAFunctions.h"
#include "c10/cuda/CUDAStream.h"
#include "c10/util/Exception.h"

namespace torch::cuda::CUDAPluggableAllocator {

using c10::cuda::CUDACachingAllocator::CUDAAllocator;

std::shared_ptr<CUDAAllocator> getCurrentAllocator();
void changeCurrentAllocator(const std::shared_ptr<CUDAAllocator>& allocator);

struct _AllocationMetadata {
  size_t size = 0;
  c10::DeviceIndex device_idx = -1;
  cudaStream_t stream = nullptr;
};

class CUDAPluggableAllocator : public CUDAAllocator {
 public:
  CUDAPluggableAllocator(std::function<void*(size_t, int, cudaStream_t)> alloc_fn,
                         std::function<void(void*, size_t, int, cudaStream_t)> free_fn);

  void set_reset_fn(std::function<void()> reset_fn);
  void set_memory_fraction_fn(std::function<void(double, int)> memory_fraction_fn);
  void set_record_stream_fn(std::function<void(void*, cudaStream_t)> record_stream_fn);
  void set_begin_allocate_to_pool(
      std::function<void(int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>)> fn);
  void set_end_allocate_to_pool_fn(std::function<void(int, c10::cuda::MempoolId_t)> fn);
  void set_release_pool(std::function<void(int, c10::cuda::MempoolId_t)> fn);

  void* malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream);

  c10::DataPtr allocate(size_t size) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override;
  void init(int device_count) override;
  void cacheInfo(c10::DeviceIndex device, size_t* largest_block) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  void beginAllocateToPool(c10::DeviceIndex device, c10::cuda::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::cuda::MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, c10::cuda::MempoolId_t mempool_id) override;
  std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> getCheckpointState(
      c10::DeviceIndex device, c10::cuda::MempoolId_t id) override;
  c10::cuda::CUDACachingAllocator::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device,
      std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> pps) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::cuda::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected) override;
  c10::cuda::CUDACachingAllocator::SnapshotInfo snapshot(c10::cuda::MempoolId_t mempool_id,
                                                         bool include_traces) override;
  void recordHistory(bool enabled,
                     c10::cuda::CUDACachingAllocator::CreateContextFn context_recorder,
                     size_t alloc_trace_max_entries,
                     c10::cuda::CUDACachingAllocator::RecordContext when, bool clearHistory,
                     const std::vector<std::string>& skip_actions) override;

 protected:
  std::function<void*(size_t, int, cudaStream_t)> alloc_fn_;
  std::function<void(void*, size_t, int, cudaStream_t)> free_fn_;
  std::function<void()> reset_fn_;
  std::function<void(double, int)> memory_fraction_fn_;
  std::function<void(void*, cudaStream_t)> record_stream_fn_;
  std::function<void(int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>)>
      begin_allocate_to_pool_fn_;
  std::function<void(int, c10::cuda::MempoolId_t)> end_allocate_to_pool_fn_;
  std::function<void(int, c10::cuda::MempoolId_t)> release_pool_fn_;
  std::mutex allocator_mutex_;
  std::unordered_map<void*, _AllocationMetadata> allocation_metadata_;
};

}  // namespace torch::cuda::CUDAPluggableAllocator
