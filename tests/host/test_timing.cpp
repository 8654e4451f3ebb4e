// The host-time stats: allocate_ns holds the time inside allocate (and the
// time of its VMM calls), deallocate_ns the time inside deallocate, each
// call adding to its own, and a caller that finds the allocator's lock held
// counts one wait with its duration.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/host/host_backend.hpp"
#include "common/timing.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(Timing, AllocateAndDeallocateTimesHoldOnlyTheirOwnCalls) {
  Config c;
  c.capacity = 64 * MiB;
  c.worker = WorkerMode::off;
  HostBackendOptions o;
  o.capacity = 64 * MiB;
  Allocator a(c, std::make_unique<HostBackend>(o));
  Stream s = a.create_stream();
  EXPECT_EQ(a.stats().allocate_ns.current, 0);
  void* p = a.allocate(4 * MiB, s);  // maps a chunk
  const std::int64_t after_first = a.stats().allocate_ns.current;
  EXPECT_GT(after_first, 0);
  // It created and mapped a chunk on this thread; there is no worker.
  EXPECT_GT(a.stats().critical_path_vmm_calls.current, 0);
  EXPECT_GT(a.stats().critical_path_vmm_ns.current, 0);
  EXPECT_LE(a.stats().critical_path_vmm_ns.current, after_first);
  EXPECT_EQ(a.stats().worker_vmm_ns.current, 0);
  EXPECT_EQ(a.stats().deallocate_ns.current, 0);
  a.deallocate(p, 4 * MiB, s);
  EXPECT_EQ(a.stats().allocate_ns.current, after_first) << "a free is not an allocation";
  const std::int64_t after_free = a.stats().deallocate_ns.current;
  EXPECT_GT(after_free, 0);
  void* q = a.allocate(4 * MiB, s);  // its place again: no VMM call
  EXPECT_EQ(q, p);
  EXPECT_GT(a.stats().allocate_ns.current, after_first);
  EXPECT_EQ(a.stats().deallocate_ns.current, after_free) << "an allocation is not a free";
  EXPECT_EQ(a.stats().lock_waits.current, 0);
  a.deallocate(q, 4 * MiB, s);
  EXPECT_GT(a.stats().deallocate_ns.current, after_free);
  a.destroy_stream(s);
}

// The calls are timed in ticks (the time-stamp counter where the kernel
// keeps time by it); the stats read them as nanoseconds of steady_clock.
TEST(Timing, TicksBecomeNanosecondsAtTheSteadyClocksRate) {
  const auto steady_start = std::chrono::steady_clock::now();
  const std::int64_t ticks_start = now_ticks();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const std::int64_t ticks = now_ticks() - ticks_start;
  const auto steady = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - steady_start)
                          .count();
  const std::int64_t ns = ticks_to_ns(ticks);
  // The two reads of each clock are a few hundred nanoseconds apart at most;
  // a wrong rate is off by far more than 1% of 30 ms.
  EXPECT_NEAR(static_cast<double>(ns), static_cast<double>(steady), 0.01 * steady);
  EXPECT_EQ(ticks_to_ns(0), 0);
}

TEST(Timing, AHeldLockCountsOneWaitWithItsDuration) {
  std::mutex m;
  StatValue waits, wait_ns;
  { auto free_lock = lock_counting_waits(m, waits, wait_ns); }
  EXPECT_EQ(waits.current, 0);  // nobody held it
  std::unique_lock held(m);
  std::atomic<bool> locked{false};
  std::thread other([&] {
    auto lock = lock_counting_waits(m, waits, wait_ns);
    locked = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(locked.load());
  held.unlock();
  other.join();
  EXPECT_TRUE(locked.load());
  EXPECT_EQ(waits.current, 1);
  EXPECT_GT(wait_ns.current, 0);
}

}  // namespace
}  // namespace memlake
