// Fixture of the backend contract suites (test_backend_vm.cpp,
// test_backend_streams.cpp): the contract of src/backend/backend.hpp,
// written once and run over the platform's backend and over adaptor stacks
// on top of it (counting, fault injection with nothing armed, limiting, and
// all three together). Each binary's platform decides which backend that is
// (HostBackend, CudaBackend); without a GPU the CUDA runs skip.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "suites/platform.hpp"

namespace memlake::test {

// A backend under test: the platform's, under zero or more adaptors.
struct BackendStack {
  const char* name;
  // A fresh stack whose capacity is `capacity` (0: the platform's default).
  std::unique_ptr<Backend> (*make)(Platform& platform, std::size_t capacity);
};

// plain, counting, fault, limiting, counting_fault_limiting.
std::vector<BackendStack> backend_stacks();

std::string stack_name(const ::testing::TestParamInfo<BackendStack>& info);
// gtest prints a parameter with this (in test listings, failures).
inline void PrintTo(const BackendStack& stack, std::ostream* os) {
  *os << stack.name;
}

class BackendContract : public ::testing::TestWithParam<BackendStack> {
 protected:
  void SetUp() override {
    platform_ = make_test_platform();
    if (!platform_) GTEST_SKIP() << "no GPU on this machine";
  }
  std::unique_ptr<Backend> make(std::size_t capacity = 0) {
    return GetParam().make(*platform_, capacity);
  }
  // The pattern of `seed` over [va, va+size), written and checked through
  // the platform (on a GPU the bytes travel through the mappings).
  void fill(DevicePtr va, std::size_t size, std::uint32_t seed) {
    platform_->fill(reinterpret_cast<void*>(va), size, seed);
  }
  bool holds(DevicePtr va, std::size_t size, std::uint32_t seed) {
    return platform_->check(reinterpret_cast<const void*>(va), size, seed);
  }
  // After a test gave everything back: what the backend still holds ("").
  std::string leftovers(const Backend& b) const { return platform_->leftovers(b); }

  std::unique_ptr<Platform> platform_;
};

// One suite per half of the contract: virtual memory, streams and events.
class BackendVm : public BackendContract {};
class BackendStreams : public BackendContract {};

}  // namespace memlake::test
