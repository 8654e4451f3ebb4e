// The mapping worker: its reserve serves new memory without a VMM call on
// the allocating thread; its jobs are reproducible inline; a failing job
// leaves the lake as it was; shutdown with a job in flight is clean; it
// races the allocating threads safely; and every unmap and release is its
// own, never the allocating thread's. Chunks move from home to home as
// requests stitch them, and blocks keep their bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "allocator/allocator_impl.hpp"
#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct Rig {
  HostBackend* host = nullptr;
  FaultBackend* fault = nullptr;
  std::unique_ptr<Allocator> alloc;
  explicit Rig(WorkerMode mode, std::size_t reserve = 0) {
    Config c;
    c.worker = mode;
    c.reserve = reserve;
    c.max_chunk = 2 * MiB;
    c.capacity = 256 * MiB;
    HostBackendOptions o;
    o.capacity = 256 * MiB;
    auto h = std::make_unique<HostBackend>(o);
    host = h.get();
    auto f = std::make_unique<FaultBackend>(std::move(h));
    fault = f.get();
    alloc = std::make_unique<Allocator>(c, std::move(f));
  }
};

// Sixteen one-chunk blocks, all freed: sixteen free chunks in sixteen
// segments, so no free run holds more than one chunk.
void scatter(Allocator& a) {
  std::vector<void*> ps;
  for (int i = 0; i < 16; ++i) ps.push_back(a.allocate(2 * MiB));
  for (void* p : ps) a.deallocate(p, 2 * MiB);
  a.process_pending_frees();
}

// Many stitches: chunks move from home to home, each free chunk stays in
// one run at most, and every block keeps its bytes through it all.
TEST(Worker, ChunksMoveHomeAndBlocksKeepTheirBytes) {
  Rig rig(WorkerMode::inline_jobs);
  Allocator& a = *rig.alloc;
  std::mt19937 rng(11);
  struct Block {
    void* p;
    std::size_t size;
    unsigned char tag;
  };
  std::vector<Block> live;
  auto intact = [](const Block& b) {
    const auto* bytes = static_cast<const unsigned char*>(b.p);
    return bytes[0] == b.tag && bytes[b.size / 2] == b.tag && bytes[b.size - 1] == b.tag;
  };
  lake::Lake& lake = a.impl().lake();
  for (int i = 0; i < 4000; ++i) {
    if (live.size() < 30 && (live.empty() || rng() % 2)) {
      const std::size_t size = 1 + rng() % (9 * MiB);
      const auto tag = static_cast<unsigned char>(rng());
      void* p = a.allocate(size);
      std::memset(p, tag, size);
      live.push_back({p, size, tag});
    } else {
      const std::size_t k = rng() % live.size();
      ASSERT_TRUE(intact(live[k])) << "block " << k << " at step " << i;
      a.deallocate(live[k].p, live[k].size);
      live.erase(live.begin() + static_cast<long>(k));
    }
    if (i % 200 == 0) {
      ASSERT_EQ(a.check_invariants(), "") << "step " << i;
      lake.segments().catch_up();
      std::size_t in_runs = 0;
      for (const lake::RunKey& r : lake.segments().free_runs()) in_runs += r.bytes;
      ASSERT_LE(in_runs, lake.free_chunk_bytes()) << "a free chunk in two runs at step " << i;
    }
  }
  EXPECT_GE(a.stats().rung_stitch.current, 3) << "the workload must stitch often";
  for (const Block& b : live) {
    EXPECT_TRUE(intact(b));
    a.deallocate(b.p, b.size);
  }
  a.process_pending_frees();
  EXPECT_EQ(a.check_invariants(), "");
}

TEST(Worker, InlineJobsAreReproducible) {
  auto run = [] {
    Rig rig(WorkerMode::inline_jobs, 16 * MiB);
    Allocator& a = *rig.alloc;
    std::mt19937 rng(7);
    std::vector<std::pair<void*, std::size_t>> live;
    for (int i = 0; i < 3000; ++i) {
      if (live.size() < 40 && (live.empty() || rng() % 2)) {
        std::size_t size = 1 + rng() % (6 * MiB);
        live.emplace_back(a.allocate(size), size);
      } else {
        std::size_t k = rng() % live.size();
        a.deallocate(live[k].first, live[k].second);
        live.erase(live.begin() + static_cast<long>(k));
      }
    }
    Stats s = a.stats();
    for (auto [p, n] : live) a.deallocate(p, n);
    return s;
  };
  const Stats one = run(), two = run();
  EXPECT_GT(one.reserve_hits.current, 0);
  EXPECT_GT(one.worker_vmm_calls.current, 0);
  EXPECT_EQ(one.reserve_hits.current, two.reserve_hits.current);
  EXPECT_EQ(one.worker_vmm_calls.current, two.worker_vmm_calls.current);
  EXPECT_EQ(one.vmm_calls.current, two.vmm_calls.current);
  EXPECT_EQ(one.critical_path_vmm_calls.current, two.critical_path_vmm_calls.current);
  EXPECT_EQ(one.reserved_bytes.peak, two.reserved_bytes.peak);
}

// The reserve's chunks are created, then mapping them fails: they go back,
// the request makes its own memory, and the next job makes the reserve.
TEST(Worker, AReserveJobWhoseMappingFailsLeavesTheLakeAsItWas) {
  Rig rig(WorkerMode::inline_jobs, 16 * MiB);
  Allocator& a = *rig.alloc;
  rig.fault->fail_nth(VmmOp::map, 1);  // the job's range: its sync point runs first
  void* p = a.allocate(4 * MiB);
  const Stats s = a.stats();
  EXPECT_EQ(s.worker_failures.current, 1);
  EXPECT_EQ(s.reserve_bytes.current, 0);
  EXPECT_EQ(s.reserve_misses.current, 1) << "the request made its own memory";
  EXPECT_EQ(s.reserved_bytes.current, static_cast<std::int64_t>(4 * MiB));
  EXPECT_EQ(rig.host->live_chunks(), static_cast<std::size_t>(s.chunks.current))
      << "the chunks the job created were released";
  EXPECT_EQ(a.check_invariants(), "");
  rig.fault->clear();
  std::memset(p, 0x4D, 4 * MiB);
  void* q = a.allocate(12 * MiB);  // its sync point makes the reserve again
  EXPECT_EQ(a.stats().reserve_hits.current, 1);
  std::memset(q, 0x4E, 12 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(p)[4 * MiB - 1], 0x4D);
  EXPECT_EQ(static_cast<unsigned char*>(q)[12 * MiB - 1], 0x4E);
  a.deallocate(p, 4 * MiB);
  a.deallocate(q, 12 * MiB);
  a.empty_cache();
  EXPECT_EQ(rig.host->live_chunks(), 0u);
  EXPECT_EQ(rig.host->mapped_ranges(), 0u);
  EXPECT_EQ(rig.host->reserved_ranges(), 0u);
}

// With a reserve, a request that needs new memory finds it created and
// mapped by the worker: no VMM call on the allocating thread. The reserve is
// made again at the next synchronization point and never exceeds its budget.
TEST(Worker, ReserveServesNewMemoryWithoutMappingOnTheCaller) {
  Rig rig(WorkerMode::inline_jobs, 16 * MiB);
  Allocator& a = *rig.alloc;
  void* p = a.allocate(12 * MiB);  // its sync point makes the reserve first
  const Stats s1 = a.stats();
  EXPECT_EQ(s1.critical_path_vmm_calls.current, 0);
  EXPECT_EQ(s1.reserve_hits.current, 1);
  EXPECT_EQ(s1.reserve_misses.current, 0);
  EXPECT_EQ(s1.reserved_bytes.current, static_cast<std::int64_t>(16 * MiB));
  EXPECT_EQ(s1.reserve_bytes.current, 0) << "the range it came from is ordinary memory now";
  std::memset(p, 0x6B, 12 * MiB);
  void* q = a.allocate(16 * MiB);  // more than the 4 MiB free: the new reserve holds it
  const Stats s2 = a.stats();
  EXPECT_EQ(s2.critical_path_vmm_calls.current, 0);
  EXPECT_EQ(s2.reserve_hits.current, 2);
  std::memset(q, 0x6C, 16 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(p)[12 * MiB - 1], 0x6B);
  a.deallocate(p, 12 * MiB);
  a.deallocate(q, 16 * MiB);
  std::mt19937 rng(11);
  std::vector<std::pair<void*, std::size_t>> live;
  for (int i = 0; i < 2000; ++i) {
    if (live.size() < 12 && (live.empty() || rng() % 2)) {
      const std::size_t size = 1 + rng() % (10 * MiB);
      live.emplace_back(a.allocate(size), size);
    } else {
      const std::size_t k = rng() % live.size();
      a.deallocate(live[k].first, live[k].second);
      live.erase(live.begin() + static_cast<long>(k));
    }
  }
  const Stats s3 = a.stats();
  EXPECT_LE(s3.reserve_bytes.peak, static_cast<std::int64_t>(16 * MiB));
  EXPECT_GT(s3.reserve_hits.current, 2);
  for (auto [ptr, n] : live) a.deallocate(ptr, n);
  EXPECT_EQ(a.check_invariants(), "");
  a.empty_cache();
  EXPECT_EQ(rig.host->live_chunks(), 0u);
}

TEST(Worker, AFailingReserveJobLeaksNothing) {
  Rig rig(WorkerMode::inline_jobs, 16 * MiB);
  Allocator& a = *rig.alloc;
  rig.fault->fail_nth(VmmOp::create, 3);  // the job's third chunk
  void* p = a.allocate(4 * MiB);
  const Stats s = a.stats();
  EXPECT_EQ(s.worker_failures.current, 1);
  EXPECT_EQ(s.reserve_bytes.current, 0);
  EXPECT_EQ(s.reserve_misses.current, 1) << "the request made its own memory";
  EXPECT_EQ(rig.host->live_chunks(), static_cast<std::size_t>(s.chunks.current))
      << "the chunks the job made before the fault were released";
  EXPECT_EQ(a.check_invariants(), "");
  rig.fault->clear();
  std::memset(p, 2, 4 * MiB);
  a.deallocate(p, 4 * MiB);
  a.empty_cache();
  EXPECT_EQ(rig.host->live_chunks(), 0u);
  EXPECT_EQ(rig.host->mapped_ranges(), 0u);
}

// empty_cache gives every chunk back, the reserve's too, whether the
// worker's job is under way, asked for or not begun: none is made after it.
TEST(Worker, EmptyCacheLeavesNoReserveBehind) {
  Rig rig(WorkerMode::thread, 16 * MiB);
  Allocator& a = *rig.alloc;
  for (int round = 0; round < 50; ++round) {
    void* p = a.allocate(4 * MiB);  // nudges the worker to make the reserve
    a.deallocate(p, 4 * MiB);
    a.empty_cache();
    EXPECT_EQ(a.stats().reserved_bytes.current, 0) << "round " << round;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(rig.host->live_chunks(), 0u);
  EXPECT_EQ(a.check_invariants(), "");
}

TEST(Worker, ThreadDoesTheJobOffTheAllocatingThread) {
  Rig rig(WorkerMode::thread, 16 * MiB);
  Allocator& a = *rig.alloc;
  void* p = a.allocate(1 * MiB);  // nudges the worker
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (a.stats().reserve_bytes.current < static_cast<std::int64_t>(16 * MiB) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const Stats s = a.stats();
  EXPECT_EQ(s.reserve_bytes.current, static_cast<std::int64_t>(16 * MiB));
  EXPECT_GT(s.worker_vmm_calls.current, 0);
  void* q = a.allocate(14 * MiB);
  const Stats s2 = a.stats();
  EXPECT_EQ(s2.critical_path_vmm_calls.current, s.critical_path_vmm_calls.current);
  EXPECT_EQ(s2.reserve_hits.current, s.reserve_hits.current + 1);
  std::memset(q, 0x71, 14 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(q)[14 * MiB - 1], 0x71);
  a.deallocate(p, 1 * MiB);
  a.deallocate(q, 14 * MiB);
  a.empty_cache();
  EXPECT_EQ(rig.host->live_chunks(), 0u);
  EXPECT_EQ(a.check_invariants(), "");
}

// Ranges are stitched and dropped over and over (no idle range is kept:
// stitch_cache_ratio 0), with the worker inline and on its thread: every
// unmap, unreserve and release is the worker's, none is made inside
// malloc or free. A counting backend under the allocator's own sees the
// calls by thread.
TEST(Worker, TheAllocatingThreadNeverUnmapsOrReleases) {
  for (WorkerMode mode : {WorkerMode::inline_jobs, WorkerMode::thread}) {
    Config c;
    c.worker = mode;
    c.max_chunk = 2 * MiB;
    c.capacity = 256 * MiB;
    c.stitch_cache_ratio = 0;
    HostBackendOptions o;
    o.capacity = 256 * MiB;
    auto counted = std::make_unique<CountingBackend>(std::make_unique<HostBackend>(o));
    const CountingBackend& calls = *counted;
    Allocator a(c, std::move(counted));
    std::mt19937 rng(7);
    for (int round = 0; round < 40; ++round) {
      scatter(a);
      const std::size_t bytes = (4 + rng() % 12) * MiB;
      void* p = a.allocate(bytes);
      std::memset(p, round, bytes);
      EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], static_cast<unsigned char>(round));
      a.deallocate(p, bytes);
      a.process_pending_frees();
    }
    EXPECT_GT(calls.critical_path(VmmOp::map), 0u) << "the test must make stitches";
    EXPECT_EQ(calls.critical_path(VmmOp::unmap), 0u);
    EXPECT_EQ(calls.critical_path(VmmOp::unreserve), 0u);
    EXPECT_EQ(calls.critical_path(VmmOp::release), 0u);
    if (mode == WorkerMode::inline_jobs) {
      EXPECT_GT(calls.worker(VmmOp::unmap), 0u);
    }
    EXPECT_EQ(a.check_invariants(), "");
  }
}

TEST(Worker, ShutdownWithAJobInFlightIsClean) {
  for (int round = 0; round < 3; ++round) {
    Rig rig(WorkerMode::thread, 64 * MiB);
    rig.fault->add_latency(VmmOp::map, std::chrono::milliseconds(2));
    Allocator& a = *rig.alloc;
    void* p = a.allocate(8 * MiB);  // nudges the worker into a slow reserve job
    a.deallocate(p, 8 * MiB);
    EXPECT_EQ(a.check_invariants(), "");
    // The allocator (and its worker) go now, mid-job.
  }
}

TEST(Worker, RacesAllocatingThreadsSafely) {
  Rig rig(WorkerMode::thread, 16 * MiB);
  Allocator& a = *rig.alloc;
  std::atomic<int> corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t + 1));
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int i = 0; i < 1500; ++i) {
        if (mine.size() < 6 && (mine.empty() || rng() % 2)) {
          std::size_t size = 1 + rng() % (10 * MiB);
          try {
            auto* p = static_cast<unsigned char*>(a.allocate(size));
            p[0] = static_cast<unsigned char>(t);
            p[size - 1] = static_cast<unsigned char>(t);
            mine.emplace_back(p, size);
          } catch (const out_of_memory&) {
          }
        } else {
          std::size_t k = rng() % mine.size();
          auto [p, size] = mine[k];
          if (p[0] != t || p[size - 1] != t) ++corrupt;
          a.deallocate(p, size);
          mine.erase(mine.begin() + static_cast<long>(k));
        }
      }
      for (auto [p, size] : mine) a.deallocate(p, size);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(a.stats().live_bytes.current, 0);
  a.empty_cache();
  EXPECT_EQ(a.check_invariants(), "");
  EXPECT_EQ(rig.host->live_chunks(), 0u);
}

}  // namespace
}  // namespace memlake
