// Two-GPU tests of peer_access: a kernel on device 1 reads and writes
// memlake blocks of device 0 (a block of its own chunks and a stitched one)
// through the mappings memlake made, with access granted to device 1 in the
// same SetAccess call. Every test skips with fewer than two GPUs, or where
// device 1 cannot reach device 0 peer to peer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "stitched_block.hpp"

namespace memlake {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

#define SKIP_WITHOUT_TWO_PEERS()                                                \
  do {                                                                          \
    if (CudaBackend::device_count() < 2) GTEST_SKIP() << "fewer than two GPUs"; \
    int can_ = 0;                                                               \
    ASSERT_CUDA(cudaDeviceCanAccessPeer(&can_, 1, 0));                          \
    if (!can_) GTEST_SKIP() << "device 1 cannot access device 0 peer to peer";  \
  } while (0)

// dst[i] = src[i] ^ mask: run on one device, src or dst on the other.
__global__ void copy_xor(const std::uint32_t* src, std::uint32_t* dst, std::size_t n,
                         std::uint32_t mask) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = src[i] ^ mask;
}

std::vector<std::uint32_t> pattern(std::size_t words, std::uint32_t seed) {
  std::vector<std::uint32_t> v(words);
  std::uint64_t x = seed;
  for (auto& w : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    w = static_cast<std::uint32_t>(x >> 33);
  }
  return v;
}

Config device0_with_peer_access() {
  Config c;
  c.backend = BackendKind::cuda;
  c.device = 0;
  c.peer_access.bits = DeviceSet::kAll;
  c.max_chunk = 2 * kMiB;  // one granule per chunk: an 8 MiB block over freed ones is a stitch
  c.capacity = 256 * kMiB;
  return c;
}

// Device 1 copies `block` (device 0) into its own memory with a mask, then
// writes the pattern back into `block` with another mask; device 0 reads
// both results back. Any word not reached through the peer mapping differs.
void round_trip_through_device_1(void* block, std::size_t bytes, std::uint32_t seed) {
  const std::size_t words = bytes / 4;
  const std::vector<std::uint32_t> want = pattern(words, seed);
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaMemcpy(block, want.data(), bytes, cudaMemcpyHostToDevice));

  ASSERT_CUDA(cudaSetDevice(1));
  std::uint32_t* local = nullptr;
  ASSERT_CUDA(cudaMalloc(&local, bytes));
  auto* remote = static_cast<std::uint32_t*>(block);
  copy_xor<<<132, 256>>>(remote, local, words, 0x5A5A5A5Au);  // read peer memory
  copy_xor<<<132, 256>>>(local, remote, words, 0xFFFFFFFFu);  // write peer memory
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<std::uint32_t> read(words);
  ASSERT_CUDA(cudaMemcpy(read.data(), local, bytes, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaFree(local));

  ASSERT_CUDA(cudaSetDevice(0));
  std::vector<std::uint32_t> written(words);
  ASSERT_CUDA(cudaMemcpy(written.data(), block, bytes, cudaMemcpyDeviceToHost));
  std::size_t bad_read = 0, bad_written = 0;
  for (std::size_t i = 0; i < words; ++i) {
    bad_read += read[i] != (want[i] ^ 0x5A5A5A5Au);
    bad_written += written[i] != (want[i] ^ 0x5A5A5A5Au ^ 0xFFFFFFFFu);
  }
  EXPECT_EQ(bad_read, 0u) << "words device 1 read wrongly from device 0's block";
  EXPECT_EQ(bad_written, 0u) << "words device 1 wrote that device 0 does not see";
}

TEST(GpuPeer, ADevice1KernelReadsAndWritesADevice0Block) {
  SKIP_WITHOUT_TWO_PEERS();
  Allocator a(device0_with_peer_access());
  void* p = a.allocate(6 * kMiB);
  round_trip_through_device_1(p, 6 * kMiB, 1);
  a.deallocate(p, 6 * kMiB);
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(a.check_invariants(), "");
}

TEST(GpuPeer, ADevice1KernelReadsAndWritesAStitchedBlock) {
  SKIP_WITHOUT_TWO_PEERS();
  Allocator a(device0_with_peer_access());
  const StitchedBlock stitched = allocate_stitched_block(a);
  ASSERT_CUDA(stitched.sync);
  void* big = stitched.ptr;
  ASSERT_GT(a.stats().path_stitch.current, stitched.before.path_stitch.current)
      << "no stitch happened";
  round_trip_through_device_1(big, 8 * kMiB, 2);
  a.deallocate(big, 8 * kMiB);
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(a.check_invariants(), "");
}

TEST(GpuPeer, AllocatorsOfTwoDevicesKeepTheirMemoryApart) {
  SKIP_WITHOUT_TWO_PEERS();
  Config c0 = device0_with_peer_access();
  Config c1 = c0;
  c1.device = 1;
  Allocator a0(c0), a1(c1);
  void* p0 = a0.allocate(4 * kMiB);
  void* p1 = a1.allocate(4 * kMiB);
  cudaPointerAttributes at0{}, at1{};
  ASSERT_CUDA(cudaPointerGetAttributes(&at0, p0));
  ASSERT_CUDA(cudaPointerGetAttributes(&at1, p1));
  EXPECT_EQ(at0.device, 0);
  EXPECT_EQ(at1.device, 1);
  // A pointer of one device is not the other's to free.
  EXPECT_THROW(a1.deallocate(p0, 4 * kMiB), error);
  a0.deallocate(p0, 4 * kMiB);
  a1.deallocate(p1, 4 * kMiB);
}

}  // namespace
}  // namespace memlake
