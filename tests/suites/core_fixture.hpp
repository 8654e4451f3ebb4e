// Fixture of the core suites: builds allocators over the platform's backend
// with a known config (never the environment's), and checks invariants.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "suites/platform.hpp"

namespace memlake::test {

inline constexpr std::size_t MiB = std::size_t{1} << 20;

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    platform_ = make_test_platform();
    if (!platform_) GTEST_SKIP() << "no GPU on this machine";
  }
  static Config base_config() {
    Config c;
    c.small_max = 1 * MiB;
    c.max_chunk = 8 * MiB;
    c.fit_slack = 0.125;
    return c;
  }
  std::unique_ptr<Allocator> make(std::size_t capacity, Config c = base_config()) {
    c.capacity = capacity;
    return std::make_unique<Allocator>(c, platform_->backend(capacity));
  }
  // One granule per chunk and no worker: where each block goes is known.
  std::unique_ptr<Allocator> make_granule_chunks(std::size_t capacity) {
    Config c = base_config();
    c.max_chunk = 2 * MiB;
    c.worker = WorkerMode::off;
    return make(capacity, c);
  }
  // Records the fences of the frees so far, so that their ranges can be
  // unmapped once the work before them is done.
  static void settle(Allocator& a) { a.process_pending_frees(); }
  // The same, and waits for that work (on the default stream, which these
  // suites use): empty_cache() can then unmap every range no block needs.
  static void settle_all(Allocator& a) {
    a.process_pending_frees();
    ASSERT_EQ(a.backend().stream_synchronize(nullptr), Status::ok);
  }
  std::unique_ptr<Platform> platform_;
};

#define EXPECT_INVARIANTS(alloc) EXPECT_EQ((alloc).check_invariants(), "")

// `call` throws memlake::misuse with a message that says `says`.
inline void expect_misuse(const std::function<void()>& call, const char* says) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one saying \"" << says << "\"";
  } catch (const misuse& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

}  // namespace memlake::test
