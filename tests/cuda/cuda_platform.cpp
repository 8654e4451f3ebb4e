// The CudaBackend platform for the shared suites: bytes go through
// cudaMemcpy, so they really travel through the VMM mappings. Without a GPU
// make_test_platform() returns nullptr and every suite test skips.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "suites/device_work.hpp"
#include "suites/platform.hpp"

namespace memlake::test {

#if defined(MEMLAKE_TEST_KERNELS)
DeviceWork* cuda_work();  // cuda_work.cu
#endif

namespace {

class CudaPlatform final : public Platform {
 public:
  std::string name() const override { return "cuda"; }
  std::unique_ptr<Backend> backend(std::size_t capacity) override {
    CudaBackendOptions o;
    o.capacity = capacity;
    return std::make_unique<CudaBackend>(o);
  }
  void fill(void* p, std::size_t n, std::uint32_t seed) override {
    std::vector<unsigned char> host(n);
    expected(host.data(), n, seed);
    if (cudaMemcpy(p, host.data(), n, cudaMemcpyHostToDevice) != cudaSuccess) std::abort();
    // A copy from pageable memory may return before its DMA reaches the
    // device, and a VMM unmap does not wait for it: the suites unmap right
    // after filling, so the copy must be done first.
    if (cudaDeviceSynchronize() != cudaSuccess) std::abort();
  }
  void read(const void* p, void* out, std::size_t n) override {
    if (cudaMemcpy(out, p, n, cudaMemcpyDeviceToHost) != cudaSuccess) std::abort();
  }
#if defined(MEMLAKE_TEST_KERNELS)
  DeviceWork* work() override {
    return cuda_work();
  }
#endif
  bool check(const void* p, std::size_t n, std::uint32_t seed) override {
    std::vector<unsigned char> want(n), got(n);
    expected(want.data(), n, seed);
    if (cudaMemcpy(got.data(), p, n, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    return want == got;
  }

 private:
  static void expected(unsigned char* out, std::size_t n, std::uint32_t seed) {
    std::size_t words = n / 4;
    for (std::size_t i = 0; i < words; ++i) {
      std::uint32_t w = pattern_word(seed, i);
      std::memcpy(out + 4 * i, &w, 4);
    }
    for (std::size_t i = words * 4; i < n; ++i) out[i] = static_cast<unsigned char>(seed + i);
  }
};

}  // namespace

std::unique_ptr<Platform> make_test_platform() {
  if (CudaBackend::device_count() == 0) return nullptr;
  return std::make_unique<CudaPlatform>();
}

}  // namespace memlake::test
