// The C calls PyTorch's allocator statistics are made from, on the host
// backend: memlake_get_stat_values (the statistics by index, whatever header
// the caller was built with) and memlake_largest_available (what cacheInfo
// answers). Devices 6 and 7 of the process-wide C API table are this
// suite's, created with kConf.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "host/scoped_conf.hpp"
#include "memlake/memlake.h"

namespace {

constexpr int kStatsDevice = 6;
constexpr int kFreshDevice = 7;
constexpr std::size_t MiB = std::size_t{1} << 20;
// No worker: nothing but the calls here changes what is reserved.
constexpr const char* kConf = "backend:host,capacity:256M,max_chunk:2M,worker:off";

std::string error() {
  return memlake_last_error();
}

// Creates the devices' allocators with kConf, then restores the environment.
class CStatValues : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const memlake::test::ScopedConf conf(kConf);
    std::size_t ignored = 0;
    for (int device : {kStatsDevice, kFreshDevice})
      ASSERT_EQ(memlake_largest_available(device, &ignored), 0) << error();
  }
};

int index_of(const std::string& name) {
  for (int i = 0; i < memlake_stat_count(); ++i)
    if (name == memlake_stat_name(i)) return i;
  return -1;
}

TEST_F(CStatValues, TheValuesAreTheStatsInIndexOrder) {
  std::vector<void*> blocks;
  for (std::size_t size : {MiB, 3 * MiB, 100 * std::size_t{1024}})
    blocks.push_back(memlake_malloc(size, kStatsDevice, nullptr));
  for (void* p : blocks) ASSERT_NE(p, nullptr) << error();

  memlake_stats s{};
  s.version = MEMLAKE_STATS_VERSION;
  s.size = sizeof s;
  ASSERT_EQ(memlake_get_stats(kStatsDevice, &s), 0) << error();
  std::vector<memlake_stat_value> values(static_cast<std::size_t>(memlake_stat_count()) + 3,
                                         memlake_stat_value{-7, -7});
  const int count = static_cast<int>(values.size());
  ASSERT_EQ(memlake_get_stat_values(kStatsDevice, values.data(), count), memlake_stat_count())
      << error();
  int i = 0;
#define MEMLAKE_TEST_SAME(name, kind, help)                                        \
  EXPECT_EQ(values[static_cast<std::size_t>(i)].current, s.name.current) << #name; \
  EXPECT_EQ(values[static_cast<std::size_t>(i)].peak, s.name.peak) << #name;       \
  ++i;
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_SAME)
#undef MEMLAKE_TEST_SAME
  EXPECT_EQ(values.back().current, -7) << "written past the library's list";

  const int live_blocks = index_of("live_blocks");
  ASSERT_GE(live_blocks, 0);
  EXPECT_EQ(values[static_cast<std::size_t>(live_blocks)].current, 3);
  memlake_free(blocks[0], MiB, kStatsDevice, nullptr);
  ASSERT_EQ(memlake_get_stat_values(kStatsDevice, values.data(), count), memlake_stat_count());
  EXPECT_EQ(values[static_cast<std::size_t>(live_blocks)].current, 2);
  EXPECT_EQ(values[static_cast<std::size_t>(live_blocks)].peak, 3);

  // A shorter array gets the first statistics only.
  std::vector<memlake_stat_value> two(3, memlake_stat_value{-7, -7});
  ASSERT_EQ(memlake_get_stat_values(kStatsDevice, two.data(), 2), 2) << error();
  EXPECT_EQ(two[0].current, values[0].current);
  EXPECT_EQ(two[2].current, -7);
  EXPECT_EQ(memlake_get_stat_values(kStatsDevice, nullptr, 0), 0) << error();

  memlake_free(blocks[1], 3 * MiB, kStatsDevice, nullptr);
  memlake_free(blocks[2], 100 * 1024, kStatsDevice, nullptr);
}

TEST_F(CStatValues, BadArgumentsAreRefusedWithTheirCause) {
  memlake_stat_value v[2];
  EXPECT_EQ(memlake_get_stat_values(kStatsDevice, v, -1), -1);
  EXPECT_EQ(error(), "memlake_get_stat_values: count is negative");
  EXPECT_EQ(memlake_get_stat_values(kStatsDevice, nullptr, 2), -1);
  EXPECT_EQ(error(), "memlake_get_stat_values: out is NULL");
  EXPECT_EQ(memlake_get_stat_values(64, v, 2), -1);
  EXPECT_EQ(error(), "memlake_get_stat_values: bad device 64 (devices 0 to 63 are supported)");
  EXPECT_EQ(memlake_largest_available(kFreshDevice, nullptr), -1);
  EXPECT_EQ(error(), "memlake_largest_available: out is NULL");
  std::size_t largest = 0;
  EXPECT_EQ(memlake_largest_available(-1, &largest), -1);
  EXPECT_EQ(error(), "memlake_largest_available: bad device -1 (devices 0 to 63 are supported)");
}

TEST_F(CStatValues, TheLargestAvailableBlockIsServed) {
  std::size_t largest = 0;
  ASSERT_EQ(memlake_largest_available(kFreshDevice, &largest), 0) << error();
  EXPECT_EQ(largest, 256 * MiB) << "nothing is reserved yet: the whole capacity";
  void* p = memlake_malloc(largest, kFreshDevice, nullptr);
  ASSERT_NE(p, nullptr) << error();
  ASSERT_EQ(memlake_largest_available(kFreshDevice, &largest), 0) << error();
  EXPECT_EQ(largest, 0u);
  EXPECT_EQ(memlake_malloc(MiB, kFreshDevice, nullptr), nullptr) << "the capacity is all live";
  memlake_free(p, 256 * MiB, kFreshDevice, nullptr);
  ASSERT_EQ(memlake_largest_available(kFreshDevice, &largest), 0) << error();
  EXPECT_EQ(largest, 256 * MiB);
}

}  // namespace
