// memlake as PyTorch's CUDA allocator with the calls CUDA graph trees need
// (torch.compile(mode="reduce-overhead")): CUDAPluggableAllocator with
// getCheckpointState, setCheckpointPoolState and checkPoolLiveAllocations,
// which the pluggable allocator refuses, implemented over memlake's pool
// checkpoints (memlake_pool_blocks, memlake_restore_pool).
//
// memlake/_torch_build.py compiles this file against the installed torch on
// first use. It is built against torch's headers and libraries alone: every
// memlake function arrives as an address in MemlakeFunctions, taken from the
// libmemlake.so Python loaded, so the library is not linked and the build
// needs nothing of memlake's.

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <c10/core/Device.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using PluggableAllocator = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;

}  // namespace

// memlake.h's memlake_pool_id and memlake_pool_block, field for field.
struct PoolId {
  uint64_t first;
  uint64_t second;
};

struct PoolBlock {
  void* ptr;
  size_t size;  // as requested
  void* stream;
};

// The functions of libmemlake.so the allocator calls, each field named as
// the function without its "memlake_" prefix, in this order: Python fills it
// (memlake/_torch_build.py, FUNCTIONS) with one address per field. The
// graph-pool hooks are C-linkage functions with C++ parameter types
// (memlake/torch_hooks.h): exactly the types PyTorch calls them with.
struct MemlakeFunctions {
  void* (*torch_malloc)(size_t size, int device, void* stream);
  void (*torch_free)(void* ptr, size_t size, int device, void* stream);
  void (*torch_record_stream)(void* ptr, void* stream);
  void (*torch_empty_cache)();
  void (*torch_set_memory_fraction)(double fraction, int device);
  void (*torch_begin_allocate_to_pool)(int device, c10::cuda::MempoolId_t pool,
                                       std::function<bool(cudaStream_t)> filter);
  void (*torch_end_allocate_to_pool)(int device, c10::cuda::MempoolId_t pool);
  void (*torch_release_pool)(int device, c10::cuda::MempoolId_t pool);
  int (*pool_blocks)(int device, PoolId pool, PoolBlock* out, size_t capacity, size_t* count);
  int (*restore_pool)(int device, PoolId pool, const PoolBlock* blocks, size_t n, void** freed,
                      size_t capacity, size_t* freed_count);
  const char* (*last_error)();
};

namespace {

PoolId pool_id_of(const c10::cuda::MempoolId_t& id) {
  return PoolId{static_cast<uint64_t>(id.first), static_cast<uint64_t>(id.second)};
}

// A pool as getCheckpointState saw it: its live blocks, which
// setCheckpointPoolState puts back.
struct PoolCheckpoint : cca::AllocatorState {
  PoolCheckpoint(c10::DeviceIndex device, c10::cuda::MempoolId_t pool,
                 std::vector<PoolBlock> blocks)
      : device(device), pool(pool), blocks(std::move(blocks)) {}
  c10::DeviceIndex device;
  c10::cuda::MempoolId_t pool;
  std::vector<PoolBlock> blocks;
};

class MemlakeAllocator : public PluggableAllocator {
 public:
  explicit MemlakeAllocator(const MemlakeFunctions& f)
      : PluggableAllocator(
            [m = f.torch_malloc](size_t size, int device, cudaStream_t stream) {
              return m(size, device, stream);
            },
            [d = f.torch_free](void* ptr, size_t size, int device, cudaStream_t stream) {
              d(ptr, size, device, stream);
            }),
        f_(f) {}

  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::cuda::MempoolId_t id) override {
    return std::make_shared<PoolCheckpoint>(device, id, live_blocks(device, id));
  }

  // Puts the pool back as the checkpoint saw it (memlake_restore_pool), then
  // tells PyTorch what changed: the pointers freed, and a DataPtr with this
  // allocator's deleter for each block allocated again, which PyTorch hands
  // to the storages that live on (the others it releases, and graph trees
  // free their blocks later through raw_delete). Both go through
  // the books raw_delete frees by.
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> pps) override {
    auto checkpoint = std::dynamic_pointer_cast<PoolCheckpoint>(pps);
    TORCH_CHECK(checkpoint != nullptr,
                "memlake: setCheckpointPoolState was given a state memlake's allocator did not "
                "make (getCheckpointState of another allocator)");
    TORCH_CHECK(checkpoint->device == device, "memlake: setCheckpointPoolState for device ",
                static_cast<int>(device), " was given a checkpoint of device ",
                static_cast<int>(checkpoint->device));
    const PoolId pool = pool_id_of(checkpoint->pool);
    cca::CheckpointDelta delta;
    // Under the lock from the restore on: a pointer it frees may be handed
    // out again by another thread's malloc, whose record must not be the one
    // erased here.
    const std::lock_guard<std::mutex> lock(allocator_mutex_);
    size_t live = 0;
    if (f_.pool_blocks(device, pool, nullptr, 0, &live) != 0) {
      fail("memlake_pool_blocks");
    }
    std::vector<void*> freed(live);
    size_t freed_count = 0;
    if (f_.restore_pool(device, pool, checkpoint->blocks.data(), checkpoint->blocks.size(),
                        freed.data(), freed.size(), &freed_count) != 0) {
      fail("memlake_restore_pool");
    }
    freed.resize(freed_count);
    for (void* ptr : freed) {
      allocation_metadata_.erase(ptr);
      restored_.erase(ptr);
      delta.ptrs_freed.push_back(ptr);
    }
    for (const PoolBlock& b : checkpoint->blocks) {
      restored_[b.ptr] = Restored{b.size, device, static_cast<cudaStream_t>(b.stream)};
      delta.dataptrs_allocd.emplace_back(b.ptr, b.ptr, raw_deleter(),
                                         c10::Device(c10::DeviceType::CUDA, device));
    }
    return delta;
  }

  // Blocks a checkpoint put back are freed here; the others by the base,
  // which knows the blocks its malloc made.
  void raw_delete(void* ptr) override {
    Restored r;
    {
      const std::lock_guard<std::mutex> lock(allocator_mutex_);
      auto it = restored_.find(ptr);
      if (it == restored_.end()) {
        r.device = -1;
      } else {
        r = it->second;
        restored_.erase(it);
      }
    }
    if (r.device < 0) {
      PluggableAllocator::raw_delete(ptr);
      return;
    }
    f_.torch_free(ptr, r.size, r.device, r.stream);
  }

  // Whether the pool's live blocks are exactly `expected`.
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::cuda::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected) override {
    const std::vector<PoolBlock> blocks = live_blocks(device, mempool_id);
    if (blocks.size() != expected.size()) return false;
    for (const PoolBlock& b : blocks) {
      if (expected.count(b.ptr) == 0) return false;
    }
    return true;
  }

 private:
  // The pool's live blocks; asked again if the pool grew between the count
  // and the list.
  std::vector<PoolBlock> live_blocks(c10::DeviceIndex device, c10::cuda::MempoolId_t id) {
    const PoolId pool = pool_id_of(id);
    std::vector<PoolBlock> blocks;
    size_t count = 0;
    if (f_.pool_blocks(device, pool, nullptr, 0, &count) != 0) fail("memlake_pool_blocks");
    for (;;) {
      blocks.resize(count);
      if (f_.pool_blocks(device, pool, blocks.data(), blocks.size(), &count) != 0) {
        fail("memlake_pool_blocks");
      }
      if (count <= blocks.size()) break;
    }
    blocks.resize(count);
    return blocks;
  }

  void fail(const char* call) const {
    const char* why = f_.last_error();
    TORCH_CHECK(false, "memlake: ", call, " failed: ", why != nullptr ? why : "(no message)");
  }

  // The blocks setCheckpointPoolState allocated, which the base's
  // allocation_metadata_ cannot hold: _AllocationMetadata's constructors are
  // not exported from libtorch_cuda.
  struct Restored {
    size_t size = 0;
    c10::DeviceIndex device = -1;
    cudaStream_t stream = nullptr;
  };

  MemlakeFunctions f_;
  std::unordered_map<void*, Restored> restored_;  // under allocator_mutex_
};

void copy_message(const char* message, char* error, size_t error_len) {
  if (error == nullptr || error_len == 0) return;
  std::snprintf(error, error_len, "%s", message);
}

}  // namespace

extern "C" {

// Makes memlake PyTorch's CUDA allocator, as memlake.torch.enable() sets up
// CUDAPluggableAllocator, with the three calls graph trees need besides.
// 0, or -1 with the reason in `error` (PyTorch's "Can't swap an already
// initialized allocator" once its allocator has started).
__attribute__((visibility("default"))) int memlake_torch_install_graph_tree_allocator(
    const MemlakeFunctions* f, char* error, size_t error_len) {
  try {
    TORCH_CHECK(f != nullptr, "memlake: no functions given");
    auto allocator = std::make_shared<MemlakeAllocator>(*f);
    // No init hook is set: init() only marks the allocator initialized, as
    // createCustomAllocator does for the pluggable one.
    allocator->init(0);
    allocator->set_record_stream_fn(
        [g = f->torch_record_stream](void* ptr, cudaStream_t stream) { g(ptr, stream); });
    allocator->set_reset_fn(f->torch_empty_cache);
    allocator->set_memory_fraction_fn(f->torch_set_memory_fraction);
    allocator->set_begin_allocate_to_pool(f->torch_begin_allocate_to_pool);
    allocator->set_end_allocate_to_pool_fn(f->torch_end_allocate_to_pool);
    allocator->set_release_pool(f->torch_release_pool);
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    return 0;
  } catch (const c10::Error& e) {
    copy_message(e.what_without_backtrace(), error, error_len);
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_len);
  } catch (...) {
    copy_message("memlake: unknown exception", error, error_len);
  }
  return -1;
}

}  // extern "C"
