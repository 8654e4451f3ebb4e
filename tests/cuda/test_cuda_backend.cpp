// Tests of CudaBackend on a GPU: the same VMM contract as HostBackend's
// (bytes through two mappings of one chunk, stitched ranges, capacity), error
// messages that name the driver call and its CUresult, the caller's current
// device left alone, and streams/events. Every test skips without a GPU,
// except the one that checks construction fails cleanly there.
#if MEMLAKE_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/make_backend.hpp"
#include "memlake/config.hpp"
#include "memlake/errors.hpp"

namespace memlake {
namespace {

using ::testing::HasSubstr;

#define SKIP_WITHOUT_GPU() \
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no GPU"

std::vector<unsigned char> pattern(std::size_t size, unsigned seed) {
  std::vector<unsigned char> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
  return v;
}

void to_device(DevicePtr va, const std::vector<unsigned char>& v) {
  ASSERT_EQ(cudaMemcpy(reinterpret_cast<void*>(va), v.data(), v.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
}

std::vector<unsigned char> from_device(DevicePtr va, std::size_t size) {
  std::vector<unsigned char> v(size);
  EXPECT_EQ(cudaMemcpy(v.data(), reinterpret_cast<void*>(va), size, cudaMemcpyDeviceToHost),
            cudaSuccess);
  return v;
}

int current_device() {
  int d = -1;
  EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
  return d;
}

class Gate {
 public:
  void wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  static void job(void* self) { static_cast<Gate*>(self)->wait(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(CudaBackend, ConstructionFailsCleanlyWithoutAGpu) {
  if (CudaBackend::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(CudaBackend::device_count(), 0);
  try {
    CudaBackend b;
    ADD_FAILURE() << "constructed without a GPU";
  } catch (const backend_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no CUDA device"));
  }
}

TEST(CudaBackend, ReportsGranularityAndCapacity) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  EXPECT_STREQ(b.name(), "cuda");
  EXPECT_EQ(b.device(), 0);
  const std::size_t g = b.granularity();
  EXPECT_GT(g, 0u);
  EXPECT_EQ(g & (g - 1), 0u) << "granularity is a power of two";
  EXPECT_GT(b.capacity(), 0u);
  EXPECT_LE(b.capacity(), b.total_memory()) << "default: free memory at start";
  EXPECT_EQ(b.physical_bytes(), 0u);

  CudaBackendOptions o;
  o.capacity_fraction = 0.25;
  CudaBackend quarter(o);
  EXPECT_EQ(quarter.capacity(),
            static_cast<std::size_t>(0.25 * static_cast<double>(quarter.total_memory())));
  o.capacity = 10 * g;
  EXPECT_EQ(CudaBackend(o).capacity(), 10 * g) << "an explicit capacity wins";
}

TEST(CudaBackend, OneChunkAtTwoAddressesShowsTheSameBytes) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  const std::size_t g = b.granularity();
  ChunkHandle c = 0;
  DevicePtr va = 0, vb = 0;
  ASSERT_EQ(b.create_chunk(g, &c), Status::ok) << b.last_error();
  EXPECT_EQ(b.physical_bytes(), g);
  ASSERT_EQ(b.reserve(g, &va), Status::ok) << b.last_error();
  ASSERT_EQ(b.reserve(g, &vb), Status::ok) << b.last_error();
  EXPECT_EQ(va % g, 0u);
  ASSERT_EQ(b.map(va, g, c), Status::ok) << b.last_error();
  ASSERT_EQ(b.map(vb, g, c), Status::ok) << b.last_error();
  ASSERT_EQ(b.set_access(va, g), Status::ok) << b.last_error();
  ASSERT_EQ(b.set_access(vb, g), Status::ok) << b.last_error();

  const auto data = pattern(g, 5);
  to_device(va, data);
  EXPECT_EQ(from_device(vb, g), data);

  EXPECT_EQ(b.unmap(va, g), Status::ok) << b.last_error();
  EXPECT_EQ(b.unmap(vb, g), Status::ok) << b.last_error();
  EXPECT_EQ(b.release_chunk(c), Status::ok) << b.last_error();
  EXPECT_EQ(b.physical_bytes(), 0u);
  EXPECT_EQ(b.unreserve(va, g), Status::ok) << b.last_error();
  EXPECT_EQ(b.unreserve(vb, g), Status::ok) << b.last_error();
}

// peer_access:all opens mappings to every device that can reach this one
// (none on a one-GPU machine: the mapping works as before); a device that
// does not exist is an error naming it.
TEST(CudaBackend, PeerAccessAllGrantsReachablePeersAndAMissingDeviceIsNamed) {
  SKIP_WITHOUT_GPU();
  const int n = CudaBackend::device_count();
  CudaBackendOptions all;
  all.peer_access = DeviceSet::kAll;
  CudaBackend b(all);
  for (int p : b.peers()) {
    EXPECT_NE(p, b.device());
    int can = 0;
    ASSERT_EQ(cudaDeviceCanAccessPeer(&can, p, b.device()), cudaSuccess);
    EXPECT_EQ(can, 1);
  }
  if (n == 1) {
    EXPECT_TRUE(b.peers().empty());
  }
  const std::size_t g = b.granularity();
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(g, &c), Status::ok) << b.last_error();
  ASSERT_EQ(b.reserve(g, &va), Status::ok) << b.last_error();
  ASSERT_EQ(b.map(va, g, c), Status::ok) << b.last_error();
  ASSERT_EQ(b.set_access(va, g), Status::ok) << b.last_error();
  const auto data = pattern(g, 9);
  to_device(va, data);
  EXPECT_EQ(from_device(va, g), data);
  EXPECT_EQ(b.unmap(va, g), Status::ok) << b.last_error();
  EXPECT_EQ(b.release_chunk(c), Status::ok) << b.last_error();
  EXPECT_EQ(b.unreserve(va, g), Status::ok) << b.last_error();

  CudaBackendOptions missing;
  missing.peer_access = std::uint64_t{1} << n;  // one past the last device
  try {
    CudaBackend bad(missing);
    ADD_FAILURE() << "a peer device that does not exist was accepted";
  } catch (const backend_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("peer_access names device " + std::to_string(n)));
  }
  CudaBackendOptions self;
  self.peer_access = std::uint64_t{1} << b.device();  // the own device is skipped
  EXPECT_TRUE(CudaBackend(self).peers().empty());
}

TEST(CudaBackend, StitchedRangeShowsBytesOfEachChunk) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  const std::size_t g = b.granularity();
  ChunkHandle c1 = 0, c2 = 0;
  DevicePtr v1 = 0, v2 = 0, s = 0;
  ASSERT_EQ(b.create_chunk(g, &c1), Status::ok);
  ASSERT_EQ(b.create_chunk(2 * g, &c2), Status::ok);
  ASSERT_EQ(b.reserve(g, &v1), Status::ok);
  ASSERT_EQ(b.reserve(2 * g, &v2), Status::ok);
  ASSERT_EQ(b.reserve(3 * g, &s), Status::ok);
  ASSERT_EQ(b.map(v1, g, c1), Status::ok);
  ASSERT_EQ(b.map(v2, 2 * g, c2), Status::ok);
  ASSERT_EQ(b.set_access(v1, g), Status::ok);
  ASSERT_EQ(b.set_access(v2, 2 * g), Status::ok);
  ASSERT_EQ(b.map(s, g, c1), Status::ok);
  ASSERT_EQ(b.map(s + g, 2 * g, c2), Status::ok);
  ASSERT_EQ(b.set_access(s, 3 * g), Status::ok) << "one call over the stitched range";

  const auto data = pattern(3 * g, 9);
  to_device(s, data);
  const auto first = from_device(v1, g);
  const auto second = from_device(v2, 2 * g);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), data.begin()));
  EXPECT_TRUE(std::equal(second.begin(), second.end(), data.begin() + static_cast<long>(g)));

  EXPECT_EQ(b.unmap(s, 3 * g), Status::ok) << b.last_error();
  EXPECT_EQ(b.unmap(v1, g), Status::ok);
  EXPECT_EQ(b.unmap(v2, 2 * g), Status::ok);
  EXPECT_EQ(b.release_chunk(c1), Status::ok);
  EXPECT_EQ(b.release_chunk(c2), Status::ok);
  EXPECT_EQ(b.unreserve(s, 3 * g), Status::ok);
  EXPECT_EQ(b.unreserve(v1, g), Status::ok);
  EXPECT_EQ(b.unreserve(v2, 2 * g), Status::ok);
}

TEST(CudaBackend, ReleasedChunkStaysReadableWhileMapped) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  const std::size_t g = b.granularity();
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(g, &c), Status::ok);
  ASSERT_EQ(b.reserve(g, &va), Status::ok);
  ASSERT_EQ(b.map(va, g, c), Status::ok);
  ASSERT_EQ(b.set_access(va, g), Status::ok);
  const auto data = pattern(g, 1);
  to_device(va, data);
  ASSERT_EQ(b.release_chunk(c), Status::ok) << b.last_error();
  EXPECT_EQ(from_device(va, g), data);
  EXPECT_EQ(b.unmap(va, g), Status::ok);
  EXPECT_EQ(b.unreserve(va, g), Status::ok);
}

TEST(CudaBackend, CapacityGivesOutOfMemoryUntilAChunkIsReleased) {
  SKIP_WITHOUT_GPU();
  CudaBackendOptions o;
  o.capacity = 3 * CudaBackend().granularity();
  CudaBackend b(o);
  const std::size_t g = b.granularity();
  ChunkHandle c1 = 0, c2 = 0;
  ASSERT_EQ(b.create_chunk(2 * g, &c1), Status::ok);
  EXPECT_EQ(b.create_chunk(2 * g, &c2), Status::out_of_memory);
  EXPECT_THAT(b.last_error(), HasSubstr("out of memory"));
  EXPECT_EQ(b.physical_bytes(), 2 * g);
  ASSERT_EQ(b.release_chunk(c1), Status::ok);
  EXPECT_EQ(b.create_chunk(2 * g, &c2), Status::ok) << b.last_error();
  EXPECT_EQ(b.release_chunk(c2), Status::ok);
}

TEST(CudaBackend, DriverOutOfMemoryIsReportedAsOutOfMemory) {
  SKIP_WITHOUT_GPU();
  CudaBackendOptions o;
  o.capacity = std::size_t{1} << 50;  // let the request reach the driver
  CudaBackend b(o);
  const std::size_t g = b.granularity();
  const std::size_t too_big = (b.total_memory() / g + 1) * g * 2;
  ChunkHandle c = 0;
  EXPECT_EQ(b.create_chunk(too_big, &c), Status::out_of_memory);
  EXPECT_THAT(b.last_error(), HasSubstr("cuMemCreate"));
  EXPECT_THAT(b.last_error(), HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"));
  EXPECT_EQ(b.physical_bytes(), 0u) << "a failed creation gives its bytes back";
}

TEST(CudaBackend, ErrorsNameTheCallAndTheResult) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  const std::size_t g = b.granularity();
  DevicePtr va = 0;
  ChunkHandle c = 0;
  ASSERT_EQ(b.reserve(2 * g, &va), Status::ok);
  ASSERT_EQ(b.create_chunk(g, &c), Status::ok);

  // (Unmapping a reserved but unmapped range succeeds on the H200's driver;
  // an address outside every reservation does not.)
  EXPECT_NE(b.unmap(DevicePtr{g}, g), Status::ok) << "not a reserved address";
  EXPECT_THAT(b.last_error(), HasSubstr("cuMemUnmap"));
  EXPECT_THAT(b.last_error(), HasSubstr("CUDA_ERROR_"));
  EXPECT_NE(b.set_access(va, g), Status::ok);
  EXPECT_THAT(b.last_error(), HasSubstr("cuMemSetAccess"));
  EXPECT_THAT(b.last_error(), HasSubstr("CUDA_ERROR_"));
  EXPECT_NE(b.unreserve(va + g, g), Status::ok) << "not the reserved start";
  EXPECT_THAT(b.last_error(), HasSubstr("cuMemAddressFree"));
  EXPECT_THAT(b.last_error(), HasSubstr("CUDA_ERROR_"));

  EXPECT_EQ(b.map(va + 4096, g, c), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("not aligned"));
  EXPECT_EQ(b.map(va, 2 * g, c), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("mapped whole"));
  EXPECT_EQ(b.release_chunk(c + 12345), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unknown chunk handle"));
  EXPECT_EQ(b.create_chunk(g + 1, &c), Status::invalid_argument);

  ASSERT_EQ(b.map(va, g, c), Status::ok);
  EXPECT_NE(b.map(va, g, c), Status::ok) << "already mapped there";
  EXPECT_THAT(b.last_error(), HasSubstr("cuMemMap"));
  EXPECT_EQ(b.unmap(va, g), Status::ok);
  EXPECT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.unreserve(va, 2 * g), Status::ok);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "failures leave no runtime error behind";
}

// A full VMM and stream cycle; expects the current device never to move.
void exercise(CudaBackend& b, int expected_device) {
  const std::size_t g = b.granularity();
  ChunkHandle c = 0;
  DevicePtr va = 0;
  StreamHandle s = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b.create_chunk(g, &c), Status::ok) << b.last_error();
  EXPECT_EQ(current_device(), expected_device);
  ASSERT_EQ(b.reserve(g, &va), Status::ok);
  ASSERT_EQ(b.map(va, g, c), Status::ok);
  ASSERT_EQ(b.set_access(va, g), Status::ok);
  EXPECT_EQ(current_device(), expected_device);
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  ASSERT_EQ(b.event_create(&e), Status::ok);
  ASSERT_EQ(b.event_record(e, s), Status::ok);
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::ok);
  EXPECT_EQ(current_device(), expected_device);
  ASSERT_EQ(b.event_destroy(e), Status::ok);
  ASSERT_EQ(b.stream_destroy(s), Status::ok);
  ASSERT_EQ(b.unmap(va, g), Status::ok);
  ASSERT_EQ(b.release_chunk(c), Status::ok);
  ASSERT_EQ(b.unreserve(va, g), Status::ok);
  EXPECT_EQ(current_device(), expected_device);
}

TEST(CudaBackend, CallsLeaveTheCurrentDeviceAlone) {
  SKIP_WITHOUT_GPU();
  const int n = CudaBackend::device_count();
  const int target = n - 1;
  const int caller = 0;
  ASSERT_EQ(cudaSetDevice(caller), cudaSuccess);
  CudaBackendOptions o;
  o.device = target;
  CudaBackend b(o);
  EXPECT_EQ(current_device(), caller) << "the constructor moved the current device";
  exercise(b, caller);
  // A fresh thread, which has no context of its own yet.
  std::thread([&] {
    const int before = current_device();
    exercise(b, before);
  }).join();
  if (n < 2) GTEST_LOG_(INFO) << "one GPU: the caller already uses the backend's device";
}

TEST(CudaBackend, EventIsPendingWhileEarlierWorkRuns) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  StreamHandle sa = nullptr, sb = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b.stream_create(&sa), Status::ok);
  ASSERT_EQ(b.stream_create(&sb), Status::ok);
  ASSERT_EQ(b.event_create(&e), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::ok) << "never recorded counts as complete";

  Gate gate;
  std::atomic<bool> b_ran{false};
  ASSERT_EQ(b.launch_host_func(sa, Gate::job, &gate), Status::ok);
  ASSERT_EQ(b.event_record(e, sa), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::not_ready);
  ASSERT_EQ(b.stream_wait_event(sb, e), Status::ok) << "returns without waiting";
  ASSERT_EQ(b.launch_host_func(
                sb, [](void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); }, &b_ran),
            Status::ok);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(b_ran.load()) << "stream B ran before A's event completed";
  EXPECT_EQ(b.event_query(e), Status::not_ready);
  gate.open();
  ASSERT_EQ(b.stream_synchronize(sb), Status::ok);
  EXPECT_TRUE(b_ran.load());
  EXPECT_EQ(b.event_query(e), Status::ok);
  EXPECT_EQ(b.event_destroy(e), Status::ok);
  EXPECT_EQ(b.stream_destroy(sa), Status::ok);
  EXPECT_EQ(b.stream_destroy(sb), Status::ok);
}

TEST(CudaBackend, StreamIsCapturingFollowsGraphCapture) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  StreamHandle s = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  bool capturing = true;
  ASSERT_EQ(b.stream_is_capturing(s, &capturing), Status::ok);
  EXPECT_FALSE(capturing);
  auto cs = static_cast<cudaStream_t>(s);
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(b.stream_is_capturing(s, &capturing), Status::ok);
  EXPECT_TRUE(capturing);
  // VMM calls are legal during capture and leave it valid.
  ChunkHandle c = 0;
  EXPECT_EQ(b.create_chunk(b.granularity(), &c), Status::ok) << b.last_error();
  EXPECT_EQ(b.release_chunk(c), Status::ok);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  ASSERT_EQ(b.stream_is_capturing(s, &capturing), Status::ok);
  EXPECT_FALSE(capturing);
  EXPECT_EQ(b.stream_destroy(s), Status::ok);
}

TEST(CudaBackend, ManyThreadsCreateAndMapConcurrently) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  const std::size_t g = b.granularity();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < 10; ++r) {
        ChunkHandle c = 0;
        DevicePtr va = 0;
        const bool ok = b.create_chunk(g, &c) == Status::ok && b.reserve(g, &va) == Status::ok &&
                        b.map(va, g, c) == Status::ok && b.set_access(va, g) == Status::ok &&
                        cudaMemset(reinterpret_cast<void*>(va), r, g) == cudaSuccess &&
                        b.unmap(va, g) == Status::ok && b.release_chunk(c) == Status::ok &&
                        b.unreserve(va, g) == Status::ok;
        if (!ok) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(b.physical_bytes(), 0u);
}

TEST(CudaBackend, FactoryPicksCudaWhenAGpuIsPresent) {
  SKIP_WITHOUT_GPU();
  Config cfg;
  EXPECT_STREQ(make_backend(cfg)->name(), "cuda");
  cfg.backend = BackendKind::cuda;
  cfg.capacity = std::size_t{64} << 20;
  auto b = make_backend(cfg);
  EXPECT_STREQ(b->name(), "cuda");
  EXPECT_EQ(b->capacity(), std::size_t{64} << 20);
  cfg.backend = BackendKind::host;
  EXPECT_STREQ(make_backend(cfg)->name(), "host");
}

}  // namespace
}  // namespace memlake

#endif  // MEMLAKE_HAVE_CUDA
