// What a test suite needs from the machine it runs on: a backend to build
// allocators over, and a way to write and check bytes at device addresses.
// tests/host/ and tests/cuda/ each define make_test_platform(); a platform
// that cannot run here (no GPU) returns nullptr and the suites skip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace memlake::test {

class Platform {
 public:
  virtual ~Platform() = default;
  virtual std::string name() const = 0;
  // A fresh backend with at most `capacity` bytes of chunks.
  virtual std::unique_ptr<Backend> backend(std::size_t capacity) = 0;
  // Writes a pattern derived from `seed` over [p, p+n).
  virtual void fill(void* p, std::size_t n, std::uint32_t seed) = 0;
  // True when [p, p+n) holds the pattern of `seed`.
  virtual bool check(const void* p, std::size_t n, std::uint32_t seed) = 0;
};

std::unique_ptr<Platform> make_test_platform();

// The pattern used by every platform: a word-wise hash of seed and index.
inline std::uint32_t pattern_word(std::uint32_t seed, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(seed) << 32) ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::uint32_t>(x);
}

}  // namespace memlake::test
