// The C API under hostile input, over the host backend: round trips, size 0,
// double/foreign/interior frees, impossible sizes, bad devices, the stats
// struct and JSON contracts, per-thread errors, and calls after shutdown.
//
// The C API keeps one allocator per device for the whole process, created on
// first use from the environment. The suite sets MEMLAKE_CONF before any
// call creates device 0's allocator, then restores the environment for the
// rest of the binary. memlake_shutdown() is final, so it runs in a death
// test: a child process of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "host/scoped_conf.hpp"
#include "memlake/memlake.h"

namespace {

constexpr const char* kConf = "backend:host,capacity:1G";

std::string last_error() {
  return memlake_last_error();
}

memlake_stats stats_of(int device) {
  memlake_stats s{};
  s.version = MEMLAKE_STATS_VERSION;
  s.size = sizeof s;
  EXPECT_EQ(memlake_get_stats(device, &s), 0) << last_error();
  return s;
}

class CApi : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const memlake::test::ScopedConf conf(kConf);
    // The first allocations create the allocators of devices 0 and 1 with
    // kConf: two host "devices", each with its own lake, worker and streams.
    for (int device : {0, 1}) {
      void* p = memlake_malloc(1, device, nullptr);
      ASSERT_NE(p, nullptr) << last_error();
      memlake_free(p, 1, device, nullptr);
      ASSERT_EQ(last_error(), "");
    }
  }
};

TEST_F(CApi, MallocFreeRoundTrip) {
  const memlake_stats before = stats_of(0);
  constexpr std::size_t kSize = 3 << 20;
  auto* p = static_cast<unsigned char*>(memlake_malloc(kSize, 0, nullptr));
  ASSERT_NE(p, nullptr) << last_error();
  EXPECT_EQ(last_error(), "");
  std::memset(p, 0xA5, kSize);
  EXPECT_EQ(p[0], 0xA5);
  EXPECT_EQ(p[kSize - 1], 0xA5);

  const memlake_stats during = stats_of(0);
  EXPECT_EQ(during.allocs.current, before.allocs.current + 1);
  EXPECT_GE(during.live_bytes.current, before.live_bytes.current + static_cast<int64_t>(kSize));
  EXPECT_GE(during.live_bytes.peak, during.live_bytes.current);
  EXPECT_GE(during.reserved_bytes.current, static_cast<int64_t>(kSize));

  memlake_free(p, kSize, 0, nullptr);
  EXPECT_EQ(last_error(), "");
  const memlake_stats after = stats_of(0);
  EXPECT_EQ(after.frees.current, before.frees.current + 1);
  EXPECT_EQ(after.live_bytes.current, before.live_bytes.current);
  EXPECT_GE(after.live_bytes.peak, during.live_bytes.current);
}

TEST_F(CApi, SizeZeroGivesUniquePointers) {
  void* a = memlake_malloc(0, 0, nullptr);
  void* b = memlake_malloc(0, 0, nullptr);
  ASSERT_NE(a, nullptr) << last_error();
  ASSERT_NE(b, nullptr) << last_error();
  EXPECT_NE(a, b);
  memlake_free(a, 0, 0, nullptr);
  EXPECT_EQ(last_error(), "");
  memlake_free(b, 0, 0, nullptr);
  EXPECT_EQ(last_error(), "");
}

TEST_F(CApi, FreeOfNullIsANoOp) {
  const memlake_stats before = stats_of(0);
  memlake_free(nullptr, 0, 0, nullptr);
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(stats_of(0).frees.current, before.frees.current);
}

TEST_F(CApi, DoubleFree) {
  const memlake_stats before = stats_of(0);
  void* p = memlake_malloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr) << last_error();
  memlake_free(p, 4096, 0, nullptr);
  ASSERT_EQ(last_error(), "");
  memlake_free(p, 4096, 0, nullptr);
  EXPECT_NE(last_error().find("double free"), std::string::npos) << last_error();
  const memlake_stats after = stats_of(0);
  EXPECT_EQ(after.frees.current, before.frees.current + 1);
  EXPECT_EQ(after.misuse_errors.current, before.misuse_errors.current + 1);
}

TEST_F(CApi, FreeOfForeignPointer) {
  int local = 0;
  memlake_free(&local, sizeof local, 0, nullptr);
  EXPECT_NE(last_error().find("unknown pointer"), std::string::npos) << last_error();
  void* heap = std::malloc(64);
  memlake_free(heap, 64, 0, nullptr);
  EXPECT_NE(last_error().find("unknown pointer"), std::string::npos) << last_error();
  std::free(heap);
}

TEST_F(CApi, FreeOfInteriorPointer) {
  auto* p = static_cast<char*>(memlake_malloc(1 << 20, 0, nullptr));
  ASSERT_NE(p, nullptr) << last_error();
  memlake_free(p + 256, 0, 0, nullptr);
  EXPECT_NE(last_error().find("interior"), std::string::npos) << last_error();
  // The block itself is still live and frees cleanly.
  memlake_free(p, 1 << 20, 0, nullptr);
  EXPECT_EQ(last_error(), "");
}

TEST_F(CApi, FreeOnDeviceWithoutAllocator) {
  int local = 0;
  memlake_free(&local, sizeof local, 7, nullptr);
  EXPECT_NE(last_error().find("unknown pointer"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("device 7"), std::string::npos) << last_error();
  EXPECT_EQ(memlake_record_stream(&local, 7, nullptr), -1);
  EXPECT_NE(last_error().find("unknown pointer"), std::string::npos) << last_error();
  // Nothing was created for device 7: its stats are all zero.
  const memlake_stats s = stats_of(7);
  EXPECT_EQ(s.allocs.current, 0);
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(memlake_empty_cache(7), 0);
}

// Each device has its own allocator: a block of device 0 freed or recorded
// with device 1 is refused with a message naming both, and stays live and
// intact on device 0.
TEST_F(CApi, DevicesAreSeparateAndNothingCrossesByAccident) {
  const memlake_stats zero0 = stats_of(0), zero1 = stats_of(1);
  constexpr std::size_t kSize = 5 << 20;
  auto* p0 = static_cast<unsigned char*>(memlake_malloc(kSize, 0, nullptr));
  auto* p1 = static_cast<unsigned char*>(memlake_malloc(kSize, 1, nullptr));
  ASSERT_NE(p0, nullptr) << last_error();
  ASSERT_NE(p1, nullptr) << last_error();
  EXPECT_EQ(stats_of(0).allocs.current - zero0.allocs.current, 1);
  EXPECT_EQ(stats_of(1).allocs.current - zero1.allocs.current, 1);
  std::memset(p0, 0x10, kSize);
  std::memset(p1, 0x11, kSize);

  const memlake_stats held0 = stats_of(0), held1 = stats_of(1);
  memlake_free(p0, kSize, 1, nullptr);
  const std::string expected = "was allocated on device 0, not on device 1; nothing was changed";
  EXPECT_NE(last_error().find(expected), std::string::npos) << last_error();
  EXPECT_EQ(memlake_record_stream(p0, 1, nullptr), -1);
  EXPECT_NE(last_error().find(expected), std::string::npos) << last_error();
  memlake_free(p1, kSize, 7, nullptr);  // a device with no allocator at all
  EXPECT_NE(last_error().find("was allocated on device 1, not on device 7"), std::string::npos)
      << last_error();
  EXPECT_EQ(stats_of(0).frees.current, held0.frees.current);
  EXPECT_EQ(stats_of(1).frees.current, held1.frees.current);
  EXPECT_EQ(stats_of(0).live_bytes.current - zero0.live_bytes.current,
            static_cast<std::int64_t>(kSize));
  EXPECT_EQ(stats_of(1).live_bytes.current - zero1.live_bytes.current,
            static_cast<std::int64_t>(kSize));
  EXPECT_EQ(p0[kSize - 1], 0x10);
  EXPECT_EQ(p1[0], 0x11);

  memlake_free(p0, kSize, 0, nullptr);
  EXPECT_EQ(last_error(), "");
  memlake_free(p1, kSize, 1, nullptr);
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(stats_of(0).live_bytes.current, zero0.live_bytes.current);
  EXPECT_EQ(stats_of(1).live_bytes.current, zero1.live_bytes.current);
}

TEST_F(CApi, HugeSizeFails) {
  const memlake_stats before = stats_of(0);
  EXPECT_EQ(memlake_malloc(SIZE_MAX, 0, nullptr), nullptr);
  EXPECT_NE(last_error().find("18446744073709551615"), std::string::npos) << last_error();
  // More than the 1G capacity.
  EXPECT_EQ(memlake_malloc(std::size_t{2} << 30, 0, nullptr), nullptr);
  EXPECT_NE(last_error().find("2147483648"), std::string::npos) << last_error();
  EXPECT_EQ(stats_of(0).allocs.current, before.allocs.current);
  // The allocator still works.
  void* p = memlake_malloc(64, 0, nullptr);
  ASSERT_NE(p, nullptr) << last_error();
  memlake_free(p, 64, 0, nullptr);
  EXPECT_EQ(last_error(), "");
}

TEST_F(CApi, BadDevice) {
  EXPECT_EQ(memlake_malloc(16, -1, nullptr), nullptr);
  EXPECT_EQ(last_error(), "memlake_malloc: bad device -1 (devices 0 to 63 are supported)");
  EXPECT_EQ(memlake_malloc(16, 64, nullptr), nullptr);
  EXPECT_EQ(last_error(), "memlake_malloc: bad device 64 (devices 0 to 63 are supported)");

  int local = 0;
  memlake_free(&local, 4, 64, nullptr);
  EXPECT_EQ(last_error(), "memlake_free: bad device 64 (devices 0 to 63 are supported)");
  EXPECT_EQ(memlake_record_stream(&local, -5, nullptr), -1);
  EXPECT_EQ(last_error(), "memlake_record_stream: bad device -5 (devices 0 to 63 are supported)");
  EXPECT_EQ(memlake_empty_cache(1000), -1);
  EXPECT_EQ(last_error(), "memlake_empty_cache: bad device 1000 (devices 0 to 63 are supported)");

  memlake_stats s{};
  s.version = MEMLAKE_STATS_VERSION;
  s.size = sizeof s;
  EXPECT_EQ(memlake_get_stats(64, &s), -1);
  EXPECT_EQ(last_error(), "memlake_get_stats: bad device 64 (devices 0 to 63 are supported)");
  char buf[16];
  EXPECT_EQ(memlake_get_stats_json(-1, buf, sizeof buf), -1);
  EXPECT_EQ(last_error(), "memlake_get_stats_json: bad device -1 (devices 0 to 63 are supported)");
  memlake_reset_peak_stats(64);
  EXPECT_EQ(last_error(),
            "memlake_reset_peak_stats: bad device 64 (devices 0 to 63 are supported)");
}

// Every live block of a device, in address order, and each one by its
// address alone: its requested size, stream and device.
TEST_F(CApi, LiveBlocksAreListedAndFoundByTheirAddress) {
  constexpr std::size_t kSizes[] = {1000, 3 << 20, 64 << 10};
  void* blocks[3] = {};
  for (int i = 0; i < 3; ++i) {
    blocks[i] = memlake_malloc(kSizes[i], 1, nullptr);
    ASSERT_NE(blocks[i], nullptr) << last_error();
  }
  std::size_t count = 0;
  ASSERT_EQ(memlake_live_blocks(1, nullptr, 0, &count), 0) << last_error();
  ASSERT_GE(count, 3u);
  std::vector<memlake_pool_block> listed(count);
  ASSERT_EQ(memlake_live_blocks(1, listed.data(), listed.size(), &count), 0) << last_error();
  ASSERT_EQ(count, listed.size());
  for (std::size_t i = 1; i < listed.size(); ++i) EXPECT_LT(listed[i - 1].ptr, listed[i].ptr);
  for (int i = 0; i < 3; ++i) {
    const auto at = std::find_if(listed.begin(), listed.end(),
                                 [&](const memlake_pool_block& b) { return b.ptr == blocks[i]; });
    ASSERT_NE(at, listed.end()) << "block " << i << " is not listed";
    EXPECT_EQ(at->size, kSizes[i]);
    memlake_pool_block found{};
    int device = -1;
    ASSERT_EQ(memlake_block_info(blocks[i], &found, &device), 0) << last_error();
    EXPECT_EQ(found.ptr, blocks[i]);
    EXPECT_EQ(found.size, kSizes[i]);
    EXPECT_EQ(found.stream, nullptr);
    EXPECT_EQ(device, 1);
  }
  // Room for one: one listed, the number of all given.
  memlake_pool_block first{};
  ASSERT_EQ(memlake_live_blocks(1, &first, 1, &count), 0) << last_error();
  EXPECT_EQ(count, listed.size());
  EXPECT_EQ(first.ptr, listed[0].ptr);

  memlake_free(blocks[1], kSizes[1], 1, nullptr);
  memlake_pool_block gone{};
  EXPECT_EQ(memlake_block_info(blocks[1], &gone, nullptr), -1);
  EXPECT_NE(last_error().find("no device holds a live block"), std::string::npos) << last_error();
  ASSERT_EQ(memlake_live_blocks(1, nullptr, 0, &count), 0) << last_error();
  EXPECT_EQ(count, listed.size() - 1);
  // A device that has allocated nothing has no blocks; bad arguments fail.
  ASSERT_EQ(memlake_live_blocks(37, nullptr, 0, &count), 0) << last_error();
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(memlake_live_blocks(1, nullptr, 0, nullptr), -1);
  EXPECT_NE(last_error().find("null output pointer"), std::string::npos) << last_error();
  EXPECT_EQ(memlake_live_blocks(64, nullptr, 0, &count), -1);
  EXPECT_EQ(memlake_block_info(blocks[0], nullptr, nullptr), -1);
  memlake_free(blocks[0], kSizes[0], 1, nullptr);
  memlake_free(blocks[2], kSizes[2], 1, nullptr);
  EXPECT_EQ(last_error(), "");
}

TEST_F(CApi, RecordStream) {
  void* p = memlake_malloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr) << last_error();
  EXPECT_EQ(memlake_record_stream(p, 0, nullptr), 0) << last_error();
  memlake_free(p, 4096, 0, nullptr);
  EXPECT_EQ(last_error(), "");
  int local = 0;
  EXPECT_EQ(memlake_record_stream(&local, 0, nullptr), -1);
  EXPECT_NE(last_error().find("unknown pointer"), std::string::npos) << last_error();
}

TEST_F(CApi, ConfigCheckNamesTheBadKeyOrValue) {
  EXPECT_EQ(memlake_config_check("backend:host,capacity:1G"), 0) << last_error();
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(memlake_config_check("backend:host,capacty:1G"), -1);
  EXPECT_NE(last_error().find("capacty"), std::string::npos) << last_error();
  EXPECT_EQ(memlake_config_check("capacity:lots"), -1);
  EXPECT_NE(last_error().find("lots"), std::string::npos) << last_error();
  EXPECT_EQ(memlake_config_check(nullptr), 0) << last_error();
}

TEST_F(CApi, StatsVersionAndSize) {
  memlake_stats s{};
  s.version = MEMLAKE_STATS_VERSION + 1;
  s.size = sizeof s;
  EXPECT_EQ(memlake_get_stats(0, &s), -1);
  EXPECT_EQ(last_error(),
            "memlake_get_stats: stats version 13 is not supported (this library has version 12)");
  EXPECT_EQ(s.allocs.current, 0);  // untouched

  s.version = 0;
  EXPECT_EQ(memlake_get_stats(0, &s), -1);
  EXPECT_EQ(last_error(),
            "memlake_get_stats: stats version 0 is not supported (this library has version 12)");

  s.version = MEMLAKE_STATS_VERSION;
  s.size = sizeof s - 8;
  EXPECT_EQ(memlake_get_stats(0, &s), -1);
  EXPECT_EQ(last_error(), "memlake_get_stats: size " + std::to_string(sizeof s - 8) +
                              " is smaller than memlake_stats version 12 (" +
                              std::to_string(sizeof s) + " bytes)");
  EXPECT_EQ(s.allocs.current, 0);

  EXPECT_EQ(memlake_get_stats(0, nullptr), -1);
  EXPECT_EQ(last_error(), "memlake_get_stats: out is NULL");

  // A larger struct (a caller built against a later header) is filled up to
  // what this library knows, and the rest is left alone.
  struct Larger {
    memlake_stats v1;
    int64_t later;
  } larger{};
  larger.v1.version = MEMLAKE_STATS_VERSION;
  larger.v1.size = sizeof larger;
  larger.later = 12345;
  EXPECT_EQ(memlake_get_stats(0, &larger.v1), 0) << last_error();
  EXPECT_GT(larger.v1.allocs.current, 0);
  EXPECT_EQ(larger.later, 12345);
  EXPECT_EQ(larger.v1.version, static_cast<uint32_t>(MEMLAKE_STATS_VERSION));
  EXPECT_EQ(larger.v1.size, sizeof larger);
}

TEST_F(CApi, StatsAgreeWithJson) {
  const memlake_stats s = stats_of(0);
  char buf[8192];
  const int n = memlake_get_stats_json(0, buf, sizeof buf);
  ASSERT_GT(n, 0) << last_error();
  const std::string json(buf);
  EXPECT_NE(json.find("\"allocs\":" + std::to_string(s.allocs.current) + ","), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"live_bytes\":{\"current\":" + std::to_string(s.live_bytes.current) +
                      ",\"peak\":" + std::to_string(s.live_bytes.peak) + "}"),
            std::string::npos)
      << json;
}

TEST_F(CApi, PeakReset) {
  void* p = memlake_malloc(8 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr) << last_error();
  memlake_free(p, 8 << 20, 0, nullptr);
  ASSERT_EQ(last_error(), "");
  EXPECT_GT(stats_of(0).live_bytes.peak, stats_of(0).live_bytes.current);
  memlake_reset_peak_stats(0);
  EXPECT_EQ(last_error(), "");
  const memlake_stats s = stats_of(0);
  EXPECT_EQ(s.live_bytes.peak, s.live_bytes.current);
  EXPECT_EQ(s.reserved_bytes.peak, s.reserved_bytes.current);
}

TEST_F(CApi, StatsJsonFollowsSnprintf) {
  const int n = memlake_get_stats_json(0, nullptr, 0);
  ASSERT_GT(n, 0) << last_error();
  EXPECT_EQ(last_error(), "");

  std::string full(static_cast<std::size_t>(n) + 1, 'x');
  EXPECT_EQ(memlake_get_stats_json(0, full.data(), full.size()), n);
  EXPECT_EQ(std::strlen(full.c_str()), static_cast<std::size_t>(n));
  EXPECT_EQ(full.rfind("{\"version\":7,\"live_bytes\":{\"current\":", 0), 0u) << full;
  EXPECT_EQ(full[static_cast<std::size_t>(n) - 1], '}');

  char small[8];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(memlake_get_stats_json(0, small, sizeof small), n);
  EXPECT_STREQ(small, "{\"versi");

  char one = 'x';
  EXPECT_EQ(memlake_get_stats_json(0, &one, 1), n);
  EXPECT_EQ(one, '\0');

  EXPECT_EQ(memlake_get_stats_json(0, nullptr, 16), -1);
  EXPECT_EQ(last_error(), "memlake_get_stats_json: buf is NULL, len is not 0");
}

TEST_F(CApi, LastErrorIsPerThreadAndClearedByTheNextCall) {
  EXPECT_EQ(memlake_malloc(16, -1, nullptr), nullptr);
  ASSERT_NE(last_error(), "");
  std::string other_thread = "not run";
  std::thread([&] { other_thread = memlake_last_error(); }).join();
  EXPECT_EQ(other_thread, "");
  EXPECT_NE(last_error(), "");  // this thread's error is still there
  EXPECT_EQ(memlake_empty_cache(0), 0);
  EXPECT_EQ(last_error(), "");
}

TEST_F(CApi, OptionsPrintShowsTheConfigInUse) {
  testing::internal::CaptureStderr();
  memlake_options_print();
  const std::string text = testing::internal::GetCapturedStderr();
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(
      text.rfind("memlake: device 0, backend host, capacity 1073741824 bytes, granularity ", 0), 0u)
      << text;
  EXPECT_NE(text.find("\nbackend:host "), std::string::npos) << text;
  EXPECT_NE(text.find("\ncapacity:1G "), std::string::npos) << text;
  EXPECT_NE(text.find("\non_misuse:error "), std::string::npos) << text;
}

// Runs in a child process, so the allocators of this process survive.
int calls_after_shutdown() {
  const std::string kShutdown = "memlake: called after memlake_shutdown()";
  void* p = memlake_malloc(64, 0, nullptr);
  if (p == nullptr) return 10;
  memlake_shutdown();
  if (last_error() != "") return 11;

  int failures = 0;
  auto check = [&](bool ok) { failures += ok && last_error() == kShutdown ? 0 : 1; };
  check(memlake_malloc(64, 0, nullptr) == nullptr);
  check(memlake_malloc(64, 3, nullptr) == nullptr);
  memlake_free(p, 64, 0, nullptr);
  check(true);
  check(memlake_record_stream(p, 0, nullptr) == -1);
  check(memlake_empty_cache(0) == -1);
  memlake_stats s{};
  s.version = MEMLAKE_STATS_VERSION;
  s.size = sizeof s;
  check(memlake_get_stats(0, &s) == -1);
  char buf[64];
  check(memlake_get_stats_json(0, buf, sizeof buf) == -1);
  memlake_reset_peak_stats(0);
  check(true);
  memlake_shutdown();
  check(true);
  return failures;
}

using CApiDeathTest = CApi;

TEST_F(CApiDeathTest, EveryCallFailsAfterShutdown) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(calls_after_shutdown()), testing::ExitedWithCode(0), "");
}

}  // namespace
