// The graph suites' device work on CUDA: kernels, so that captures record
// kernel nodes and replays run them on the GPU (device_work.hpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "suites/device_work.hpp"

namespace memlake::test {

namespace {

constexpr int kBlocks = 264;
constexpr int kThreads = 256;

__global__ void fill_kernel(std::uint32_t* dst, std::size_t words, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = work_word(seed, static_cast<std::uint32_t>(i));
}

__global__ void mix_kernel(const std::uint32_t* src, std::uint32_t* dst, std::size_t words,
                           std::uint32_t key) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = mix_word(src[i], key, static_cast<std::uint32_t>(i));
}

// One thread per accumulator word: the sum of its words, in any order, is
// exact in wrapping 32-bit arithmetic.
__global__ void accumulate_kernel(const std::uint32_t* src, std::size_t words, std::uint32_t* acc,
                                  std::size_t acc_words) {
  for (std::size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < acc_words;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t sum = 0;
    for (std::size_t i = j; i < words; i += acc_words) sum += src[i];
    acc[j] += sum;
  }
}

__global__ void delay_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

cudaStream_t to_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}

class CudaWork final : public DeviceWork {
 public:
  void fill(Backend&, StreamHandle s, std::uint32_t* dst, std::size_t words,
            std::uint32_t seed) override {
    fill_kernel<<<kBlocks, kThreads, 0, to_stream(s)>>>(dst, words, seed);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  void mix(Backend&, StreamHandle s, const std::uint32_t* src, std::uint32_t* dst,
           std::size_t words, std::uint32_t key) override {
    mix_kernel<<<kBlocks, kThreads, 0, to_stream(s)>>>(src, dst, words, key);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  void accumulate(Backend&, StreamHandle s, const std::uint32_t* src, std::size_t words,
                  std::uint32_t* acc, std::size_t acc_words) override {
    accumulate_kernel<<<kBlocks, kThreads, 0, to_stream(s)>>>(src, words, acc, acc_words);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
  // About 2 GHz: microseconds to cycles, roughly; the tests need "a while".
  void delay(Backend&, StreamHandle s, std::chrono::microseconds d) override {
    delay_kernel<<<1, 1, 0, to_stream(s)>>>(static_cast<long long>(d.count()) * 2000);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
};

}  // namespace

DeviceWork* cuda_work() {
  static CudaWork work;
  return &work;
}

}  // namespace memlake::test
