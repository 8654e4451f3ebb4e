// memlake::cuda_resource (memlake/cuda_mr.hpp) as CCCL sees it: the
// concepts it must satisfy, checked at compile time; value semantics and the
// stream-ordered calls through a type-erased cuda::mr reference over the
// HostBackend (runs everywhere); the synchronous calls and kernels over the
// CudaBackend (skips without a GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <cuda/std/version>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/config.hpp"
#include "memlake/cuda_mr.hpp"
#include "memlake/errors.hpp"

namespace memlake {
namespace {

using cuda::mr::device_accessible;

static_assert(cuda::mr::resource_with<cuda_resource, device_accessible>);
#if CCCL_VERSION >= 3001000
static_assert(cuda::mr::synchronous_resource_with<cuda_resource, device_accessible>);
using stream_ordered_ref = cuda::mr::resource_ref<device_accessible>;
#else
static_assert(cuda::mr::async_resource_with<cuda_resource, device_accessible>);
using stream_ordered_ref = cuda::mr::async_resource_ref<device_accessible>;
#endif
static_assert(std::is_nothrow_copy_constructible_v<cuda_resource>);
static_assert(std::is_nothrow_copy_assignable_v<cuda_resource>);

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Stream-ordered calls through the type-erased reference, whichever CCCL.
void* ordered_allocate(stream_ordered_ref ref, cuda::stream_ref s, std::size_t bytes) {
#if CCCL_VERSION >= 3001000
  return ref.allocate(s, bytes, cuda_resource::alignment);
#else
  return ref.allocate_async(bytes, cuda_resource::alignment, s);
#endif
}

void ordered_deallocate(stream_ordered_ref ref, cuda::stream_ref s, void* p, std::size_t bytes) {
#if CCCL_VERSION >= 3001000
  ref.deallocate(s, p, bytes, cuda_resource::alignment);
#else
  ref.deallocate_async(p, bytes, cuda_resource::alignment, s);
#endif
}

cuda::stream_ref stream_ref_of(Stream s) {
  return cuda::stream_ref{static_cast<cudaStream_t>(s)};
}

Config host_config() {
  return Config::parse("backend:host,capacity:256M,worker:inline");
}

TEST(CudaMr, CopiesReferToOneAllocatorAndCompareEqual) {
  Allocator a(host_config()), b(host_config());
  const cuda_resource ra(a), rb(b);
  cuda_resource copy = ra;
  EXPECT_TRUE(copy == ra);
  EXPECT_FALSE(copy != ra);
  EXPECT_TRUE(ra != rb);
  EXPECT_EQ(&copy.allocator(), &a);
  copy = rb;
  EXPECT_TRUE(copy == rb);
}

TEST(CudaMr, StreamOrderedBlocksThroughAResourceRefReadBack) {
  Allocator alloc(host_config());
  cuda_resource mr(alloc);
  stream_ordered_ref ref{mr};
  const Stream stream = alloc.create_stream();
  const cuda::stream_ref s = stream_ref_of(stream);
  const std::vector<std::size_t> sizes = {1, 511, 512, 4096, 3 * kMiB + 7, 17 * kMiB};
  std::vector<unsigned char*> blocks;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto* p = static_cast<unsigned char*>(ordered_allocate(ref, s, sizes[i]));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % cuda_resource::alignment, 0u) << sizes[i];
    std::memset(p, 0x30 + static_cast<int>(i), sizes[i]);  // host backend: the process's memory
    blocks.push_back(p);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::vector<unsigned char> want(sizes[i], static_cast<unsigned char>(0x30 + i));
    EXPECT_EQ(std::memcmp(blocks[i], want.data(), sizes[i]), 0) << sizes[i];
  }
  std::size_t total = 0;
  for (std::size_t n : sizes) total += n;
  EXPECT_EQ(alloc.stats().requested_bytes.current, static_cast<std::int64_t>(total));
  for (std::size_t i = 0; i < sizes.size(); ++i) ordered_deallocate(ref, s, blocks[i], sizes[i]);
  EXPECT_EQ(alloc.stats().requested_bytes.current, 0);
  EXPECT_EQ(alloc.stats().frees.current, static_cast<std::int64_t>(sizes.size()));
  alloc.destroy_stream(stream);
}

TEST(CudaMr, AnAlignmentAboveTheBlocksIsRefused) {
  Allocator alloc(host_config());
  cuda_resource mr(alloc);
  const cuda::stream_ref s = stream_ref_of(alloc.create_stream());
  for (std::size_t align : {std::size_t{1024}, std::size_t{3}, std::size_t{0}}) {
    try {
      (void)mr.allocate(s, 4096, align);
      ADD_FAILURE() << "alignment " << align << " was accepted";
    } catch (const misuse& e) {
      EXPECT_NE(std::string(e.what()).find("alignment " + std::to_string(align)), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(alloc.stats().allocs.current, 0);
  void* p = mr.allocate(s, 4096, 256);
  mr.deallocate(s, p, 4096, 256);
}

TEST(CudaMr, OutOfMemoryIsMemlakesException) {
  Allocator alloc(host_config());
  cuda_resource mr(alloc);
  const cuda::stream_ref s = stream_ref_of(alloc.create_stream());
  EXPECT_THROW((void)mr.allocate(s, std::size_t{1} << 30), out_of_memory);
}

TEST(CudaMr, ABadFreeIsReportedNotThrown) {
  Allocator alloc(host_config());
  cuda_resource mr(alloc);
  const cuda::stream_ref s = stream_ref_of(alloc.create_stream());
  void* p = mr.allocate(s, kMiB);
  testing::internal::CaptureStderr();
  mr.deallocate(s, static_cast<char*>(p) + 512, kMiB);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("memlake::cuda_resource: deallocate:"), std::string::npos) << err;
  EXPECT_EQ(alloc.stats().misuse_errors.current, 1);
  EXPECT_EQ(alloc.stats().requested_bytes.current, static_cast<std::int64_t>(kMiB));
  mr.deallocate(s, p, kMiB);
  EXPECT_EQ(alloc.stats().requested_bytes.current, 0);
}

// ---- on a GPU ---------------------------------------------------------------

#define SKIP_WITHOUT_GPU() \
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no GPU"

#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

__global__ void fill_index(std::uint32_t* p, std::size_t n, std::uint32_t salt) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    p[i] = static_cast<std::uint32_t>(i) ^ salt;
}

__global__ void count_mismatches(const std::uint32_t* p, std::size_t n, std::uint32_t salt,
                                 unsigned long long* mismatches) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    if (p[i] != (static_cast<std::uint32_t>(i) ^ salt)) atomicAdd(mismatches, 1ull);
}

TEST(CudaMrGpu, SynchronousBlocksAreReadyForEveryStream) {
  SKIP_WITHOUT_GPU();
  Allocator alloc(Config::parse("backend:cuda"));
  cuda_resource mr(alloc);
  cudaStream_t other = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  const std::size_t n = 64 * kMiB / sizeof(std::uint32_t);
  auto* p = static_cast<std::uint32_t*>(mr.allocate_sync(n * sizeof(std::uint32_t), 256));
  auto* bad = static_cast<unsigned long long*>(mr.allocate_sync(sizeof(unsigned long long)));
  ASSERT_CUDA(cudaMemsetAsync(bad, 0, sizeof *bad, other));
  fill_index<<<264, 256, 0, other>>>(p, n, 0xA5A5u);
  count_mismatches<<<264, 256, 0, other>>>(p, n, 0xA5A5u, bad);
  unsigned long long mismatches = 1;
  ASSERT_CUDA(cudaMemcpyAsync(&mismatches, bad, sizeof mismatches, cudaMemcpyDeviceToHost, other));
  ASSERT_CUDA(cudaStreamSynchronize(other));
  EXPECT_EQ(mismatches, 0u);
  mr.deallocate_sync(p, n * sizeof(std::uint32_t), 256);
  mr.deallocate_sync(bad, sizeof(unsigned long long));
  ASSERT_CUDA(cudaStreamDestroy(other));
  EXPECT_EQ(alloc.stats().requested_bytes.current, 0);
}

TEST(CudaMrGpu, StreamOrderedBlocksReusedOnTheirStreamKeepTheirBytes) {
  SKIP_WITHOUT_GPU();
  Allocator alloc(Config::parse("backend:cuda"));
  cuda_resource mr(alloc);
  stream_ordered_ref ref{mr};
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const cuda::stream_ref s{stream};
  auto* bad =
      static_cast<unsigned long long*>(ordered_allocate(ref, s, sizeof(unsigned long long)));
  ASSERT_CUDA(cudaMemsetAsync(bad, 0, sizeof *bad, stream));
  for (std::uint32_t round = 0; round < 16; ++round) {
    const std::size_t n = (std::size_t{1} << (16 + round % 8)) + round * 1000;
    auto* p = static_cast<std::uint32_t*>(ordered_allocate(ref, s, n * sizeof(std::uint32_t)));
    fill_index<<<264, 256, 0, stream>>>(p, n, round);
    count_mismatches<<<264, 256, 0, stream>>>(p, n, round, bad);
    ordered_deallocate(ref, s, p, n * sizeof(std::uint32_t));  // reused next round, in order
  }
  unsigned long long mismatches = 1;
  ASSERT_CUDA(cudaMemcpyAsync(&mismatches, bad, sizeof mismatches, cudaMemcpyDeviceToHost, stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(mismatches, 0u);
  ordered_deallocate(ref, s, bad, sizeof(unsigned long long));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  ASSERT_CUDA(cudaStreamDestroy(stream));
  EXPECT_EQ(alloc.stats().host_waits.current, 0);
}

}  // namespace
}  // namespace memlake
