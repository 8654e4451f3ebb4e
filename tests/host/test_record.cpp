// The `record` option: a run's allocations and frees come out as a
// memlake-trace that reads back event for event and replays to the same
// peak; a bad path is an error naming it; the C API's allocators, which live
// until the process ends, still leave a complete file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "memlake/allocator.hpp"
#include "memlake/memlake.h"
#include "spawn_self.hpp"
#include "trace/trace.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "memlake-record-" + std::to_string(::getpid()) + "-" + name;
}

Config recording(const std::string& path) {
  Config c = Config::parse("backend:host,capacity:1G");
  c.record = path;
  return c;
}

TEST(Record, ARunReadsBackEventForEventAndReplaysToTheSamePeak) {
  const std::string path = temp_path("run.csv.gz");
  struct Op {
    bool alloc;
    int index;
    std::size_t bytes;
    int stream;
  };
  std::vector<Op> ops;
  std::uint64_t peak_requested = 0;
  {
    Allocator a(recording(path));
    Stream side = a.create_stream();
    const Stream streams[] = {nullptr, side};
    std::vector<void*> held;
    std::vector<std::size_t> sizes;
    for (int i = 0; i < 40; ++i) {
      const std::size_t bytes = (static_cast<std::size_t>(i % 7) + 1) * MiB / 3 + 512 * i;
      held.push_back(a.allocate(bytes, streams[i % 2]));
      sizes.push_back(bytes);
      ops.push_back({true, i, bytes, i % 2});
      if (i % 3 == 2) {  // free an earlier one, on the stream it was allocated on
        const int j = i - 2;
        a.deallocate(held[j], sizes[j], streams[j % 2]);
        held[j] = nullptr;
        ops.push_back({false, j, sizes[j], j % 2});
      }
    }
    peak_requested = static_cast<std::uint64_t>(a.stats().requested_bytes.peak);
    for (std::size_t j = 0; j < held.size(); ++j) {
      if (!held[j]) continue;
      a.deallocate(held[j], sizes[j], streams[j % 2]);
      ops.push_back({false, static_cast<int>(j), sizes[j], static_cast<int>(j % 2)});
    }
    a.destroy_stream(side);
  }
  const Trace t = read_trace(path);
  ASSERT_EQ(t.events.size(), ops.size());
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const Event& e = t.events[k];
    EXPECT_EQ(e.op, ops[k].alloc ? TraceOp::alloc : TraceOp::free) << "event " << k;
    EXPECT_EQ(e.id, static_cast<std::uint64_t>(ops[k].index)) << "event " << k;
    EXPECT_EQ(e.bytes, ops[k].bytes) << "event " << k;
    EXPECT_EQ(e.stream, static_cast<std::uint64_t>(ops[k].stream)) << "event " << k;
    if (k > 0) {
      EXPECT_GE(e.ts_us, t.events[k - 1].ts_us);
    }
  }
  ASSERT_NO_THROW(match_frees(t));
  EXPECT_EQ(t.computed_peak_live_bytes(), peak_requested);
  EXPECT_NE(t.meta.source.find("record"), std::string::npos) << t.meta.source;
  std::remove(path.c_str());
}

TEST(Record, DeviceAndPidArePartOfThePath) {
  const std::string pattern = temp_path("{pid}-{device}-{device}.csv");
  std::string expected = pattern;
  expected.replace(expected.find("{pid}-{device}-{device}"), 23,
                   std::to_string(::getpid()) + "-3-3");
  Config c = recording(pattern);
  c.device = 3;
  {
    Allocator a(c);
    a.deallocate(a.allocate(4096), 4096);
  }
  const Trace t = read_trace(expected);
  EXPECT_EQ(t.events.size(), 2u);
  std::remove(expected.c_str());
}

TEST(Record, AnUnwritablePathIsAnErrorNamingIt) {
  try {
    Allocator a(recording("/nonexistent-dir/run.csv"));
    FAIL() << "an allocator recording to a missing directory was created";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/run.csv"), std::string::npos)
        << e.what();
  }
}

TEST(Record, TheOptionParsesAndShowsAPath) {
  const Config c = Config::parse("record:/tmp/a:b/run-{device}.csv.gz");
  EXPECT_EQ(c.record, "/tmp/a:b/run-{device}.csv.gz");
  EXPECT_NE(c.describe().find("record:/tmp/a:b/run-{device}.csv.gz"), std::string::npos);
  EXPECT_EQ(Config::parse("record:").record, "");
  EXPECT_THROW(Config::parse("record:/tmp/a b"), config_error);
  EXPECT_THROW(Config::parse(std::string("record:/tmp/a\x01b")), config_error);
}

// Run by the next test in a process of its own: C API allocators are never
// destroyed, so only the exit handler can finish the file.
TEST(Record, CApiChildProcess) {
  if (std::getenv("MEMLAKE_TEST_RECORD_CHILD") == nullptr) GTEST_SKIP() << "a child's part";
  void* p = memlake_malloc(5 * MiB, 0, nullptr);
  ASSERT_NE(p, nullptr) << memlake_last_error();
  void* q = memlake_malloc(1000, 0, nullptr);
  ASSERT_NE(q, nullptr) << memlake_last_error();
  memlake_free(p, 5 * MiB, 0, nullptr);
  // q stays live: the trace ends with it allocated.
}

TEST(Record, CApiAllocatorsLeaveACompleteFileAtExit) {
  const std::string path = temp_path("capi-{device}.csv");
  ASSERT_EQ(test::run_self("Record.CApiChildProcess",
                           {"MEMLAKE_TEST_RECORD_CHILD=1",
                            "MEMLAKE_CONF=backend:host,capacity:256M,record:" + path}),
            0);
  std::string written = path;
  written.replace(written.find("{device}"), 8, "0");
  const Trace t = read_trace(written);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].bytes, 5 * MiB);
  EXPECT_EQ(t.events[1].bytes, 1000u);
  EXPECT_EQ(t.events[2].op, TraceOp::free);
  EXPECT_EQ(t.events[2].id, t.events[0].id);
  std::remove(written.c_str());
}

}  // namespace
}  // namespace memlake
