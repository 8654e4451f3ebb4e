// The C struct memlake_stats and the C++ struct memlake::Stats are made from
// one list (memlake/stat_fields.h): the same fields in the same order, the C
// layout the same in C and C++, each C field filled from its C++ field, and
// the names the library reports the JSON's keys.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "c_api_stats.hpp"
#include "memlake/memlake.h"
#include "memlake/stats.hpp"

extern "C" {
std::size_t memlake_test_c_stats_size(void);
std::size_t memlake_test_c_stats_offset(int index);
}

namespace memlake {
namespace {

// A change of the list changes memlake_stats: bump MEMLAKE_STATS_VERSION
// (memlake.h) with it, then this count.
static_assert(MEMLAKE_STATS_VERSION == 12 && MEMLAKE_STAT_COUNT == 63,
              "MEMLAKE_STAT_FIELDS changed: bump MEMLAKE_STATS_VERSION and this line");

static_assert(sizeof(memlake_stats) ==
              2 * sizeof(std::uint32_t) + MEMLAKE_STAT_COUNT * sizeof(memlake_stat_value));
static_assert(sizeof(Stats) == MEMLAKE_STAT_COUNT * sizeof(StatValue));

std::vector<std::string> cpp_names() {
  std::vector<std::string> out;
#define MEMLAKE_TEST_NAME(name, kind, help) out.push_back(#name);
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_NAME)
#undef MEMLAKE_TEST_NAME
  return out;
}

TEST(CStats, LayoutIsTheSameInCAndCpp) {
  EXPECT_EQ(memlake_test_c_stats_size(), sizeof(memlake_stats));
  int index = 0;
#define MEMLAKE_TEST_OFFSET(name, kind, help)                                            \
  EXPECT_EQ(memlake_test_c_stats_offset(index), offsetof(memlake_stats, name)) << #name; \
  ++index;
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_OFFSET)
#undef MEMLAKE_TEST_OFFSET
  EXPECT_EQ(index, MEMLAKE_STAT_COUNT);
  EXPECT_EQ(memlake_test_c_stats_offset(index), static_cast<std::size_t>(-1));
}

TEST(CStats, EveryFieldIsFilledFromItsCppField) {
  // Field i gets current 1000 + i and peak 5000 + i, so a field copied from
  // its neighbour, or left out, shows.
  Stats cpp;
  std::int64_t i = 0;
#define MEMLAKE_TEST_NUMBER(name, kind, help) \
  cpp.name.current = 1000 + i;                \
  cpp.name.peak = 5000 + i;                   \
  ++i;
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_NUMBER)
#undef MEMLAKE_TEST_NUMBER

  memlake_stats c{};
  c.version = MEMLAKE_STATS_VERSION;
  c.size = sizeof c;
  c_api::fill_c_stats(cpp, &c);
  EXPECT_EQ(c.version, static_cast<std::uint32_t>(MEMLAKE_STATS_VERSION));
  EXPECT_EQ(c.size, sizeof c);
  i = 0;
#define MEMLAKE_TEST_AGREE(name, kind, help)            \
  EXPECT_EQ(c.name.current, 1000 + i) << #name;         \
  EXPECT_EQ(c.name.peak, 5000 + i) << #name;            \
  EXPECT_EQ(c.name.current, cpp.name.current) << #name; \
  EXPECT_EQ(c.name.peak, cpp.name.peak) << #name;       \
  ++i;
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_AGREE)
#undef MEMLAKE_TEST_AGREE
}

TEST(CStats, TheLibraryNamesItsFieldsInOrder) {
  const std::vector<std::string> names = cpp_names();
  ASSERT_EQ(memlake_stat_count(), static_cast<int>(names.size()));
  ASSERT_EQ(memlake_stat_count(), MEMLAKE_STAT_COUNT);
  for (int i = 0; i < memlake_stat_count(); ++i) {
    ASSERT_NE(memlake_stat_name(i), nullptr) << i;
    EXPECT_EQ(memlake_stat_name(i), names[static_cast<std::size_t>(i)]);
    const std::string kind = memlake_stat_kind(i);
    EXPECT_TRUE(kind == "gauge" || kind == "counter") << kind;
    EXPECT_GT(std::string(memlake_stat_help(i)).size(), 0u) << names[static_cast<std::size_t>(i)];
  }
  EXPECT_EQ(std::string(memlake_stat_kind(MEMLAKE_STAT_live_bytes)), "gauge");
  EXPECT_EQ(std::string(memlake_stat_kind(MEMLAKE_STAT_allocs)), "counter");
  for (int bad : {-1, static_cast<int>(MEMLAKE_STAT_COUNT), 1 << 30}) {
    EXPECT_EQ(memlake_stat_name(bad), nullptr) << bad;
    EXPECT_EQ(memlake_stat_kind(bad), nullptr) << bad;
    EXPECT_EQ(memlake_stat_help(bad), nullptr) << bad;
  }
}

TEST(CStats, TheJsonHasEveryNamedFieldInOrder) {
  const std::string json = Stats{}.to_json();
  std::size_t at = 0;
  for (int i = 0; i < memlake_stat_count(); ++i) {
    const std::string key = std::string("\"") + memlake_stat_name(i) + "\":";
    const std::size_t found = json.find(key, at);
    ASSERT_NE(found, std::string::npos) << key << " in " << json;
    at = found + key.size();
  }
}

}  // namespace
}  // namespace memlake
