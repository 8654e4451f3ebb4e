// Stats::to_json() against hand-filled snapshots, and StatCounters (the
// allocator's lock-free counters): gauge peaks, counters, reset_peaks(),
// snapshot() and concurrent updates.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "memlake/stats.hpp"
#include "stats_counters.hpp"

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
  ASSERT_EQ(f.size(), 37u);
  EXPECT_EQ(f.front().name, "live_bytes");
  EXPECT_TRUE(f.front().gauge);
  EXPECT_EQ(f.back().name, "misuse_errors");
  EXPECT_FALSE(f.back().gauge);
}

TEST(StatsJson, ZeroSnapshotExactPrefixAndSuffix) {
  const std::string json = Stats{}.to_json();
  const std::string prefix =
      "{\"version\":1,\"live_bytes\":{\"current\":0,\"peak\":0},\"requested_bytes\":{\"current\":"
      "0,\"peak\":0},";
  EXPECT_EQ(json.substr(0, prefix.size()), prefix);
  const std::string suffix = ",\"host_waits\":0,\"misuse_errors\":0}";
  ASSERT_GE(json.size(), suffix.size());
  EXPECT_EQ(json.substr(json.size() - suffix.size()), suffix);
}

TEST(StatsJson, EveryFieldWithItsValueInOrder) {
  const std::string json = numbered().to_json();
  const std::vector<FieldInfo> f = fields();
  std::string expected = "{\"version\":1";
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
  s.pending_free_bytes = {-7, 0};
  s.vmm_calls.current = std::numeric_limits<std::int64_t>::max();
  const std::string json = s.to_json();
  EXPECT_NE(json.find("\"live_bytes\":{\"current\":3145728,\"peak\":5242880}"), std::string::npos);
  EXPECT_NE(json.find(",\"allocs\":42,"), std::string::npos);
  EXPECT_NE(json.find("\"pending_free_bytes\":{\"current\":-7,\"peak\":0}"), std::string::npos);
  EXPECT_NE(json.find(",\"vmm_calls\":9223372036854775807,"), std::string::npos);
  // Counters carry no peak.
  EXPECT_EQ(json.find("\"allocs\":{"), std::string::npos);
}

TEST(StatCounters, GaugeTracksPeak) {
  StatCounters c;
  c.live_bytes.add(100);
  c.live_bytes.add(50);
  c.live_bytes.sub(120);
  EXPECT_EQ(c.live_bytes.current(), 30);
  EXPECT_EQ(c.live_bytes.peak(), 150);
  c.live_bytes.add(20);
  EXPECT_EQ(c.live_bytes.peak(), 150);
  c.live_bytes.add(200);
  EXPECT_EQ(c.live_bytes.current(), 250);
  EXPECT_EQ(c.live_bytes.peak(), 250);
  c.chunks.set(9);
  c.chunks.set(4);
  EXPECT_EQ(c.chunks.current(), 4);
  EXPECT_EQ(c.chunks.peak(), 9);
}

TEST(StatCounters, CountersOnlyCount) {
  StatCounters c;
  c.allocs.add();
  c.allocs.add();
  c.allocs.add(5);
  EXPECT_EQ(c.allocs.current(), 7);
  c.vmm_calls.set(11);
  EXPECT_EQ(c.vmm_calls.current(), 11);
}

TEST(StatCounters, SnapshotCopiesEveryField) {
  StatCounters c;
  std::int64_t i = 1;
#define MEMLAKE_TEST_BUMP(name, kind, help) \
  c.name.add(2 * i);                        \
  c.name.add(i);                            \
  ++i;
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_BUMP)
#undef MEMLAKE_TEST_BUMP
  c.live_bytes.sub(1);  // current 2, peak 3
  const Stats s = c.snapshot();
  EXPECT_EQ(s.live_bytes.current, 2);
  EXPECT_EQ(s.live_bytes.peak, 3);
  i = 1;
#define MEMLAKE_TEST_CHECK(name, kind, help)   \
  if (std::string(#name) != "live_bytes") {    \
    EXPECT_EQ(s.name.current, 3 * i) << #name; \
    EXPECT_EQ(s.name.peak, 3 * i) << #name;    \
  }                                            \
  ++i;
  MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_CHECK)
#undef MEMLAKE_TEST_CHECK
}

TEST(StatCounters, CounterSnapshotHasPeakEqualCurrent) {
  StatCounters c;
  c.frees.add(3);
  const Stats s = c.snapshot();
  EXPECT_EQ(s.frees.current, 3);
  EXPECT_EQ(s.frees.peak, 3);
}

TEST(StatCounters, ResetPeaksSetsPeakToCurrent) {
  StatCounters c;
  c.reserved_bytes.add(1000);
  c.reserved_bytes.sub(600);
  c.segments.add(5);
  c.segments.sub(5);
  c.allocs.add(8);
  c.reset_peaks();
  EXPECT_EQ(c.reserved_bytes.current(), 400);
  EXPECT_EQ(c.reserved_bytes.peak(), 400);
  EXPECT_EQ(c.segments.peak(), 0);
  EXPECT_EQ(c.allocs.current(), 8);  // counters are untouched
  c.reserved_bytes.add(100);
  EXPECT_EQ(c.reserved_bytes.peak(), 500);
  const Stats s = c.snapshot();
  EXPECT_EQ(s.reserved_bytes.current, 500);
  EXPECT_EQ(s.reserved_bytes.peak, 500);
  EXPECT_EQ(s.allocs.current, 8);
}

TEST(StatCounters, ConcurrentUpdates) {
  StatCounters c;
  constexpr int kThreads = 8;
  constexpr int kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&c] {
      for (int r = 0; r < kRounds; ++r) {
        c.live_bytes.add(3);
        c.allocs.add();
        c.live_bytes.sub(3);
        c.frees.add();
      }
    });
  }
  for (auto& t : threads) t.join();
  const Stats s = c.snapshot();
  EXPECT_EQ(s.live_bytes.current, 0);
  EXPECT_GE(s.live_bytes.peak, 3);
  EXPECT_LE(s.live_bytes.peak, 3 * kThreads);
  EXPECT_EQ(s.live_bytes.peak % 3, 0);
  EXPECT_EQ(s.allocs.current, kThreads * kRounds);
  EXPECT_EQ(s.frees.current, kThreads * kRounds);
}

}  // namespace
}  // namespace memlake
