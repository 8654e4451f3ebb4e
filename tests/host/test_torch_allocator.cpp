// memlake's PyTorch allocator (python/memlake/_torch_allocator.cpp) built
// against the stand-in torch of tests/torch_stand_in and run over the real C
// API on the host backend: torch.cuda's statistics, cacheInfo, the pool
// checkpoints of CUDA graph trees and the memory history
// (torch.cuda.memory._record_memory_history, _snapshot), as PyTorch calls
// them. Device 9 of the process-wide C API table is this suite's.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

// The allocator's own file, as memlake.torch.enable() compiles it.
#include "python/memlake/_torch_allocator.cpp"

#include "c_api_table.hpp"
#include "host/scoped_conf.hpp"
#include "memlake/memlake.h"
#include "memlake/torch_hooks.h"
#include "memlake_functions.hpp"

namespace {

constexpr int kDevice = 9;
constexpr std::size_t MiB = std::size_t{1} << 20;
using TorchPool = c10::cuda::MempoolId_t;

// One allocator for the suite, installed as PyTorch's would be.
class TorchAllocator : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const memlake::test::ScopedConf conf("backend:host,capacity:256M,max_chunk:2M,worker:off");
    c10::cuda::set_device(kDevice);  // where PyTorch's calls allocate
    const MemlakeFunctions f = memlake_functions();
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
  void* small = a.raw_alloc_with_stream(1000, nullptr);
  void* large = a.raw_alloc_with_stream(3 * MiB, nullptr);
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
  void* again = a.raw_alloc_with_stream(4096, nullptr);
  d = a.getDeviceStats(kDevice);
  EXPECT_EQ(d.allocation[0].allocated, 1);
  EXPECT_EQ(d.allocation[0].freed, 1);
  EXPECT_GE(d.allocated_bytes[0].peak, d.allocated_bytes[0].current + static_cast<int64_t>(MiB));
  a.resetPeakStats(kDevice);
  d = a.getDeviceStats(kDevice);
  EXPECT_EQ(d.allocated_bytes[0].peak, d.allocated_bytes[0].current);

  EXPECT_THROW(a.raw_alloc_with_stream(std::size_t{1} << 40, nullptr), std::exception)
      << "a terabyte";
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
  void* workspace = a.raw_alloc_with_stream(largest, nullptr);
  ASSERT_NE(workspace, nullptr) << memlake_last_error();
  std::memset(workspace, 0x5a, largest);
  a.cacheInfo(kDevice, &largest);
  EXPECT_EQ(largest, 0u);
  a.raw_delete(workspace);
}

// A tensor's memory comes from memlake on the current device and stream,
// and its DataPtr gives it back with the pointer alone: memlake knows the
// block's size, device and stream.
TEST_F(TorchAllocator, ATensorsBlockGoesBackWithItsPointerAlone) {
  MemlakeAllocator& a = allocator();
  memlake::Allocator* device = memlake::c_api::existing(kDevice);
  ASSERT_NE(device, nullptr);
  auto* side = static_cast<cudaStream_t>(device->create_stream());
  c10::cuda::setCurrentCUDAStream(c10::cuda::CUDAStream(side));
  const int64_t live_before = stats().live_blocks.current;
  {
    c10::DataPtr data = a.allocate(3 * MiB + 100);
    ASSERT_NE(data.get(), nullptr);
    EXPECT_EQ(data.get_context(), data.get());
    EXPECT_EQ(data.get_deleter(), a.raw_deleter());
    EXPECT_EQ(data.device().index, kDevice);
    auto* bytes = static_cast<std::uint8_t*>(data.get());
    std::memset(bytes, 0x3c, 3 * MiB + 100);
    for (std::size_t i = 0; i < 3 * MiB + 100; i += 4099) ASSERT_EQ(bytes[i], 0x3c) << i;
    memlake_pool_block block{};
    int held_by = -1;
    ASSERT_EQ(memlake_block_info(data.get(), &block, &held_by), 0) << memlake_last_error();
    EXPECT_EQ(block.size, 3 * MiB + 100);
    EXPECT_EQ(block.stream, side) << "allocated on the current stream";
    EXPECT_EQ(held_by, kDevice);
    EXPECT_EQ(stats().live_blocks.current, live_before + 1);

    // record_stream finds the block's device as the free does.
    EXPECT_NO_THROW(memlake_torch_record_stream(data.get(), nullptr));
    int unknown = 0;
    EXPECT_THROW(memlake_torch_record_stream(&unknown, nullptr), std::exception);

    void* raw = a.raw_alloc(1000);
    ASSERT_EQ(memlake_block_info(raw, &block, nullptr), 0) << memlake_last_error();
    EXPECT_EQ(block.stream, side);
    a.raw_delete(raw);
    EXPECT_EQ(stats().live_blocks.current, live_before + 1);
  }
  EXPECT_EQ(stats().live_blocks.current, live_before) << "the DataPtr freed its block";
  // Size 0 is no block, as under PyTorch's caching allocator.
  {
    c10::DataPtr none = a.allocate(0);
    EXPECT_EQ(none.get(), nullptr);
  }
  EXPECT_EQ(a.raw_alloc(0), nullptr);
  EXPECT_EQ(a.raw_alloc_with_stream(0, side), nullptr);
  EXPECT_EQ(stats().live_blocks.current, live_before);

  // A pointer memlake never handed out: reported, never thrown.
  int local = 0;
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(a.raw_delete(&local));
  EXPECT_NE(testing::internal::GetCapturedStderr(), "");
  EXPECT_STRNE(memlake_last_error(), "");
  c10::cuda::setCurrentCUDAStream(c10::cuda::CUDAStream(nullptr));
  device->destroy_stream(side);
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
  auto* kept = static_cast<std::uint8_t*>(a.raw_alloc_with_stream(3 * MiB, nullptr));
  auto* dropped = static_cast<std::uint8_t*>(a.raw_alloc_with_stream(MiB, nullptr));
  std::memset(kept, 0x11, 3 * MiB);
  std::memset(dropped, 0x22, MiB);
  auto checkpoint = a.getCheckpointState(kDevice, pool);
  EXPECT_TRUE(a.checkPoolLiveAllocations(kDevice, pool, {kept, dropped}));

  // The branch: `dropped` goes, a new block takes memory of the pool.
  a.raw_delete(dropped);
  auto* branch = static_cast<std::uint8_t*>(a.raw_alloc_with_stream(2 * MiB, nullptr));
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

// ---- the memory history -------------------------------------------------------

namespace cca = c10::cuda::CUDACachingAllocator;
using Entry = cca::TraceEntry;

// What PyTorch's context recorder returns (a captured stack): numbered, so a
// test sees which call's stack an entry holds.
struct Stack : c10::GatheredContext {
  explicit Stack(int number) : number(number) {}
  int number;
};
int g_stacks = 0;
std::shared_ptr<c10::GatheredContext> record_stack() {
  return std::make_shared<Stack>(++g_stacks);
}
int stack_number(const std::shared_ptr<c10::GatheredContext>& context) {
  auto* stack = dynamic_cast<Stack*>(context.get());
  return stack == nullptr ? 0 : stack->number;
}

// This device's entries of a snapshot.
std::vector<Entry> trace_of(const cca::SnapshotInfo& s) {
  if (s.device_traces.size() <= static_cast<std::size_t>(kDevice)) return {};
  return s.device_traces[kDevice];
}

const cca::SegmentInfo* segment_at(const cca::SnapshotInfo& s, const void* ptr) {
  for (const cca::SegmentInfo& segment : s.segments)
    if (segment.address == reinterpret_cast<std::size_t>(ptr)) return &segment;
  return nullptr;
}

// PyTorch calls these through its allocator interface, with the defaults
// its declarations give.
class TorchHistory : public TorchAllocator {
 protected:
  static cca::CUDAAllocator& api() { return allocator(); }
  void TearDown() override {
    api().recordHistory(false, nullptr, 0, cca::RecordContext::NEVER, false, {});
  }
  static void record(std::size_t max_entries, cca::RecordContext when, bool clear = false,
                     const std::vector<std::string>& skip = {}) {
    api().recordHistory(true, &record_stack, max_entries, when, clear, skip);
  }
};

TEST_F(TorchHistory, AllocationsAndFreesAreTracedWithTheirStacks) {
  MemlakeAllocator& a = allocator();
  void* before = a.raw_alloc_with_stream(4096, nullptr);  // allocated before recording
  EXPECT_FALSE(api().isHistoryEnabled());
  record(100, cca::RecordContext::ALL);
  EXPECT_TRUE(api().isHistoryEnabled());
  cudaStream_t stream = nullptr;  // the host backend's default stream
  const int first_stack = g_stacks + 1;
  void* p = a.raw_alloc_with_stream(3 * MiB + 100, stream);
  void* q = a.raw_alloc_with_stream(1000, stream);
  std::memset(p, 0x6b, 3 * MiB + 100);
  a.raw_delete(q);

  const cca::SnapshotInfo s = api().snapshot();
  const std::vector<Entry> trace = trace_of(s);
  ASSERT_EQ(trace.size(), 4u) << "p and q allocated, q's free requested and completed";
  EXPECT_EQ(trace[0].action_, Entry::ALLOC);
  EXPECT_EQ(trace[0].addr_, reinterpret_cast<std::size_t>(p));
  EXPECT_EQ(trace[0].size_, 3 * MiB + 100);
  EXPECT_EQ(trace[0].stream_, stream);
  EXPECT_EQ(trace[0].device_, kDevice);
  EXPECT_EQ(stack_number(trace[0].context_), first_stack);
  EXPECT_EQ(trace[1].action_, Entry::ALLOC);
  EXPECT_EQ(trace[1].addr_, reinterpret_cast<std::size_t>(q));
  EXPECT_EQ(stack_number(trace[1].context_), first_stack + 1);
  EXPECT_EQ(trace[2].action_, Entry::FREE_REQUESTED);
  EXPECT_EQ(trace[3].action_, Entry::FREE_COMPLETED);
  EXPECT_EQ(trace[3].addr_, reinterpret_cast<std::size_t>(q));
  EXPECT_EQ(trace[3].size_, 1000u);
  EXPECT_EQ(stack_number(trace[3].context_), first_stack + 2) << "ALL: the free's stack too";
  // Microseconds since the epoch, in order.
  const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (std::size_t i = 0; i < trace.size(); ++i) {
    EXPECT_LE(trace[i].time_.t_, now_us) << i;
    EXPECT_GT(trace[i].time_.t_, now_us - 60'000'000) << i;
    if (i > 0) {
      EXPECT_GE(trace[i].time_.t_, trace[i - 1].time_.t_) << i;
    }
  }

  // Segments: each live block, with its stack where it was allocated while
  // recording; q is gone.
  const cca::SegmentInfo* sp = segment_at(s, p);
  ASSERT_NE(sp, nullptr);
  EXPECT_EQ(sp->device, kDevice);
  EXPECT_EQ(sp->total_size, 3 * MiB + 512) << "rounded to 512 bytes";
  EXPECT_EQ(sp->requested_size, 3 * MiB + 100);
  EXPECT_EQ(sp->stream, stream);
  EXPECT_TRUE(sp->is_large);
  ASSERT_EQ(sp->blocks.size(), 1u);
  EXPECT_TRUE(sp->blocks[0].allocated);
  EXPECT_EQ(sp->blocks[0].size, 3 * MiB + 512);
  EXPECT_EQ(stack_number(sp->blocks[0].context_when_allocated), first_stack);
  const cca::SegmentInfo* sb = segment_at(s, before);
  ASSERT_NE(sb, nullptr) << "blocks from before the recording are in the snapshot";
  EXPECT_FALSE(sb->is_large);
  EXPECT_EQ(stack_number(sb->blocks[0].context_when_allocated), 0);
  EXPECT_EQ(segment_at(s, q), nullptr);
  for (std::size_t i = 1; i < s.segments.size(); ++i)
    EXPECT_LT(s.segments[i - 1].address, s.segments[i].address);

  // The block's bytes are intact through the history's bookkeeping.
  auto* bytes = static_cast<std::uint8_t*>(p);
  for (std::size_t i = 0; i < 3 * MiB + 100; i += 4093) ASSERT_EQ(bytes[i], 0x6b) << i;
  a.raw_delete(p);
  a.raw_delete(before);
  EXPECT_EQ(trace_of(api().snapshot()).size(), 8u)
      << "two frees more, each requested and completed";
}

TEST_F(TorchHistory, StacksAreKeptAsRecordContextSays) {
  MemlakeAllocator& a = allocator();
  record(100, cca::RecordContext::STATE);
  void* p = a.raw_alloc_with_stream(MiB, nullptr);
  a.raw_delete(a.raw_alloc_with_stream(MiB, nullptr));
  cca::SnapshotInfo s = api().snapshot();
  for (const Entry& e : trace_of(s))
    EXPECT_EQ(e.context_, nullptr) << "STATE: no stack in the trace";
  ASSERT_NE(segment_at(s, p), nullptr);
  EXPECT_NE(segment_at(s, p)->blocks[0].context_when_allocated, nullptr)
      << "STATE: the live block's stack";
  a.raw_delete(p);

  record(100, cca::RecordContext::ALLOC, /*clear=*/true);
  a.raw_delete(a.raw_alloc_with_stream(MiB, nullptr));
  s = api().snapshot();
  ASSERT_EQ(trace_of(s).size(), 3u) << "the history was cleared";
  EXPECT_NE(trace_of(s)[0].context_, nullptr) << "ALLOC: the allocation's stack";
  EXPECT_EQ(trace_of(s)[2].context_, nullptr) << "ALLOC: not the free's";

  record(100, cca::RecordContext::NEVER, /*clear=*/true);
  a.raw_delete(a.raw_alloc_with_stream(MiB, nullptr));
  for (const Entry& e : trace_of(api().snapshot())) EXPECT_EQ(e.context_, nullptr);
}

TEST_F(TorchHistory, TheTraceKeepsTheLastEntriesAndSkipsWhatItIsTold) {
  MemlakeAllocator& a = allocator();
  record(5, cca::RecordContext::NEVER, /*clear=*/true);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(a.raw_alloc_with_stream(4096 * (i + 1), nullptr));
  std::vector<Entry> trace = trace_of(api().snapshot());
  ASSERT_EQ(trace.size(), 4u);
  a.raw_delete(blocks[0]);
  trace = trace_of(api().snapshot());
  ASSERT_EQ(trace.size(), 5u) << "at most 5 entries";
  EXPECT_EQ(trace.front().addr_, reinterpret_cast<std::size_t>(blocks[1]))
      << "the oldest went first";
  EXPECT_EQ(trace.back().action_, Entry::FREE_COMPLETED);

  record(100, cca::RecordContext::NEVER, /*clear=*/true, {"free_requested", "free_completed"});
  a.raw_delete(blocks[1]);
  void* p = a.raw_alloc_with_stream(8192, nullptr);
  trace = trace_of(api().snapshot());
  ASSERT_EQ(trace.size(), 1u) << "frees skipped";
  EXPECT_EQ(trace[0].action_, Entry::ALLOC);
  EXPECT_EQ(trace[0].addr_, reinterpret_cast<std::size_t>(p));
  EXPECT_THROW(record(100, cca::RecordContext::NEVER, false, {"no_such_action"}), c10::Error);

  // Stopping drops the history; nothing is recorded until it starts again.
  api().recordHistory(false, nullptr, 0, cca::RecordContext::NEVER, false, {});
  EXPECT_FALSE(api().isHistoryEnabled());
  a.raw_delete(p);
  EXPECT_TRUE(trace_of(api().snapshot()).empty());
  EXPECT_TRUE(trace_of(api().snapshot({0, 0}, /*include_traces=*/false)).empty());
  for (std::size_t i = 2; i < blocks.size(); ++i) a.raw_delete(blocks[i]);
}

TEST_F(TorchHistory, ASnapshotOfAPoolHoldsThatPoolsBlocks) {
  MemlakeAllocator& a = allocator();
  const TorchPool pool{0, 902};
  record(100, cca::RecordContext::STATE, /*clear=*/true);
  void* outside = a.raw_alloc_with_stream(MiB, nullptr);
  a.beginAllocateToPool(kDevice, pool, [](cudaStream_t) { return true; });
  void* inside = a.raw_alloc_with_stream(2 * MiB, nullptr);
  a.endAllocateToPool(kDevice, pool);
  cca::SnapshotInfo s = api().snapshot(pool);
  ASSERT_EQ(s.segments.size(), 1u);
  EXPECT_EQ(s.segments[0].address, reinterpret_cast<std::size_t>(inside));
  EXPECT_EQ(s.segments[0].owner_private_pool_id, pool);
  EXPECT_NE(s.segments[0].blocks[0].context_when_allocated, nullptr);
  s = api().snapshot();
  EXPECT_NE(segment_at(s, inside), nullptr);
  EXPECT_NE(segment_at(s, outside), nullptr);

  // Graph trees put a pool back: the history sees the blocks the restore
  // frees and allocates, so the trace stays a sequence of allocations and
  // their frees.
  auto checkpoint = a.getCheckpointState(kDevice, pool);
  a.raw_delete(inside);
  record(100, cca::RecordContext::NEVER, /*clear=*/true);
  {
    auto delta = a.setCheckpointPoolState(kDevice, checkpoint);
    ASSERT_EQ(delta.dataptrs_allocd.size(), 1u);
    std::vector<Entry> trace = trace_of(api().snapshot());
    ASSERT_EQ(trace.size(), 1u);
    EXPECT_EQ(trace[0].action_, Entry::ALLOC);
    EXPECT_EQ(trace[0].addr_, reinterpret_cast<std::size_t>(inside));
    EXPECT_EQ(trace[0].size_, 2 * MiB);
  }
  std::vector<Entry> trace = trace_of(api().snapshot());
  ASSERT_EQ(trace.size(), 3u) << "the restored block freed when its DataPtr went";
  EXPECT_EQ(trace[2].action_, Entry::FREE_COMPLETED);
  EXPECT_EQ(trace[2].addr_, reinterpret_cast<std::size_t>(inside));
  a.raw_delete(outside);
  a.releasePool(kDevice, pool);
}

TEST_F(TorchHistory, ARefusedRequestIsAnOomEntryAndTheAllocatorGoesOn) {
  MemlakeAllocator& a = allocator();
  record(100, cca::RecordContext::ALLOC, /*clear=*/true);
  std::size_t available = 0;
  ASSERT_EQ(memlake_largest_available(kDevice, &available), 0);
  EXPECT_THROW(a.raw_alloc_with_stream(std::size_t{1} << 40, nullptr), std::exception)
      << "a terabyte";
  void* p = a.raw_alloc_with_stream(MiB, nullptr);
  const std::vector<Entry> trace = trace_of(api().snapshot());
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace[0].action_, Entry::OOM);
  EXPECT_EQ(trace[0].size_, std::size_t{1} << 40);
  EXPECT_EQ(trace[0].addr_, available) << "what memlake could still serve";
  EXPECT_NE(trace[0].context_, nullptr);
  EXPECT_EQ(trace[1].action_, Entry::ALLOC);
  a.raw_delete(p);
}

std::shared_ptr<c10::GatheredContext> failing_recorder() {
  throw std::runtime_error("the recorder failed");
}

TEST_F(TorchHistory, ARecorderThatFailsLosesEntriesNotBlocks) {
  MemlakeAllocator& a = allocator();
  api().recordHistory(true, &failing_recorder, 100, cca::RecordContext::ALL, true, {});
  const int64_t live = stats().live_blocks.current;
  auto* p = static_cast<std::uint8_t*>(a.raw_alloc_with_stream(MiB, nullptr));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(stats().live_blocks.current, live + 1);
  std::memset(p, 0x3c, MiB);
  for (std::size_t i = 0; i < MiB; i += 4093) ASSERT_EQ(p[i], 0x3c) << i;
  a.raw_delete(p);  // a DataPtr's deleter: it must not throw
  EXPECT_EQ(stats().live_blocks.current, live);
  EXPECT_TRUE(trace_of(api().snapshot()).empty()) << "the entries were left out";
}

TEST_F(TorchHistory, RecordingNeedsARecorderForStacks) {
  EXPECT_THROW(api().recordHistory(true, nullptr, 10, cca::RecordContext::ALLOC, false, {}),
               c10::Error);
  EXPECT_FALSE(api().isHistoryEnabled());
}

}  // namespace
