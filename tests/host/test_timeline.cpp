// The `timeline` option: what it writes is valid Chrome Trace Event JSON
// (trace_event_check.hpp) with a track per stream, the worker's and the
// mappings' tracks, counters equal to the allocator's stats at each point
// checked, a slice per allocation named by its rung (their counts equal the
// rung stats), instants for frees, OOM and reclaim; the ring keeps its bound
// and the state before its oldest event stays exact; the file is written
// when the allocator goes; the OOM message names the largest live blocks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "json_value.hpp"
#include "memlake/allocator.hpp"
#include "memlake/memlake.h"
#include "spawn_self.hpp"
#include "trace_event_check.hpp"

namespace memlake {
namespace {

using test::check_trace_events;
using test::JsonReader;
using test::JsonValue;

constexpr std::size_t MiB = std::size_t{1} << 20;

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "memlake-timeline-" + std::to_string(::getpid()) + "-" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Config timeline_config(const std::string& extra = "") {
  Config c = Config::parse("backend:host,capacity:256M,worker:inline,max_chunk:2M");
  c.timeline = temp_path("run-{device}.json");
  if (!extra.empty()) c.apply(extra);
  return c;
}

// The last value of each counter, and the events by kind.
struct Parsed {
  JsonValue doc;
  std::map<std::string, std::int64_t> counter;
  std::map<std::string, int> names;  // event name -> how many (not metadata)
  std::map<std::int64_t, std::string> threads;
  std::vector<const JsonValue*> events;
};

Parsed parse(const std::string& json) {
  Parsed p;
  p.doc = JsonReader::parse(json);
  for (const JsonValue& e : p.doc["traceEvents"].items) {
    const std::string& ph = e["ph"].str();
    if (ph == "M") {
      if (e["name"].str() == "thread_name") p.threads[e["tid"].integer()] = e["args"]["name"].str();
      continue;
    }
    p.events.push_back(&e);
    ++p.names[e["name"].str()];
    if (ph == "C") p.counter[e["name"].str()] = e["args"]["bytes"].integer();
  }
  return p;
}

void expect_counters_match(const Parsed& p, const Stats& s) {
  EXPECT_EQ(p.counter.at("live bytes"), s.live_bytes.current);
  EXPECT_EQ(p.counter.at("reserved bytes"), s.reserved_bytes.current);
  EXPECT_EQ(p.counter.at("mapped bytes"), s.mapped_bytes.current);
}

void expect_valid(const Parsed& p) {
  const std::vector<std::string> problems = check_trace_events(p.doc);
  for (const std::string& what : problems) ADD_FAILURE() << what;
}

// Sixteen one-chunk blocks freed in turn leave free memory scattered, so a
// large request stitches.
void scatter(Allocator& a, Stream s) {
  std::vector<void*> ps;
  for (int i = 0; i < 16; ++i) ps.push_back(a.allocate(2 * MiB, s));
  for (void* p : ps) a.deallocate(p, 2 * MiB, s);
  a.process_pending_frees();
}

TEST(Timeline, IsValidTraceEventJsonWithCountersEqualToTheStatsAtEachPoint) {
  Allocator a(timeline_config("reserve:4M"));
  Stream s1 = a.create_stream(), s2 = a.create_stream();
  std::vector<std::pair<void*, std::size_t>> held;
  struct Point {
    Stats stats;
    Parsed parsed;
  };
  std::vector<Point> points;
  auto checkpoint = [&] { points.push_back({a.stats(), parse(a.timeline_json())}); };

  checkpoint();  // nothing yet: all counters 0
  scatter(a, nullptr);
  checkpoint();
  void* big = a.allocate(8 * MiB);  // stitches
  held.push_back({big, 8 * MiB});
  held.push_back({a.allocate(16 * MiB), 16 * MiB});
  checkpoint();
  for (int i = 0; i < 30; ++i) {
    const std::size_t bytes = (i % 5 + 1) * MiB / 2 + 4096 * i;
    held.push_back({a.allocate(bytes, i % 2 ? s1 : s2), bytes});
  }
  checkpoint();
  for (std::size_t i = 3; i < held.size(); i += 2)
    a.deallocate(held[i].first, held[i].second, i % 4 == 1 ? s1 : s2);
  checkpoint();
  EXPECT_THROW(a.allocate(512 * MiB, s2), out_of_memory);
  a.empty_cache();
  checkpoint();

  for (const Point& pt : points) {
    expect_valid(pt.parsed);
    expect_counters_match(pt.parsed, pt.stats);
  }
  const Parsed& last = points.back().parsed;
  const Stats& s = points.back().stats;
  // A slice per allocation, named by its rung; an instant per free.
  int allocs = 0;
  for (const auto& [name, n] : last.names)
    if (name.rfind("alloc ", 0) == 0) allocs += n;
  EXPECT_EQ(allocs, s.allocs.current);
  EXPECT_EQ(last.names.count("free") ? last.names.at("free") : 0, s.frees.current);
  EXPECT_EQ(last.names.count("alloc stitch") ? last.names.at("alloc stitch") : 0,
            s.rung_stitch.current);
  EXPECT_EQ(last.names.count("alloc new_memory") ? last.names.at("alloc new_memory") : 0,
            s.rung_new_memory.current);
  EXPECT_GT(s.worker_reserves.current, 1) << "the workload must make the worker's reserve";
  EXPECT_EQ(last.names.count("reserve") ? last.names.at("reserve") : 0,
            s.worker_reserves.current + s.worker_failures.current);
  EXPECT_EQ(last.names.at("out of memory"), 1);
  EXPECT_GE(last.names.at("reclaim"), 1);
  EXPECT_GT(last.names.at("map"), 0);
  EXPECT_GT(last.names.at("unmap"), 0);
  // The tracks: worker, mappings, allocator, and one per stream used.
  std::set<std::string> tracks;
  for (const auto& [tid, name] : last.threads) tracks.insert(name);
  EXPECT_TRUE(tracks.count("mapping worker"));
  EXPECT_TRUE(tracks.count("mappings"));
  EXPECT_TRUE(tracks.count("allocator"));
  EXPECT_TRUE(tracks.count("stream 0 (default)"));
  int stream_tracks = 0;
  for (const std::string& t : tracks) stream_tracks += t.rfind("stream ", 0) == 0;
  EXPECT_EQ(stream_tracks, 3);
  // Every allocation on a stream's track, with its duration and rung.
  for (const JsonValue* e : last.events) {
    if ((*e)["ph"].str() != "X" || (*e)["name"].str().rfind("alloc ", 0) != 0) continue;
    EXPECT_TRUE(last.threads.at((*e)["tid"].integer()).rfind("stream ", 0) == 0);
    EXPECT_EQ("alloc " + (*e)["args"]["rung"].str(), (*e)["name"].str());
  }
}

// Counters are replayed from the window's start: the sum of the changes
// equals the final value, and the initial values match what was live then.
TEST(Timeline, TheRingKeepsItsBoundAndTheStateBeforeItStaysExact) {
  Allocator a(timeline_config("timeline_events:1024,capacity:2G"));
  std::vector<std::pair<void*, std::size_t>> held;
  for (int i = 0; i < 1500; ++i) {
    const std::size_t bytes = (i % 9 + 1) * 300000;
    held.push_back({a.allocate(bytes), bytes});
    if (i % 3 == 2) {
      a.deallocate(held[i - 1].first, held[i - 1].second);
      held[i - 1].first = nullptr;
    }
  }
  const Stats s = a.stats();
  const Parsed p = parse(a.timeline_json());
  expect_valid(p);
  expect_counters_match(p, s);
  const JsonValue& other = p.doc["otherData"];
  EXPECT_EQ(other["events_kept"].integer(), 1024);
  EXPECT_GT(other["events_dropped"].integer(), 0);
  // The blocks live before the window, plus the window's allocations, less
  // its frees, are exactly the blocks live now.
  std::set<std::string> live;
  std::int64_t live_bytes = -1;
  for (const JsonValue* e : p.events) {
    const std::string& name = (*e)["name"].str();
    if ((*e)["ph"].str() == "C" && name == "live bytes" && live_bytes < 0)
      live_bytes = (*e)["args"]["bytes"].integer();
    if (name == "live before the window" || name.rfind("alloc ", 0) == 0) {
      EXPECT_TRUE(live.insert((*e)["args"]["ptr"].str()).second);
    } else if (name == "free") {
      EXPECT_EQ(live.erase((*e)["args"]["ptr"].str()), 1u);
    }
  }
  std::set<std::string> expected;
  std::int64_t before_window = 0;
  for (const JsonValue* e : p.events)
    if ((*e)["name"].str() == "live before the window")
      before_window += (*e)["args"]["size"].integer();
  EXPECT_EQ(live_bytes, before_window) << "the first live-bytes counter is the window's start";
  for (const auto& [ptr, bytes] : held) {
    if (ptr == nullptr) continue;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", ptr);
    expected.insert(buf);
  }
  EXPECT_EQ(live, expected);
  for (auto& [ptr, bytes] : held)
    if (ptr) a.deallocate(ptr, bytes);
}

// Dumps from another thread while threads allocate, with the worker on its
// own thread: every dump is valid, and the last one, after the threads
// joined, matches the stats.
TEST(Timeline, DumpsWhileThreadsAllocateAndTheWorkerRuns) {
  Allocator a(timeline_config("worker:thread,capacity:512M"));
  std::atomic<bool> go{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      Stream s = a.create_stream();
      std::vector<std::pair<void*, std::size_t>> held;
      for (int i = 0; go && i < 400; ++i) {
        const std::size_t bytes = ((i + t) % 7 + 1) * MiB / 2 + 512 * i;
        held.push_back({a.allocate(bytes, s), bytes});
        if (held.size() > 8) {
          a.deallocate(held.front().first, held.front().second, s);
          held.erase(held.begin());
        }
      }
      for (auto& [p, bytes] : held) a.deallocate(p, bytes, s);
      a.destroy_stream(s);
    });
  }
  for (int i = 0; i < 10; ++i) {
    expect_valid(parse(a.timeline_json()));
    EXPECT_NO_THROW(JsonReader::parse(a.memory_snapshot_json()));
  }
  go = false;
  for (std::thread& t : threads) t.join();
  const Parsed p = parse(a.timeline_json());
  expect_valid(p);
  expect_counters_match(p, a.stats());
}

TEST(Timeline, IsWrittenToItsPathWhenTheAllocatorGoes) {
  const std::string path = temp_path("run-0.json");
  std::remove(path.c_str());
  Stats last;
  {
    Allocator a(timeline_config());
    void* p = a.allocate(3 * MiB);
    a.deallocate(p, 3 * MiB);
    last = a.stats();
  }
  const Parsed p = parse(read_file(path));
  expect_valid(p);
  EXPECT_EQ(p.names.at("alloc new_memory"), 1);
  EXPECT_EQ(p.counter.at("live bytes"), 0);
  EXPECT_EQ(p.counter.at("reserved bytes"), last.reserved_bytes.current);
  std::remove(path.c_str());
}

// The C API's allocators live until the process exits: the file is written
// by the exit handler (the child process allocates and exits).
TEST(Timeline, TheCApiAllocatorsFileIsWrittenAtExit) {
  if (const char* dump = std::getenv("MEMLAKE_TEST_TIMELINE_DUMP")) {
    void* p = memlake_malloc(5 * MiB, 0, nullptr);
    ASSERT_NE(p, nullptr) << memlake_last_error();
    ASSERT_EQ(memlake_timeline_dump(0, dump), 0) << memlake_last_error();
    return;  // p stays live: the exit file shows it
  }
  const std::string exit_path = temp_path("c-api-exit.json");
  const std::string dump_path = temp_path("on-demand.json");
  std::remove(exit_path.c_str());
  std::remove(dump_path.c_str());
  const int rc = test::run_self("Timeline.TheCApiAllocatorsFileIsWrittenAtExit",
                                {"MEMLAKE_TEST_TIMELINE_DUMP=" + dump_path,
                                 "MEMLAKE_CONF=backend:host,capacity:64M,timeline:" + exit_path});
  ASSERT_EQ(rc, 0);
  const Parsed p = parse(read_file(exit_path));
  expect_valid(p);
  EXPECT_EQ(p.counter.at("live bytes"), static_cast<std::int64_t>(5 * MiB));
  const Parsed on_demand = parse(read_file(dump_path));
  EXPECT_EQ(on_demand.counter.at("live bytes"), static_cast<std::int64_t>(5 * MiB));
  std::remove(exit_path.c_str());
  std::remove(dump_path.c_str());
}

TEST(Timeline, CallsWithoutTheOptionSayWhatIsMissing) {
  Allocator a(Config::parse("backend:host,capacity:64M"));
  try {
    a.dump_timeline(temp_path("never.json"));
    FAIL() << "expected an error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the timeline option"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(a.memory_snapshot_json(), error);
  EXPECT_EQ(memlake_timeline_dump(63, "/tmp/x.json"), -1);
  EXPECT_NE(std::string(memlake_last_error()).find("device 63 has no allocator yet"),
            std::string::npos)
      << memlake_last_error();
}

TEST(Timeline, AnUnwritablePathIsAnErrorNamingIt) {
  Allocator a(timeline_config());
  try {
    a.dump_timeline("/nonexistent-dir/t.json");
    FAIL() << "expected an error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/t.json"), std::string::npos);
  }
}

TEST(Timeline, TheOptionsBoundsAreChecked) {
  EXPECT_THROW(Config::parse("timeline_events:10"), config_error);
  EXPECT_NO_THROW(Config::parse("timeline_events:1024,timeline:/tmp/t-{pid}.json"));
  EXPECT_THROW(Config::parse("timeline:/tmp/a b.json"), config_error);
}

// With profiling on, the OOM message names the largest live blocks; with it
// off, the message stays as it was.
TEST(OomReport, NamesTheLargestLiveBlocksWhenProfilingIsOn) {
  auto message = [](Config c) {
    Allocator a(c);
    void* big = a.allocate(40 * MiB);
    void* mid = a.allocate(24 * MiB);
    void* small = a.allocate(1 * MiB);
    std::string what;
    try {
      a.allocate(60 * MiB);
    } catch (const out_of_memory& e) {
      what = e.what();
    }
    a.deallocate(big, 40 * MiB);
    a.deallocate(mid, 24 * MiB);
    a.deallocate(small, 1 * MiB);
    return what;
  };
  Config on = timeline_config("capacity:96M");
  const std::string with = message(on);
  EXPECT_NE(with.find("the 3 largest of 3 live blocks: 40.00 MiB at 0x"), std::string::npos)
      << with;
  EXPECT_LT(with.find("40.00 MiB"), with.find("24.00 MiB"));
  EXPECT_LT(with.find("24.00 MiB"), with.find("1.00 MiB"));
  EXPECT_NE(with.find("the timeline is written to"), std::string::npos) << with;
  const std::string without = message(Config::parse("backend:host,capacity:96M,worker:inline"));
  EXPECT_NE(without.find("out of memory"), std::string::npos);
  EXPECT_EQ(without.find("live blocks:"), std::string::npos) << without;
}

}  // namespace
}  // namespace memlake
