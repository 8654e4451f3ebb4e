// Stats::to_json() against hand-filled snapshots, and the gauge update.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/stat_update.hpp"
#include "memlake/stats.hpp"

namespace memlake {
namespace {

struct FieldInfo {
  std::string name;
  bool gauge;
};

std::vector<FieldInfo> fields() {
  std::vector<FieldInfo> out;
#define MEMLAKE_TEST_FIELD(name, kind, help) out.push_back({#name, std::string(#kind) == "gauge"});
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_FIELD)
#undef MEMLAKE_TEST_FIELD
  return out;
}

// Field i gets current 1000 + i and, for gauges, peak 2000 + i.
Stats numbered() {
  Stats s;
  std::int64_t i = 0;
#define MEMLAKE_TEST_FILL(name, kind, help) \
  s.name.current = 1000 + i;                \
  s.name.peak = 2000 + i;                   \
  ++i;
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_FILL)
#undef MEMLAKE_TEST_FILL
  return s;
}

TEST(StatsJson, FieldListIsTheDocumentedOne) {
  const std::vector<FieldInfo> f = fields();
  ASSERT_EQ(f.size(), 63u);
  EXPECT_EQ(f.front().name, "live_bytes");
  EXPECT_TRUE(f.front().gauge);
  EXPECT_EQ(f.back().name, "deallocate_ns");
  EXPECT_FALSE(f.back().gauge);
}

TEST(StatsJson, ZeroSnapshotExactPrefixAndSuffix) {
  const std::string json = Stats{}.to_json();
  const std::string prefix =
      "{\"version\":7,\"live_bytes\":{\"current\":0,\"peak\":0},\"requested_bytes\":{\"current\":"
      "0,\"peak\":0},";
  EXPECT_EQ(json.substr(0, prefix.size()), prefix);
  const std::string suffix =
      ",\"graph_exclusive_overlaps\":0,\"graph_kept_chunks\":0,\"deallocate_ns\":0}";
  ASSERT_GE(json.size(), suffix.size());
  EXPECT_EQ(json.substr(json.size() - suffix.size()), suffix);
}

TEST(StatsJson, EveryFieldWithItsValueInOrder) {
  const std::string json = numbered().to_json();
  const std::vector<FieldInfo> f = fields();
  std::string expected = "{\"version\":7";
  for (std::size_t i = 0; i < f.size(); ++i) {
    const std::string current = std::to_string(1000 + i);
    const std::string peak = std::to_string(2000 + i);
    const std::string entry =
        f[i].gauge ? "\"" + f[i].name + "\":{\"current\":" + current + ",\"peak\":" + peak + "}"
                   : "\"" + f[i].name + "\":" + current;
    // Each entry on its own, so a failure names the field.
    EXPECT_NE(json.find(entry + (i + 1 < f.size() ? "," : "}")), std::string::npos) << entry;
    expected += "," + entry;
  }
  expected += "}";
  EXPECT_EQ(json, expected);
}

TEST(StatsJson, SpotValues) {
  Stats s;
  s.live_bytes = {3 << 20, 5 << 20};
  s.allocs.current = 42;
  s.cached_segments = {-7, 0};
  s.vmm_calls.current = std::numeric_limits<std::int64_t>::max();
  const std::string json = s.to_json();
  EXPECT_NE(json.find("\"live_bytes\":{\"current\":3145728,\"peak\":5242880}"), std::string::npos);
  EXPECT_NE(json.find(",\"allocs\":42,"), std::string::npos);
  EXPECT_NE(json.find("\"cached_segments\":{\"current\":-7,\"peak\":0}"), std::string::npos);
  EXPECT_NE(json.find(",\"vmm_calls\":9223372036854775807,"), std::string::npos);
  // Counters carry no peak.
  EXPECT_EQ(json.find("\"allocs\":{"), std::string::npos);
}

TEST(StatGauge, TracksCurrentAndPeak) {
  StatValue v;
  gauge(v, 10);
  gauge(v, -4);
  gauge(v, 3);
  EXPECT_EQ(v.current, 9);
  EXPECT_EQ(v.peak, 10);
  gauge(v, 5);
  EXPECT_EQ(v.peak, 14);
}

}  // namespace
}  // namespace memlake
