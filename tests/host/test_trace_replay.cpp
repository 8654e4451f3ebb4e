// The replay layer of memlake-replay (the memlake_replay library): sampling,
// percentiles, the capacity search, and small traces through memlake on the
// HostBackend and through the GMLake policy.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>

#include "backend/adaptors/fault_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "replay/capacity.hpp"
#include "replay/replay.hpp"
#include "replay/steps.hpp"

namespace memlake {
namespace {

constexpr std::uint64_t MiB = 1024 * 1024;

TEST(TraceReplay, SamplerKeepsTheMaximumPerBucket) {
  Sampler s(10, 4);  // buckets of 3 events: 4 points
  EXPECT_EQ(s.bucket_size(), 3u);
  const std::uint64_t v[10] = {5, 9, 1, 2, 2, 2, 7, 0, 0, 4};
  for (std::size_t i = 0; i < 10; ++i) s.add(i, v[i]);
  EXPECT_EQ(s.values(), (std::vector<std::uint64_t>{9, 2, 7, 4}));
  Sampler few(3, 2000);
  EXPECT_EQ(few.bucket_size(), 1u);
  EXPECT_EQ(few.values().size(), 3u);
}

TEST(TraceReplay, Percentiles) {
  std::vector<std::uint32_t> ns(100);
  std::iota(ns.begin(), ns.end(), 1);  // 1..100
  std::reverse(ns.begin(), ns.end());
  const Percentiles p = percentiles(ns);
  EXPECT_EQ(p.count, 100u);
  EXPECT_EQ(p.median, 51u);
  EXPECT_EQ(p.p99, 99u);
  EXPECT_EQ(p.max, 100u);
  EXPECT_EQ(percentiles({7}).p99, 7u);
  EXPECT_EQ(percentiles({7}).max, 7u);
  EXPECT_EQ(percentiles({}).count, 0u);
}

TEST(TraceReplay, CapacitySearchFindsTheSmallestStep) {
  int tries = 0;
  auto fits = [](std::uint64_t c) { return c >= 37 * MiB; };
  EXPECT_EQ(min_capacity_search(0, 100 * MiB, 2 * MiB, fits, &tries), 38 * MiB);
  EXPECT_GT(tries, 0);
  EXPECT_LE(tries, 6);  // log2(50 steps)
  tries = 0;
  EXPECT_EQ(min_capacity_search(36 * MiB, 38 * MiB, 2 * MiB, fits, &tries), 38 * MiB);
  EXPECT_EQ(tries, 0);
}

TEST(TraceReplay, FindMinCapacityGrowsThenBisects) {
  auto fits = [](std::uint64_t c) { return c >= 37 * MiB; };
  // Start too low: grows 20 -> 26 -> 34 -> 44 MiB (25% steps, whole 2 MiB),
  // then bisects between 36 and 44 MiB.
  CapacitySearch c = find_min_capacity(20 * MiB, 1000 * MiB, 36 * MiB + 1, 2 * MiB, fits);
  EXPECT_TRUE(c.found);
  EXPECT_EQ(c.bytes, 38 * MiB);
  EXPECT_EQ(c.tries, 4 + 2);
  // Start at the answer: one try to confirm it, then bisection finds nothing lower.
  c = find_min_capacity(38 * MiB, 1000 * MiB, 30 * MiB, 2 * MiB, fits);
  EXPECT_EQ(c.bytes, 38 * MiB);
  // Never fits within the limit: tries 20, 26, then 30 MiB (the limit).
  c = find_min_capacity(20 * MiB, 30 * MiB, 10 * MiB, 2 * MiB, fits);
  EXPECT_FALSE(c.found);
  EXPECT_EQ(c.tries, 3);
}

TEST(TraceReplay, NeededCapacityBisectsBetweenLiveAndReserved) {
  auto fits = [](std::uint64_t c) { return c >= 37 * MiB; };
  // Between 30 MiB live (28 cannot fit) and 50 MiB reserved: 11 steps.
  CapacitySearch c = find_needed_capacity(30 * MiB, 50 * MiB, 1000 * MiB, 2 * MiB, fits);
  EXPECT_TRUE(c.found);
  EXPECT_EQ(c.bytes, 38 * MiB);
  EXPECT_GE(c.tries, 3);
  EXPECT_LE(c.tries, 4);  // ceil(log2(11))
  // Only the peak itself fits: it is replayed to be sure.
  auto at_peak = [](std::uint64_t c) { return c >= 50 * MiB; };
  c = find_needed_capacity(30 * MiB, 50 * MiB, 1000 * MiB, 2 * MiB, at_peak);
  EXPECT_TRUE(c.found);
  EXPECT_EQ(c.bytes, 50 * MiB);
  EXPECT_EQ(c.tries, 4 + 1);
  // Live already at a whole step: nothing to bisect, one try.
  int calls = 0;
  c = find_needed_capacity(50 * MiB, 50 * MiB, 1000 * MiB, 2 * MiB, [&](std::uint64_t v) {
    ++calls;
    return v >= 50 * MiB;
  });
  EXPECT_EQ(c.bytes, 50 * MiB);
  EXPECT_EQ(c.tries, 1);
  EXPECT_EQ(calls, 1);
  // Under a limit it needs more than it took without one: the search grows.
  auto above = [](std::uint64_t c) { return c >= 61 * MiB; };
  c = find_needed_capacity(30 * MiB, 50 * MiB, 1000 * MiB, 2 * MiB, above);
  EXPECT_TRUE(c.found);
  EXPECT_EQ(c.bytes, 62 * MiB);
  auto never = [](std::uint64_t) { return false; };
  EXPECT_FALSE(find_needed_capacity(30 * MiB, 50 * MiB, 60 * MiB, 2 * MiB, never).found);
}

// alloc a (4 MiB, default stream), b (4 MiB, stream 5), free a, alloc c
// (4 MiB, default stream), free b, free c.
Trace two_stream_trace() {
  return parse_trace(
      "# memlake-trace v1 workload=two_streams\n"
      "# baseline native peak_reserved_bytes=41943040\n"
      "ts_us,op,id,bytes,stream\n"
      "0,alloc,1,4194304,0\n"
      "1,alloc,2,4194304,5\n"
      "2,free,1,4194304,0\n"
      "3,alloc,3,4194304,0\n"
      "4,free,2,4194304,5\n"
      "5,free,3,4194304,0\n",
      "two_streams.csv");
}

Config host_config(std::size_t capacity) {
  Config c;
  c.backend = BackendKind::host;
  c.capacity = capacity;
  return c;
}

TEST(TraceReplay, MemlakeReplayOnTheHostBackend) {
  const Trace t = two_stream_trace();
  const std::vector<std::uint32_t> alloc_of = match_frees(t);
  ReplaySetup setup;
  setup.trace = &t;
  setup.alloc_of = &alloc_of;
  setup.series_points = 4;
  const MemlakeResult r = replay_memlake(setup, host_config(0));
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.events_replayed, 6u);
  EXPECT_EQ(r.stats.allocs.current, 3);
  EXPECT_EQ(r.stats.frees.current, 3);
  EXPECT_EQ(r.stats.requested_bytes.peak, static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(r.stats.requested_bytes.current, 0);
  EXPECT_GE(r.stats.reserved_bytes.peak, static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(r.alloc_ns.count, 3u);
  EXPECT_EQ(r.free_ns.count, 3u);
  EXPECT_EQ(r.all_ns.count, 6u);
  ASSERT_TRUE(r.warmup.has_value());
  EXPECT_EQ(r.warmup_events, 1u);  // 30% of 6 events
  EXPECT_EQ(r.warmup->allocs.current, 1);
  EXPECT_EQ(r.reserved_series.size(), 3u);  // buckets of 2 events
}

// A trace from CSV text with what replaying it needs.
struct Replayable {
  Replayable(std::string_view csv, const char* name)
      : trace(parse_trace(csv, name)), alloc_of(match_frees(trace)) {
    setup.trace = &trace;
    setup.alloc_of = &alloc_of;
  }
  Replayable(const Replayable&) = delete;
  Replayable& operator=(const Replayable&) = delete;
  Trace trace;
  std::vector<std::uint32_t> alloc_of;
  ReplaySetup setup;
};

std::int64_t changed(const SlowAlloc& a, std::string_view stat) {
  for (const auto& [name, delta] : a.changed)
    if (name == stat) return delta;
  return 0;
}

TEST(TraceReplay, SlowestAllocationsCarryTheStatsTheyChanged) {
  // The first block needs new memory; the second takes its place back.
  Replayable t(
      "ts_us,op,id,bytes,stream\n0,alloc,1,4194304,0\n1,free,1,4194304,0\n"
      "2,alloc,2,4194304,0\n3,free,2,4194304,0\n",
      "slowest.csv");
  ReplaySetup& setup = t.setup;
  setup.warmup_fraction = 0;
  setup.slowest = 5;
  const MemlakeResult r = replay_memlake(setup, host_config(0));
  ASSERT_EQ(r.slowest.size(), 2u);
  EXPECT_GE(r.slowest[0].ns, r.slowest[1].ns);
  const SlowAlloc& fresh = r.slowest[0].event == 0 ? r.slowest[0] : r.slowest[1];
  const SlowAlloc& reused = r.slowest[0].event == 0 ? r.slowest[1] : r.slowest[0];
  EXPECT_EQ(reused.event, 2u);
  EXPECT_EQ(fresh.path, Rung::new_memory);
  EXPECT_EQ(changed(fresh, "reserved_bytes"), static_cast<std::int64_t>(4 * MiB));
  EXPECT_GE(changed(fresh, "chunks_created"), 1);
  EXPECT_GE(changed(fresh, "critical_path_vmm_calls"), 3);  // create, map, set access
  EXPECT_EQ(changed(reused, "chunks_created"), 0);
  EXPECT_EQ(changed(reused, "critical_path_vmm_calls"), 0);
  // What every allocation changes is left out.
  for (const SlowAlloc& a : r.slowest) {
    EXPECT_EQ(changed(a, "allocs"), 0);
    EXPECT_EQ(changed(a, "live_bytes"), 0);
  }

  setup.slowest = 1;
  EXPECT_EQ(replay_memlake(setup, host_config(0)).slowest.size(), 1u);
  setup.timing = false;
  EXPECT_TRUE(replay_memlake(setup, host_config(0)).slowest.empty());
}

// Parameters allocated once, then `steps` steps of two activations freed
// at the step's end, then the parameters freed.
std::string stepped_trace(int steps) {
  std::string csv = "ts_us,op,id,bytes,stream\n0,alloc,1,104857600,0\n";
  int id = 2;
  for (int s = 0; s < steps; ++s) {
    const int a = id++, b = id++;
    csv += "0,alloc," + std::to_string(a) + ",52428800,0\n";
    csv += "0,alloc," + std::to_string(b) + ",31457280,0\n";
    csv += "0,free," + std::to_string(b) + ",31457280,0\n";
    csv += "0,free," + std::to_string(a) + ",52428800,0\n";
  }
  return csv + "0,free,1,104857600,0\n";
}

TEST(TraceReplay, StepsAreFoundWhereLiveBytesReturnToTheirLow) {
  const Trace t = parse_trace(stepped_trace(6), "steps.csv");
  // Each step after the first begins after the last free of the one before;
  // the return to the low at the very end begins none.
  EXPECT_EQ(detect_steps(t), (std::vector<std::size_t>{5, 9, 13, 17, 21}));
  EXPECT_TRUE(detect_steps(parse_trace(stepped_trace(2), "two.csv")).empty());
  // Live bytes that only grow show no steps.
  std::string grow = "ts_us,op,id,bytes,stream\n";
  for (int id = 1; id <= 20; ++id) grow += "0,alloc," + std::to_string(id) + ",1048576,0\n";
  EXPECT_TRUE(detect_steps(parse_trace(grow, "grow.csv")).empty());
}

TEST(TraceReplay, PerStepStatsShowTheSteadyState) {
  Replayable replayable(stepped_trace(6), "steps.csv");
  const MemlakeResult r = replay_memlake(replayable.setup, host_config(0));
  ASSERT_EQ(r.steps.size(), 6u);
  EXPECT_EQ(r.steps[0].first_event, 0u);
  EXPECT_EQ(r.steps[1].first_event, 5u);
  // The first step makes the memory; repeated steps find it mapped.
  EXPECT_GT(r.steps[0].critical_path_vmm_calls, 0);
  for (std::size_t s = 1; s < r.steps.size(); ++s) {
    EXPECT_EQ(r.steps[s].critical_path_vmm_calls, 0) << "step " << s;
    EXPECT_EQ(r.steps[s].alloc_ns.count, 2u) << "step " << s;
  }
  std::int64_t total = 0;
  for (const StepReport& s : r.steps) total += s.critical_path_vmm_calls;
  EXPECT_EQ(total, r.stats.critical_path_vmm_calls.current);
}

// A 4 MiB block, then a 64 MiB one that needs new chunks after warm-up.
constexpr const char* kGrowing =
    "ts_us,op,id,bytes,stream\n0,alloc,1,4194304,0\n1,free,1,4194304,0\n"
    "2,alloc,2,67108864,0\n3,free,2,67108864,0\n";

TEST(TraceReplay, AllocatorTimeSumsTheTimedCallsAndSplitsAtWarmup) {
  // Each chunk creation takes at least 2 ms, on the replaying thread (no
  // worker): those milliseconds are in the allocator's time and in its VMM
  // time, on their side of warm-up.
  constexpr auto kCreate = std::chrono::milliseconds(2);
  constexpr auto kCreateNs = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(kCreate).count());
  Replayable t(kGrowing, "growing.csv");
  t.setup.warmup_fraction = 0.5;
  t.setup.backend = [&](const Config&) {
    auto f = std::make_unique<FaultBackend>(std::make_unique<HostBackend>());
    f->add_latency(VmmOp::create, kCreate);
    return f;
  };
  Config c = host_config(0);
  c.worker = WorkerMode::off;
  const MemlakeResult r = replay_memlake(t.setup, c);
  ASSERT_TRUE(r.warmup.has_value());
  const auto created_before = static_cast<std::uint64_t>(r.warmup->chunks_created.current);
  const auto created = static_cast<std::uint64_t>(r.stats.chunks_created.current);
  ASSERT_GE(created_before, 1u);
  ASSERT_GT(created, created_before) << "the 64 MiB block needs new chunks after warm-up";

  const auto vmm_ns = static_cast<std::uint64_t>(r.stats.critical_path_vmm_ns.current);
  const auto vmm_ns_after = after_warmup(r, &Stats::critical_path_vmm_ns);
  ASSERT_TRUE(vmm_ns_after.has_value());
  EXPECT_GE(vmm_ns, created * kCreateNs);
  EXPECT_GE(static_cast<std::uint64_t>(*vmm_ns_after), (created - created_before) * kCreateNs);
  EXPECT_LE(static_cast<std::uint64_t>(*vmm_ns_after), vmm_ns - created_before * kCreateNs);

  ASSERT_TRUE(r.allocator_ns_total_after_warmup.has_value());
  const std::uint64_t total = r.allocator_ns_total, after = *r.allocator_ns_total_after_warmup;
  EXPECT_GE(total, vmm_ns) << "VMM calls on this thread happen inside allocate and deallocate";
  EXPECT_GE(after, static_cast<std::uint64_t>(*vmm_ns_after));
  EXPECT_GE(total - after, created_before * kCreateNs) << "the first creation is before warm-up";
  EXPECT_LE(total, static_cast<std::uint64_t>(r.seconds * 1e9)) << "timed calls within the replay";
  EXPECT_LE(total, r.all_ns.count * r.all_ns.max);

  EXPECT_EQ(r.alloc_ns_after_warmup.count, 1u);
  EXPECT_GE(r.alloc_ns_after_warmup.max, kCreateNs);
  EXPECT_LE(r.alloc_ns_after_warmup.max, r.alloc_ns.max);
  EXPECT_LE(r.alloc_ns_after_warmup.max, after);

  t.setup.timing = false;
  const MemlakeResult untimed = replay_memlake(t.setup, c);
  EXPECT_EQ(untimed.allocator_ns_total, 0u);
}

TEST(TraceReplay, AllocatorTimeAfterWarmupIsNoneWhenWarmupNeverEnds) {
  Replayable t(kGrowing, "growing.csv");
  t.setup.warmup_fraction = 0.75;  // three events; out of memory at the third
  const MemlakeResult r = replay_memlake(t.setup, host_config(8 * MiB));
  EXPECT_FALSE(r.fits);
  EXPECT_FALSE(r.warmup.has_value());
  EXPECT_FALSE(r.allocator_ns_total_after_warmup.has_value());
  EXPECT_FALSE(after_warmup(r, &Stats::critical_path_vmm_ns).has_value());
  EXPECT_GT(r.allocator_ns_total, 0u);
}

TEST(TraceReplay, MemlakeReportsWhereItRunsOutOfMemory) {
  // Three live 4 MiB blocks cannot fit in 8 MiB.
  Replayable replayable(
      "ts_us,op,id,bytes,stream\n0,alloc,1,4194304,0\n1,alloc,2,4194304,0\n"
      "2,alloc,3,4194304,0\n3,free,1,4194304,0\n",
      "oom.csv");
  const Trace& t = replayable.trace;
  const ReplaySetup& setup = replayable.setup;
  const MemlakeResult r = replay_memlake(setup, host_config(8 * MiB));
  EXPECT_FALSE(r.fits);
  ASSERT_TRUE(r.oom_event.has_value());
  EXPECT_LE(*r.oom_event, 2u);
  EXPECT_EQ(t.events[*r.oom_event].op, TraceOp::alloc);
  EXPECT_EQ(r.events_replayed, *r.oom_event);
  EXPECT_FALSE(r.oom_message.empty());
  EXPECT_TRUE(replay_memlake(setup, host_config(64 * MiB)).fits);
}

TEST(TraceReplay, GmlakeReplay) {
  const Trace t = two_stream_trace();
  const std::vector<std::uint32_t> alloc_of = match_frees(t);
  ReplaySetup setup;
  setup.trace = &t;
  setup.alloc_of = &alloc_of;
  setup.series_points = 6;
  // 4 MiB requests take 20 MiB segments; streams do not share them; c
  // reuses a's segment: 40 MiB.
  const GmlakeResult r = replay_gmlake(setup, GmlakeOptions{});
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.peak_reserved, 40 * MiB);
  EXPECT_EQ(r.peak_requested, 8 * MiB);
  EXPECT_EQ(r.counters.path_new, 2u);
  EXPECT_EQ(r.counters.path_block, 1u);
  EXPECT_EQ(r.reserved_series, (std::vector<std::uint64_t>{20 * MiB, 40 * MiB, 40 * MiB, 40 * MiB,
                                                           40 * MiB, 40 * MiB}));
  GmlakeOptions small;
  small.capacity = 30 * MiB;
  const GmlakeResult o = replay_gmlake(setup, small);
  EXPECT_FALSE(o.fits);
  EXPECT_EQ(o.oom_event, 1u);
  EXPECT_EQ(live_series(t, 6),
            (std::vector<std::uint64_t>{4 * MiB, 8 * MiB, 4 * MiB, 8 * MiB, 4 * MiB, 0}));
}

}  // namespace
}  // namespace memlake
