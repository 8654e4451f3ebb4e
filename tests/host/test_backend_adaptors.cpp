// The backend adaptors over a HostBackend: the base forwards every call,
// CountingBackend counts calls by kind and by thread (critical path, worker),
// FaultBackend fails chosen calls without side effects or slows them down,
// LimitingBackend behaves like a small device, TurnTakingBackend holds a
// background thread's calls while the allocating thread has its turn, and a stack of them reports
// the layer that failed. The backend contract itself runs over these stacks
// too (tests/suites/test_backend_vm.cpp, test_backend_streams.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "backend/adaptors/backend_adaptor.hpp"
#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/adaptors/limiting_backend.hpp"
#include "backend/adaptors/turn_taking_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/errors.hpp"
#include "suites/stream_jobs.hpp"

namespace memlake {
namespace {

using test::Gate;
using ::testing::HasSubstr;

constexpr std::size_t kG = std::size_t{2} << 20;  // default granularity

unsigned char* bytes(DevicePtr va) {
  return reinterpret_cast<unsigned char*>(va);
}

void fill(DevicePtr va, std::size_t size, unsigned seed) {
  for (std::size_t i = 0; i < size; i += 4096)
    bytes(va)[i] = static_cast<unsigned char>(seed + i / 4096);
  bytes(va)[size - 1] = static_cast<unsigned char>(seed ^ 0x5a);
}

bool holds(DevicePtr va, std::size_t size, unsigned seed) {
  for (std::size_t i = 0; i < size; i += 4096) {
    if (bytes(va)[i] != static_cast<unsigned char>(seed + i / 4096)) return false;
  }
  return bytes(va)[size - 1] == static_cast<unsigned char>(seed ^ 0x5a);
}

HostBackendOptions small(std::size_t capacity_granules) {
  HostBackendOptions o;
  o.capacity = capacity_granules * kG;
  return o;
}

template <class F>
std::chrono::nanoseconds time_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::steady_clock::now() - t0;
}

// The smallest adaptor: forwards everything.
class PassThrough final : public BackendAdaptor {
 public:
  explicit PassThrough(std::unique_ptr<Backend> up) : BackendAdaptor(std::move(up), "pass") {}
};
static_assert(IsBackend<PassThrough>);

TEST(BackendAdaptor, ForwardsEveryCall) {
  PassThrough p(std::make_unique<HostBackend>(small(8)));
  auto& host = static_cast<HostBackend&>(p.upstream());
  EXPECT_STREQ(p.name(), "pass(host)");
  EXPECT_EQ(p.granularity(), kG);
  EXPECT_EQ(p.capacity(), 8 * kG);
  EXPECT_EQ(p.device(), 0);

  ChunkHandle c = 0;
  DevicePtr va = 0, vb = 0;
  ASSERT_EQ(p.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(p.reserve(kG, &va), Status::ok);
  ASSERT_EQ(p.reserve(kG, &vb), Status::ok);
  ASSERT_EQ(p.map(va, kG, c), Status::ok);
  ASSERT_EQ(p.map(vb, kG, c), Status::ok);
  ASSERT_EQ(p.set_access(va, kG), Status::ok);
  ASSERT_EQ(p.set_access(vb, kG), Status::ok);
  EXPECT_EQ(p.physical_bytes(), kG);
  EXPECT_EQ(host.mapped_ranges(), 2u);
  fill(va, kG, 3);
  EXPECT_TRUE(holds(vb, kG, 3));
  EXPECT_EQ(p.unmap(va, kG), Status::ok);
  EXPECT_EQ(p.unmap(vb, kG), Status::ok);
  EXPECT_EQ(p.unreserve(va, kG), Status::ok);
  EXPECT_EQ(p.unreserve(vb, kG), Status::ok);
  EXPECT_EQ(p.release_chunk(c), Status::ok);
  EXPECT_EQ(host.live_chunks(), 0u);
  EXPECT_EQ(p.release_chunk(c), Status::invalid_argument);
  EXPECT_THAT(p.last_error(), HasSubstr("unknown chunk handle"));

  StreamHandle s = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(p.stream_create(&s), Status::ok);
  ASSERT_EQ(p.event_create(&e), Status::ok);
  Gate gate;
  ASSERT_EQ(p.launch_host_func(s, Gate::job, &gate), Status::ok);
  ASSERT_EQ(p.event_record(e, s), Status::ok);
  EXPECT_EQ(p.event_query(e), Status::not_ready);
  ASSERT_EQ(p.stream_wait_event(nullptr, e), Status::ok);
  gate.open();
  ASSERT_EQ(p.stream_synchronize(nullptr), Status::ok);
  EXPECT_EQ(p.event_query(e), Status::ok);
  bool capturing = true;
  EXPECT_EQ(p.stream_is_capturing(s, &capturing), Status::ok);
  EXPECT_FALSE(capturing);
  EXPECT_EQ(p.event_destroy(e), Status::ok);
  EXPECT_EQ(p.stream_destroy(s), Status::ok);
}

TEST(BackendAdaptor, RejectsANullUpstream) {
  EXPECT_THROW(PassThrough(nullptr), backend_error);
}

// A full map cycle of `chunks` chunks of one granule: 1 reserve, n creates,
// n maps, 1 set_access, 1 unmap, n releases, 1 unreserve.
Status cycle(Backend& b, std::size_t chunks) {
  DevicePtr va = 0;
  std::vector<ChunkHandle> c(chunks);
  Status s = b.reserve(chunks * kG, &va);
  if (s != Status::ok) return s;
  for (std::size_t i = 0; i < chunks; ++i) {
    if ((s = b.create_chunk(kG, &c[i])) != Status::ok) return s;
    if ((s = b.map(va + i * kG, kG, c[i])) != Status::ok) return s;
  }
  if ((s = b.set_access(va, chunks * kG)) != Status::ok) return s;
  if ((s = b.unmap(va, chunks * kG)) != Status::ok) return s;
  for (auto h : c) {
    if ((s = b.release_chunk(h)) != Status::ok) return s;
  }
  return b.unreserve(va, chunks * kG);
}

TEST(CountingBackend, CountsEachOperation) {
  CountingBackend b(std::make_unique<HostBackend>());
  EXPECT_STREQ(b.name(), "counting(host)");
  ASSERT_EQ(cycle(b, 3), Status::ok);
  EXPECT_EQ(b.calls(VmmOp::reserve), 1u);
  EXPECT_EQ(b.calls(VmmOp::create), 3u);
  EXPECT_EQ(b.calls(VmmOp::map), 3u);
  EXPECT_EQ(b.calls(VmmOp::set_access), 1u);
  EXPECT_EQ(b.calls(VmmOp::unmap), 1u);
  EXPECT_EQ(b.calls(VmmOp::release), 3u);
  EXPECT_EQ(b.calls(VmmOp::unreserve), 1u);
  EXPECT_EQ(b.total(), 13u);
  EXPECT_EQ(b.critical_path(), 0u);
  EXPECT_EQ(b.worker(), 0u);

  // Failed calls count too; stream calls do not.
  EXPECT_EQ(b.release_chunk(999), Status::invalid_argument);
  EXPECT_EQ(b.calls(VmmOp::release), 4u);
  StreamHandle s = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  EXPECT_EQ(b.total(), 14u);
  b.reset();
  EXPECT_EQ(b.total(), 0u);
  EXPECT_EQ(b.calls(VmmOp::create), 0u);
}

TEST(CountingBackend, SeparatesCriticalPathAndWorkerCalls) {
  CountingBackend b(std::make_unique<HostBackend>());
  ChunkHandle c1 = 0, c2 = 0;
  EXPECT_FALSE(CriticalPathScope::active());
  {
    CriticalPathScope scope;
    EXPECT_TRUE(CriticalPathScope::active());
    ASSERT_EQ(b.create_chunk(kG, &c1), Status::ok);
    {
      CriticalPathScope nested;
      ASSERT_EQ(b.create_chunk(kG, &c2), Status::ok);
    }
    EXPECT_TRUE(CriticalPathScope::active()) << "the outer scope is still open";
    // Another thread is not inside this allocator call.
    std::thread([&] {
      EXPECT_FALSE(CriticalPathScope::active());
      WorkerThreadScope worker;
      ASSERT_EQ(b.release_chunk(c1), Status::ok);
    }).join();
  }
  EXPECT_FALSE(CriticalPathScope::active());
  ASSERT_EQ(b.release_chunk(c2), Status::ok);
  EXPECT_EQ(b.critical_path(), 2u);
  EXPECT_EQ(b.critical_path(VmmOp::create), 2u);
  EXPECT_EQ(b.worker(), 1u);
  EXPECT_EQ(b.worker(VmmOp::release), 1u);
  EXPECT_EQ(b.total(), 4u);
}

TEST(FaultBackend, FailsTheNthCallWithoutSideEffects) {
  auto host_owner = std::make_unique<HostBackend>();
  HostBackend& host = *host_owner;
  FaultBackend f(std::move(host_owner));
  f.fail_nth(VmmOp::create, 2);
  ChunkHandle c1 = 0, c2 = 777, c3 = 0;
  ASSERT_EQ(f.create_chunk(kG, &c1), Status::ok);
  EXPECT_EQ(f.create_chunk(kG, &c2), Status::out_of_memory);
  EXPECT_THAT(f.last_error(), HasSubstr("injected fault in create"));
  EXPECT_EQ(c2, 777u) << "output untouched";
  EXPECT_EQ(host.live_chunks(), 1u) << "the failed call never reached the host backend";
  EXPECT_EQ(host.physical_bytes(), kG);
  ASSERT_EQ(f.create_chunk(kG, &c3), Status::ok) << "only the 2nd call fails";
  EXPECT_EQ(f.injected(VmmOp::create), 1u);

  DevicePtr va = 0;
  ASSERT_EQ(f.reserve(kG, &va), Status::ok);
  f.fail_nth(VmmOp::map, 1, Status::invalid_argument);
  EXPECT_EQ(f.map(va, kG, c1), Status::invalid_argument);
  EXPECT_THAT(f.last_error(), HasSubstr("injected fault in map"));
  EXPECT_EQ(host.mapped_ranges(), 0u);
  ASSERT_EQ(f.map(va, kG, c1), Status::ok);
  f.fail_nth(VmmOp::unmap, 1);
  EXPECT_EQ(f.unmap(va, kG), Status::error) << "default status for other operations";
  EXPECT_EQ(host.mapped_ranges(), 1u);
  EXPECT_EQ(f.injected(VmmOp::unmap), 1u);
  EXPECT_EQ(f.injected_total(), 3u);
  ASSERT_EQ(f.unmap(va, kG), Status::ok);

  // Two armed at once, counted from the moment each was armed.
  f.fail_nth(VmmOp::release, 1);
  f.fail_nth(VmmOp::release, 2);
  EXPECT_EQ(f.release_chunk(c1), Status::error);
  EXPECT_EQ(f.release_chunk(c1), Status::error);
  EXPECT_EQ(host.live_chunks(), 2u);
  EXPECT_EQ(f.release_chunk(c1), Status::ok);
  EXPECT_EQ(f.release_chunk(c3), Status::ok);
}

TEST(FaultBackend, RandomFaultsAreDeterministicPerSeed) {
  auto run = [](std::uint64_t seed) {
    FaultBackend f(std::make_unique<HostBackend>());
    f.fail_randomly(0.5, seed, {VmmOp::reserve});
    std::vector<bool> failed;
    for (int i = 0; i < 400; ++i) {
      DevicePtr va = 0;
      const Status s = f.reserve(kG, &va);
      failed.push_back(s != Status::ok);
      if (s == Status::ok) {
        EXPECT_EQ(f.unreserve(va, kG), Status::ok);
      }
    }
    EXPECT_EQ(f.injected(VmmOp::unreserve), 0u) << "only the listed operation fails";
    EXPECT_EQ(f.injected_total(), f.injected(VmmOp::reserve));
    return failed;
  };
  const auto a = run(42), b = run(42), c = run(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const auto failures = std::count(a.begin(), a.end(), true);
  EXPECT_GT(failures, 120);
  EXPECT_LT(failures, 280);
}

TEST(FaultBackend, ProbabilityOneFailsEveryListedCallAndClearDisarms) {
  auto host_owner = std::make_unique<HostBackend>();
  HostBackend& host = *host_owner;
  FaultBackend f(std::move(host_owner));
  f.fail_randomly(1.0, 1, {VmmOp::create});
  ChunkHandle c = 0;
  DevicePtr va = 0;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(f.create_chunk(kG, &c), Status::out_of_memory);
  EXPECT_EQ(host.live_chunks(), 0u);
  ASSERT_EQ(f.reserve(kG, &va), Status::ok) << "not listed";
  f.fail_nth(VmmOp::create, 1);
  f.clear();
  EXPECT_EQ(f.create_chunk(kG, &c), Status::ok);
  EXPECT_EQ(f.injected(VmmOp::create), 10u) << "clear keeps the counters";
  f.fail_randomly(1.0, 1);  // empty list: every operation
  EXPECT_EQ(f.map(va, kG, c), Status::error);
  EXPECT_EQ(f.unreserve(va, kG), Status::error);
  f.clear();
  EXPECT_EQ(f.unreserve(va, kG), Status::ok);
}

TEST(FaultBackend, AddsLatencyToChosenOperations) {
  FaultBackend f(std::make_unique<HostBackend>());
  f.add_latency(VmmOp::create, std::chrono::microseconds(300));
  ChunkHandle c = 0;
  EXPECT_GE(time_of([&] { ASSERT_EQ(f.create_chunk(kG, &c), Status::ok); }),
            std::chrono::microseconds(300));
  f.add_latency(VmmOp::release, std::chrono::milliseconds(2));
  EXPECT_GE(time_of([&] { ASSERT_EQ(f.release_chunk(c), Status::ok); }),
            std::chrono::milliseconds(2));
}

TEST(LimitingBackend, BehavesLikeASmallDevice) {
  auto host_owner = std::make_unique<HostBackend>();
  HostBackend& host = *host_owner;
  LimitingBackend l(std::move(host_owner), 4 * kG);
  EXPECT_EQ(l.capacity(), 4 * kG);
  EXPECT_STREQ(l.name(), "limiting(host)");
  ChunkHandle c1 = 0, c2 = 0, c3 = 0;
  ASSERT_EQ(l.create_chunk(3 * kG, &c1), Status::ok);
  EXPECT_EQ(l.create_chunk(2 * kG, &c2), Status::out_of_memory);
  EXPECT_THAT(l.last_error(), HasSubstr("out of memory"));
  EXPECT_EQ(host.live_chunks(), 1u) << "the refused creation never reached upstream";
  ASSERT_EQ(l.create_chunk(kG, &c2), Status::ok);
  EXPECT_EQ(l.physical_bytes(), 4 * kG);
  ASSERT_EQ(l.release_chunk(c1), Status::ok);
  EXPECT_EQ(l.physical_bytes(), kG);
  EXPECT_EQ(l.create_chunk(3 * kG, &c3), Status::ok);
  EXPECT_EQ(l.release_chunk(c1), Status::invalid_argument);
  EXPECT_EQ(l.physical_bytes(), 4 * kG) << "a failed release changes nothing";
}

TEST(LimitingBackend, ConcurrentCreationsNeverOvershoot) {
  LimitingBackend l(std::make_unique<HostBackend>(), 10 * kG);
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 4; ++i) {
        ChunkHandle c = 0;
        if (l.create_chunk(kG, &c) == Status::ok) ++created;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(created.load(), 10);
  EXPECT_EQ(l.physical_bytes(), 10 * kG);
}

// A background thread's call reserves address space while the foreground
// holds two nested turns; it must not reach the backend until both end,
// while the foreground's own calls pass. The pause only gives a wrong
// implementation time to let the call through; nothing is timed.
TEST(TurnTakingBackend, ABackgroundCallWaitsUntilEveryForegroundTurnEnds) {
  TurnTakingBackend b(std::make_unique<HostBackend>(small(8)));
  std::optional<DriverTurns::ForegroundTurn> outer, inner;
  outer.emplace(&b.turns());
  inner.emplace(&b.turns());
  std::atomic<bool> done{false};
  Status background = Status::error;
  DevicePtr background_va = 0;
  std::thread worker([&] {
    BackgroundThreadScope gives_way;
    background = b.reserve(kG, &background_va);
    done = true;
  });
  DevicePtr va = 0;
  ASSERT_EQ(b.reserve(kG, &va), Status::ok);  // the foreground never waits
  ASSERT_EQ(b.unreserve(va, kG), Status::ok);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done);
  inner.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done);
  outer.reset();
  worker.join();
  EXPECT_TRUE(done);
  ASSERT_EQ(background, Status::ok);
  EXPECT_EQ(b.unreserve(background_va, kG), Status::ok);
  EXPECT_EQ(b.turns().waits(), 1u);
  EXPECT_GT(b.turns().wait_ns(), 0u);
}

TEST(TurnTakingBackend, WithoutATurnHeldBackgroundCallsPassAtOnce) {
  TurnTakingBackend b(std::make_unique<HostBackend>(small(8)));
  { DriverTurns::ForegroundTurn none(nullptr); }  // a turn on nothing is allowed
  std::thread worker([&] {
    BackgroundThreadScope gives_way;
    for (int i = 0; i < 100; ++i) {
      DevicePtr va = 0;
      ASSERT_EQ(b.reserve(kG, &va), Status::ok);
      ASSERT_EQ(b.unreserve(va, kG), Status::ok);
    }
  });
  worker.join();
  EXPECT_EQ(b.turns().waits(), 0u);
}

TEST(BackendAdaptor, StackComposesAndReportsTheFailingLayer) {
  auto limiting = std::make_unique<LimitingBackend>(std::make_unique<HostBackend>(), 2 * kG);
  auto fault = std::make_unique<FaultBackend>(std::move(limiting));
  FaultBackend& f = *fault;
  CountingBackend top(std::move(fault));
  EXPECT_STREQ(top.name(), "counting(fault(limiting(host)))");
  EXPECT_EQ(top.capacity(), 2 * kG);
  ASSERT_EQ(cycle(top, 2), Status::ok);
  ChunkHandle c = 0;
  ASSERT_EQ(top.create_chunk(2 * kG, &c), Status::ok);
  EXPECT_EQ(top.create_chunk(kG, &c), Status::out_of_memory);
  EXPECT_THAT(top.last_error(), HasSubstr("limiting(host)"));
  f.fail_nth(VmmOp::release, 1);
  EXPECT_EQ(top.release_chunk(c), Status::error);
  EXPECT_THAT(top.last_error(), HasSubstr("injected fault in release"));
  EXPECT_EQ(top.physical_bytes(), 2 * kG);
  EXPECT_EQ(top.release_chunk(c), Status::ok);
  EXPECT_EQ(top.calls(VmmOp::create), 4u);
  EXPECT_EQ(top.calls(VmmOp::release), 4u);
}

}  // namespace
}  // namespace memlake
