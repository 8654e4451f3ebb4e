// Two-GPU tests of peer_access: a kernel on device 1 reads and writes
// memlake blocks of device 0 (a block of its own chunks and a stitched one)
// through the mappings memlake made, with access granted to device 1 in the
// same SetAccess call; and another process that maps a device 0 block from
// its file descriptors with access for device 1 (what NCCL's P2P transport
// does with memory another rank exports). Every test skips with fewer than
// two GPUs, or where device 1 cannot reach device 0 peer to peer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "memlake/sharing.hpp"
#include "shared_block_env.hpp"
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

constexpr std::uint32_t kReadMask = 0x5A5A5A5Au;
constexpr std::uint32_t kWriteMask = 0xFFFFFFFFu;

// Device 0 writes the pattern of `seed` into `block`.
void fill_on_device_0(void* block, std::size_t bytes, std::uint32_t seed) {
  const std::vector<std::uint32_t> want = pattern(bytes / 4, seed);
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaMemcpy(block, want.data(), bytes, cudaMemcpyHostToDevice));
}

// Device 1 copies `block` (device 0's memory) into its own with a mask, then
// writes it back into `block` with another mask; the words it read wrongly
// are counted. Any word not reached through the peer mapping differs.
void read_and_write_on_device_1(void* block, std::size_t bytes, std::uint32_t seed) {
  const std::size_t words = bytes / 4;
  const std::vector<std::uint32_t> want = pattern(words, seed);
  ASSERT_CUDA(cudaSetDevice(1));
  std::uint32_t* local = nullptr;
  ASSERT_CUDA(cudaMalloc(&local, bytes));
  auto* remote = static_cast<std::uint32_t*>(block);
  copy_xor<<<132, 256>>>(remote, local, words, kReadMask);   // read peer memory
  copy_xor<<<132, 256>>>(local, remote, words, kWriteMask);  // write peer memory
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<std::uint32_t> read(words);
  ASSERT_CUDA(cudaMemcpy(read.data(), local, bytes, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaFree(local));
  std::size_t bad_read = 0;
  for (std::size_t i = 0; i < words; ++i) bad_read += read[i] != (want[i] ^ kReadMask);
  EXPECT_EQ(bad_read, 0u) << "words device 1 read wrongly from device 0's block";
}

// Device 0 reads back what device 1 wrote.
void check_written_on_device_0(void* block, std::size_t bytes, std::uint32_t seed) {
  const std::size_t words = bytes / 4;
  const std::vector<std::uint32_t> want = pattern(words, seed);
  ASSERT_CUDA(cudaSetDevice(0));
  std::vector<std::uint32_t> written(words);
  ASSERT_CUDA(cudaMemcpy(written.data(), block, bytes, cudaMemcpyDeviceToHost));
  std::size_t bad_written = 0;
  for (std::size_t i = 0; i < words; ++i)
    bad_written += written[i] != (want[i] ^ kReadMask ^ kWriteMask);
  EXPECT_EQ(bad_written, 0u) << "words device 1 wrote that device 0 does not see";
}

void round_trip_through_device_1(void* block, std::size_t bytes, std::uint32_t seed) {
  fill_on_device_0(block, bytes, seed);
  read_and_write_on_device_1(block, bytes, seed);
  check_written_on_device_0(block, bytes, seed);
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
  ASSERT_GT(a.stats().rung_stitch.current, stitched.before.rung_stitch.current)
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

// Runs only as the other process: maps the block of MEMLAKE_TEST_PEER_SHARED
// (test::shared_block_text) with access for device 1, as NCCL's P2P
// transport does with memory another rank exports, and reads and writes it
// from a device 1 kernel.
TEST(GpuPeer, ImporterOnDevice1) {
  const char* text = std::getenv("MEMLAKE_TEST_PEER_SHARED");
  if (!text) GTEST_SKIP() << "runs only as the importing process";
  const SharedBlock b = test::parse_shared_block(text);
  Config c = device0_with_peer_access();
  c.shareable = true;
  ImportedBlock imported(b, c);
  read_and_write_on_device_1(imported.data(), b.size, 3);
}

TEST(GpuPeer, AnotherProcessReadsAndWritesADevice0BlockFromDevice1) {
  SKIP_WITHOUT_TWO_PEERS();
  Config c = device0_with_peer_access();
  c.shareable = true;
  Allocator a(c);
  const std::size_t n = 5 * kMiB + 4096;  // three chunks, the last one partly
  void* p = a.allocate(n);
  fill_on_device_0(p, n, 3);
  SharedBlock s = a.share(p);
  EXPECT_EQ(test::run_self("GpuPeer.ImporterOnDevice1",
                           {"MEMLAKE_TEST_PEER_SHARED=" + test::shared_block_text(s)}),
            0);
  s.close_descriptors();
  check_written_on_device_0(p, n, 3);
  a.deallocate(p, n);
  EXPECT_EQ(a.check_invariants(), "");
}

}  // namespace
}  // namespace memlake
