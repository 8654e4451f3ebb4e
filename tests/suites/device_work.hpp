// Work the graph suites enqueue on streams, so that a capture records it and
// a replay runs it: on the HostBackend host functions, on CUDA kernels
// (tests/cuda/cuda_work.cu). The arithmetic is 32-bit integer, the same on
// both, so a result computed on the host is the expected one bit for bit.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"

#if defined(__CUDACC__)
#define MEMLAKE_TEST_HD __host__ __device__
#else
#define MEMLAKE_TEST_HD
#endif

namespace memlake::test {

// A word of the sequence of `seed` (a 32-bit hash: murmur3's finalizer).
MEMLAKE_TEST_HD inline std::uint32_t work_word(std::uint32_t seed, std::uint32_t i) {
  std::uint32_t x = seed * 0x9E3779B9u + i;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

// What mix writes for input word `x` at index `i`.
MEMLAKE_TEST_HD inline std::uint32_t mix_word(std::uint32_t x, std::uint32_t key, std::uint32_t i) {
  return work_word(x ^ key, i);
}

using Words = std::vector<std::uint32_t>;

// What fill(seed) writes over `words` words.
inline Words expected_fill(std::size_t words, std::uint32_t seed) {
  Words w(words);
  for (std::size_t i = 0; i < words; ++i) w[i] = work_word(seed, static_cast<std::uint32_t>(i));
  return w;
}

class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  // dst[i] = work_word(seed, i) for i < words.
  virtual void fill(Backend& b, StreamHandle s, std::uint32_t* dst, std::size_t words,
                    std::uint32_t seed) = 0;
  // dst[i] = mix_word(src[i], key, i).
  virtual void mix(Backend& b, StreamHandle s, const std::uint32_t* src, std::uint32_t* dst,
                   std::size_t words, std::uint32_t key) = 0;
  // acc[j] += src[i] for every i with i % acc_words == j (wrapping).
  virtual void accumulate(Backend& b, StreamHandle s, const std::uint32_t* src, std::size_t words,
                          std::uint32_t* acc, std::size_t acc_words) = 0;
  // Keeps the stream busy for about `d` (a graph that runs a while).
  virtual void delay(Backend& b, StreamHandle s, std::chrono::microseconds d) = 0;
};

}  // namespace memlake::test
