// CudaBackend beyond the backend contract (which tests/suites/ runs over it
// and its adaptor stacks): its options (capacity fraction, peer access),
// the driver's out of memory, error messages that name the driver call and
// its CUresult, the caller's current device left alone, graph capture, and
// make_backend's choice. Every test skips without a GPU, except the one that
// checks construction fails cleanly there.
#if MEMLAKE_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
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

TEST(CudaBackend, CapacityIsFreeMemoryAFractionOrExplicit) {
  SKIP_WITHOUT_GPU();
  CudaBackend b;
  EXPECT_STREQ(b.name(), "cuda");
  EXPECT_EQ(b.device(), 0);
  const std::size_t g = b.granularity();
  EXPECT_LE(b.capacity(), b.total_memory()) << "default: free memory at start";

  CudaBackendOptions o;
  o.capacity_fraction = 0.25;
  CudaBackend quarter(o);
  EXPECT_EQ(quarter.capacity(),
            static_cast<std::size_t>(0.25 * static_cast<double>(quarter.total_memory())));
  o.capacity = 10 * g;
  EXPECT_EQ(CudaBackend(o).capacity(), 10 * g) << "an explicit capacity wins";
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

  EXPECT_EQ(b.create_chunk(g + 1, &c), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("cuda: create_chunk"));

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
