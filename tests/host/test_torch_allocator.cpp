// memlake's PyTorch allocator (python/memlake/_torch_allocator.cpp) built
// against the stand-in torch of tests/torch_stand_in and run over the real C
// API on the host backend: torch.cuda's statistics, cacheInfo, and the pool
// checkpoints of CUDA graph trees, as PyTorch calls them. Device 9 of the
// process-wide C API table is this suite's.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

// The allocator's own file, as memlake.torch.enable() compiles it.
#include "python/memlake/_torch_allocator.cpp"

#include "host/scoped_conf.hpp"
#include "memlake/memlake.h"
#include "memlake/torch_hooks.h"

namespace {

constexpr int kDevice = 9;
constexpr std::size_t MiB = std::size_t{1} << 20;
using TorchPool = c10::cuda::MempoolId_t;

// The allocator declares memlake.h's structs under its own names, field for
// field.
static_assert(sizeof(PoolId) == sizeof(memlake_pool_id) &&
              offsetof(PoolId, second) == offsetof(memlake_pool_id, second));
static_assert(sizeof(PoolBlock) == sizeof(memlake_pool_block) &&
              offsetof(PoolBlock, size) == offsetof(memlake_pool_block, size) &&
              offsetof(PoolBlock, stream) == offsetof(memlake_pool_block, stream));
static_assert(sizeof(StatValue) == sizeof(memlake_stat_value) &&
              offsetof(StatValue, peak) == offsetof(memlake_stat_value, peak));

// A function taking those structs as the allocator's field declares it.
template <class To, class From>
To as(From* function) {
  return reinterpret_cast<To>(reinterpret_cast<void (*)()>(function));
}

// What memlake/_torch_build.py fills from libmemlake.so, each field from
// its function: the compiler checks each type against the field's, except
// for the three functions of those structs.
MemlakeFunctions functions() {
  MemlakeFunctions f{};
  f.torch_malloc = memlake_torch_malloc;
  f.torch_free = memlake_torch_free;
  f.torch_record_stream = memlake_torch_record_stream;
  f.torch_empty_cache = memlake_torch_empty_cache;
  f.torch_set_memory_fraction = memlake_torch_set_memory_fraction;
  f.torch_begin_allocate_to_pool = memlake_torch_begin_allocate_to_pool;
  f.torch_end_allocate_to_pool = memlake_torch_end_allocate_to_pool;
  f.torch_release_pool = memlake_torch_release_pool;
  f.pool_blocks = as<decltype(f.pool_blocks)>(memlake_pool_blocks);
  f.restore_pool = as<decltype(f.restore_pool)>(memlake_restore_pool);
  f.last_error = memlake_last_error;
  f.stat_count = memlake_stat_count;
  f.stat_name = memlake_stat_name;
  f.get_stat_values = as<decltype(f.get_stat_values)>(memlake_get_stat_values);
  f.reset_peak_stats = memlake_reset_peak_stats;
  f.largest_available = memlake_largest_available;
  return f;
}

// One allocator for the suite, installed as PyTorch's would be.
class TorchAllocator : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const memlake::test::ScopedConf conf("backend:host,capacity:256M,max_chunk:2M,worker:off");
    const MemlakeFunctions f = functions();
    char error[256] = "";
    ASSERT_EQ(memlake_torch_install_graph_tree_allocator(&f, error, sizeof error), 0) << error;
    std::size_t ignored = 0;
    ASSERT_EQ(memlake_largest_available(kDevice, &ignored), 0) << memlake_last_error();
  }

  static MemlakeAllocator& allocator() {
    auto current = torch::cuda::CUDAPluggableAllocator::getCurrentAllocator();
    auto* a = dynamic_cast<MemlakeAllocator*>(current.get());
    EXPECT_NE(a, nullptr) << "the installed allocator is not memlake's";
    return *a;
  }

  static memlake_stats stats() {
    memlake_stats s{};
    s.version = MEMLAKE_STATS_VERSION;
    s.size = sizeof s;
    EXPECT_EQ(memlake_get_stats(kDevice, &s), 0) << memlake_last_error();
    return s;
  }
};

TEST_F(TorchAllocator, DeviceStatsAreMemlakesUnderPyTorchsNames) {
  MemlakeAllocator& a = allocator();
  const memlake_stats before = stats();
  void* small = a.malloc(1000, kDevice, nullptr);
  void* large = a.malloc(3 * MiB, kDevice, nullptr);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);

  auto d = a.getDeviceStats(kDevice);
  const memlake_stats s = stats();
  EXPECT_EQ(d.allocated_bytes[0].current, s.live_bytes.current);
  EXPECT_EQ(d.allocated_bytes[0].current - before.live_bytes.current,
            static_cast<int64_t>(1024 + 3 * MiB))
      << "sizes rounded to 512 bytes";
  EXPECT_EQ(d.requested_bytes[0].current - before.requested_bytes.current,
            static_cast<int64_t>(1000 + 3 * MiB));
  EXPECT_EQ(d.active_bytes[0].current, s.live_bytes.current);
  EXPECT_EQ(d.reserved_bytes[0].current, s.reserved_bytes.current);
  EXPECT_EQ(d.reserved_bytes[0].peak, s.reserved_bytes.peak);
  EXPECT_EQ(d.segment[0].current, s.segments.current);
  EXPECT_EQ(d.allocation[0].current, s.live_blocks.current);
  EXPECT_EQ(d.allocation[0].current - before.live_blocks.current, 2);
  EXPECT_EQ(d.allocation[1].current, 0) << "no small-pool split";

  // Counters count from the last reset; peaks go back to the current value.
  a.resetAccumulatedStats(kDevice);
  EXPECT_EQ(a.getDeviceStats(kDevice).allocation[0].allocated, 0);
  a.raw_delete(large);
  void* again = a.malloc(4096, kDevice, nullptr);
  d = a.getDeviceStats(kDevice);
  EXPECT_EQ(d.allocation[0].allocated, 1);
  EXPECT_EQ(d.allocation[0].freed, 1);
  EXPECT_GE(d.allocated_bytes[0].peak, d.allocated_bytes[0].current + static_cast<int64_t>(MiB));
  a.resetPeakStats(kDevice);
  d = a.getDeviceStats(kDevice);
  EXPECT_EQ(d.allocated_bytes[0].peak, d.allocated_bytes[0].current);

  EXPECT_THROW(a.malloc(std::size_t{1} << 40, kDevice, nullptr), std::exception) << "a terabyte";
  EXPECT_EQ(a.getDeviceStats(kDevice).num_ooms, 1);
  a.raw_delete(small);
  a.raw_delete(again);
}

TEST_F(TorchAllocator, CacheInfoIsTheLargestBlockMemlakeServesNow) {
  MemlakeAllocator& a = allocator();
  std::size_t largest = 0;
  a.cacheInfo(kDevice, &largest);
  std::size_t expected = 0;
  ASSERT_EQ(memlake_largest_available(kDevice, &expected), 0);
  EXPECT_EQ(largest, expected);
  EXPECT_GT(largest, 0u);
  // cuDNN takes a workspace of that size: it is served, and fills the rest.
  void* workspace = a.malloc(largest, kDevice, nullptr);
  ASSERT_NE(workspace, nullptr) << memlake_last_error();
  std::memset(workspace, 0x5a, largest);
  a.cacheInfo(kDevice, &largest);
  EXPECT_EQ(largest, 0u);
  a.raw_delete(workspace);
}

// Graph trees' sequence: a checkpoint of the pool, a branch that frees and
// allocates, the pool put back, and the blocks PyTorch then owns freed
// through raw_delete.
TEST_F(TorchAllocator, APoolPutBackHoldsTheCheckpointsBlocksWithTheirBytes) {
  MemlakeAllocator& a = allocator();
  const TorchPool pool{0, 901};
  // torch.cuda.graph empties the cache before a capture, so that a pool can
  // have the memory eager tensors left cached (the fences of their frees are
  // not looked at while a pool allocates).
  memlake_torch_empty_cache();
  const int64_t live_before = stats().live_blocks.current;
  a.beginAllocateToPool(kDevice, pool, [](cudaStream_t) { return true; });
  auto* kept = static_cast<std::uint8_t*>(a.malloc(3 * MiB, kDevice, nullptr));
  auto* dropped = static_cast<std::uint8_t*>(a.malloc(MiB, kDevice, nullptr));
  std::memset(kept, 0x11, 3 * MiB);
  std::memset(dropped, 0x22, MiB);
  auto checkpoint = a.getCheckpointState(kDevice, pool);
  EXPECT_TRUE(a.checkPoolLiveAllocations(kDevice, pool, {kept, dropped}));

  // The branch: `dropped` goes, a new block takes memory of the pool.
  a.raw_delete(dropped);
  auto* branch = static_cast<std::uint8_t*>(a.malloc(2 * MiB, kDevice, nullptr));
  std::memset(branch, 0x33, 2 * MiB);
  EXPECT_TRUE(a.checkPoolLiveAllocations(kDevice, pool, {kept, branch}));
  EXPECT_FALSE(a.checkPoolLiveAllocations(kDevice, pool, {kept}));
  EXPECT_FALSE(a.checkPoolLiveAllocations(kDevice, pool, {kept, kept + 512}));
  a.endAllocateToPool(kDevice, pool);

  {
    auto delta = a.setCheckpointPoolState(kDevice, checkpoint);
    const std::unordered_set<void*> freed(delta.ptrs_freed.begin(), delta.ptrs_freed.end());
    EXPECT_EQ(freed, (std::unordered_set<void*>{kept, branch}));
    ASSERT_EQ(delta.dataptrs_allocd.size(), 2u);
    std::unordered_set<void*> allocated;
    for (const c10::DataPtr& p : delta.dataptrs_allocd) allocated.insert(p.get());
    EXPECT_EQ(allocated, (std::unordered_set<void*>{kept, dropped}));
    EXPECT_TRUE(a.checkPoolLiveAllocations(kDevice, pool, {kept, dropped}));
    // The block live throughout kept its bytes at its address.
    for (std::size_t i = 0; i < 3 * MiB; i += 4096) ASSERT_EQ(kept[i], 0x11) << i;
    std::memset(dropped, 0x44, MiB);
    for (std::size_t i = 0; i < 3 * MiB; i += 4096) ASSERT_EQ(kept[i], 0x11) << i;
    // `delta` goes here, as the storages PyTorch hands its DataPtrs to do:
    // both blocks are freed through raw_delete.
  }
  EXPECT_TRUE(a.checkPoolLiveAllocations(kDevice, pool, {}));
  EXPECT_EQ(stats().live_blocks.current, live_before);
  a.releasePool(kDevice, pool);
  EXPECT_EQ(std::string(memlake_last_error()), "");
}

TEST_F(TorchAllocator, ACheckpointOfAnotherAllocatorIsRefusedByName) {
  MemlakeAllocator& a = allocator();
  try {
    a.setCheckpointPoolState(kDevice,
                             std::make_shared<c10::cuda::CUDACachingAllocator::AllocatorState>());
    FAIL() << "a state memlake did not make was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not make"), std::string::npos) << e.what();
  }
}

}  // namespace
