// Process sharing on the GPU: a block of a shareable:true allocator, exported
// as POSIX file descriptors (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), is
// mapped by another process (this binary again), which reads the exporter's
// bytes from device memory and writes its own, which the exporter then reads.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "memlake/sharing.hpp"
#include "shared_block_env.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

Config shareable_cuda() {
  Config c = Config::parse("backend:cuda,capacity:1G,worker:off");
  c.shareable = true;
  return c;
}

bool holds(const void* device_ptr, std::size_t n, unsigned char value) {
  std::vector<unsigned char> host(n);
  if (cudaMemcpy(host.data(), device_ptr, n, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (unsigned char b : host)
    if (b != value) return false;
  return true;
}

// Runs only as the other process: MEMLAKE_TEST_GPU_SHARED is
// "size offset fd:size fd:size ...".
TEST(GpuSharing, ImporterProcess) {
  const char* text = std::getenv("MEMLAKE_TEST_GPU_SHARED");
  if (!text) GTEST_SKIP() << "runs only as the importing process";
  const SharedBlock b = test::parse_shared_block(text);
  ImportedBlock imported(b, shareable_cuda());
  ASSERT_TRUE(holds(imported.data(), b.size, 0x6A)) << "the exporter's bytes are not there";
  ASSERT_EQ(cudaMemset(imported.data(), 0x7B, b.size), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(GpuSharing, ABlockIsMappedInAnotherProcessWithItsBytes) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no GPU";
  Allocator a(shareable_cuda());
  const std::size_t n = 5 * MiB + 4096;  // three chunks, the last one partly
  void* p = a.allocate(n);
  ASSERT_EQ(cudaMemset(p, 0x6A, n), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  SharedBlock s = a.share(p);
  ASSERT_GE(s.chunks.size(), 1u);
  EXPECT_EQ(test::run_self("GpuSharing.ImporterProcess",
                           {"MEMLAKE_TEST_GPU_SHARED=" + test::shared_block_text(s)}),
            0);
  s.close_descriptors();
  EXPECT_TRUE(holds(p, n, 0x7B)) << "the other process's writes are not visible here";
  a.deallocate(p, n);

  Allocator plain(Config::parse("backend:cuda,capacity:64M,worker:off"));
  void* q = plain.allocate(MiB);
  EXPECT_THROW(plain.share(q), misuse);
  plain.deallocate(q, MiB);
}

}  // namespace
}  // namespace memlake
