// A stand-in for the parts of PyTorch's C++ API that memlake's PyTorch
// allocator (python/memlake/_torch_allocator.cpp) uses, so that the host
// tests build that file and run its logic against the real libmemlake
// (tests/host/test_torch_allocator.cpp) where no torch is installed. It
// behaves as PyTorch's CUDAPluggableAllocator (torch/csrc/cuda/
// CUDAPluggableAllocator.cpp) in what the subclass relies on; the build that
// counts is the one memlake.torch.enable() makes against the installed
// torch, which the GPU tests run.
#include "torch/csrc/cuda/CUDAPluggableAllocator.h"

#include <utility>

namespace torch::cuda::CUDAPluggableAllocator {

namespace {

std::shared_ptr<CUDAAllocator> current_allocator;

void current_raw_delete(void* ptr) {
  current_allocator->raw_delete(ptr);
}

[[noreturn]] void unsupported(const char* call) {
  c10::torch_check_failed("CUDAPluggableAllocator does not yet support ", call,
                          ". If you need it, please file an issue describing your use case.");
}

}  // namespace

std::shared_ptr<CUDAAllocator> getCurrentAllocator() {
  return current_allocator;
}

void changeCurrentAllocator(const std::shared_ptr<CUDAAllocator>& allocator) {
  current_allocator = allocator;
}

CUDAPluggableAllocator::CUDAPluggableAllocator(
    std::function<void*(size_t, int, cudaStream_t)> alloc_fn,
    std::function<void(void*, size_t, int, cudaStream_t)> free_fn)
    : alloc_fn_(std::move(alloc_fn)), free_fn_(std::move(free_fn)) {}

void CUDAPluggableAllocator::set_reset_fn(std::function<void()> reset_fn) {
  reset_fn_ = std::move(reset_fn);
}
void CUDAPluggableAllocator::set_memory_fraction_fn(
    std::function<void(double, int)> memory_fraction_fn) {
  memory_fraction_fn_ = std::move(memory_fraction_fn);
}
void CUDAPluggableAllocator::set_record_stream_fn(
    std::function<void(void*, cudaStream_t)> record_stream_fn) {
  record_stream_fn_ = std::move(record_stream_fn);
}
void CUDAPluggableAllocator::set_begin_allocate_to_pool(
    std::function<void(int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>)> fn) {
  begin_allocate_to_pool_fn_ = std::move(fn);
}
void CUDAPluggableAllocator::set_end_allocate_to_pool_fn(
    std::function<void(int, c10::cuda::MempoolId_t)> fn) {
  end_allocate_to_pool_fn_ = std::move(fn);
}
void CUDAPluggableAllocator::set_release_pool(std::function<void(int, c10::cuda::MempoolId_t)> fn) {
  release_pool_fn_ = std::move(fn);
}

void* CUDAPluggableAllocator::malloc(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
  void* ptr = alloc_fn_(size, device, stream);
  const std::lock_guard<std::mutex> lock(allocator_mutex_);
  allocation_metadata_[ptr] = _AllocationMetadata{size, device, stream};
  return ptr;
}

c10::DataPtr CUDAPluggableAllocator::allocate(size_t size) {
  const c10::DeviceIndex device = c10::cuda::current_device();
  void* ptr = malloc(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
  return {ptr, ptr, raw_deleter(), c10::Device(c10::DeviceType::CUDA, device)};
}

c10::DeleterFnPtr CUDAPluggableAllocator::raw_deleter() const {
  return &current_raw_delete;
}

void* CUDAPluggableAllocator::raw_alloc(size_t nbytes) {
  const c10::DeviceIndex device = c10::cuda::current_device();
  return malloc(nbytes, device, c10::cuda::getCurrentCUDAStream(device).stream());
}

void* CUDAPluggableAllocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  return malloc(nbytes, c10::cuda::current_device(), stream);
}

void CUDAPluggableAllocator::raw_delete(void* ptr) {
  _AllocationMetadata metadata;
  {
    const std::lock_guard<std::mutex> lock(allocator_mutex_);
    auto it = allocation_metadata_.find(ptr);
    TORCH_CHECK(it != allocation_metadata_.end(), "Trying to free a pointer not allocated here");
    metadata = it->second;
    allocation_metadata_.erase(it);
  }
  free_fn_(ptr, metadata.size, metadata.device_idx, metadata.stream);
}

void CUDAPluggableAllocator::init(int /*device_count*/) {}

void CUDAPluggableAllocator::cacheInfo(c10::DeviceIndex, size_t*) {
  unsupported("cacheInfo");
}
c10::CachingDeviceAllocator::DeviceStats CUDAPluggableAllocator::getDeviceStats(c10::DeviceIndex) {
  unsupported("getDeviceStats");
}
void CUDAPluggableAllocator::resetAccumulatedStats(c10::DeviceIndex) {
  unsupported("resetAccumulatedStats");
}
void CUDAPluggableAllocator::resetPeakStats(c10::DeviceIndex) {
  unsupported("resetPeakStats");
}

void CUDAPluggableAllocator::beginAllocateToPool(c10::DeviceIndex device,
                                                 c10::cuda::MempoolId_t mempool_id,
                                                 std::function<bool(cudaStream_t)> filter) {
  if (begin_allocate_to_pool_fn_) begin_allocate_to_pool_fn_(device, mempool_id, std::move(filter));
}
void CUDAPluggableAllocator::endAllocateToPool(c10::DeviceIndex device,
                                               c10::cuda::MempoolId_t mempool_id) {
  if (end_allocate_to_pool_fn_) end_allocate_to_pool_fn_(device, mempool_id);
}
void CUDAPluggableAllocator::releasePool(c10::DeviceIndex device,
                                         c10::cuda::MempoolId_t mempool_id) {
  if (release_pool_fn_) release_pool_fn_(device, mempool_id);
}

std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState>
CUDAPluggableAllocator::getCheckpointState(c10::DeviceIndex, c10::cuda::MempoolId_t) {
  unsupported("getCheckpointState");
}
c10::cuda::CUDACachingAllocator::CheckpointDelta CUDAPluggableAllocator::setCheckpointPoolState(
    c10::DeviceIndex, std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState>) {
  unsupported("setCheckpointPoolState");
}
bool CUDAPluggableAllocator::checkPoolLiveAllocations(c10::DeviceIndex, c10::cuda::MempoolId_t,
                                                      const std::unordered_set<void*>&) {
  unsupported("checkPoolLiveAllocations");
}
c10::cuda::CUDACachingAllocator::SnapshotInfo CUDAPluggableAllocator::snapshot(
    c10::cuda::MempoolId_t, bool) {
  unsupported("snapshot");
}
void CUDAPluggableAllocator::recordHistory(bool, c10::cuda::CUDACachingAllocator::CreateContextFn,
                                           size_t, c10::cuda::CUDACachingAllocator::RecordContext,
                                           bool, const std::vector<std::string>&) {
  unsupported("recordHistory");
}

}  // namespace torch::cuda::CUDAPluggableAllocator
