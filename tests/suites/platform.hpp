// What a test suite needs from the machine it runs on: a backend to build
// allocators over, a way to write and check bytes at device addresses, and
// what the backend contract suites may ask of it beyond the contract.
// tests/host/ and tests/cuda/ each define make_test_platform(); a platform
// that cannot run here (no GPU) returns nullptr and the suites skip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace memlake::test {

class DeviceWork;  // device_work.hpp

class Platform {
 public:
  virtual ~Platform() = default;
  virtual std::string name() const = 0;
  // A fresh backend with at most `capacity` bytes of chunks (0: the
  // backend's default).
  virtual std::unique_ptr<Backend> backend(std::size_t capacity) = 0;
  // Writes a pattern derived from `seed` over [p, p+n).
  virtual void fill(void* p, std::size_t n, std::uint32_t seed) = 0;
  // True when [p, p+n) holds the pattern of `seed`.
  virtual bool check(const void* p, std::size_t n, std::uint32_t seed) = 0;
  // Copies n bytes of device memory at `p` to `out` (waiting for nothing:
  // synchronize the streams that write it first).
  virtual void read(const void* p, void* out, std::size_t n) = 0;
  // Work to enqueue on streams for the graph suites; nullptr where the
  // platform has none (a CUDA build without nvcc), and those tests skip.
  virtual DeviceWork* work() { return nullptr; }
  // What a backend of this platform (under any adaptors) still holds:
  // chunks, mappings, reservations, as text; "" when it holds nothing or
  // when the platform cannot tell.
  virtual std::string leftovers(const Backend&) const { return ""; }
  // Whether host functions on different streams run at the same time, so
  // that one blocked host function holds up its own stream only. The CUDA
  // runtime may run every stream's host functions on one thread.
  virtual bool host_functions_run_concurrently() const { return false; }
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
