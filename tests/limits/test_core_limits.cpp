// What the allocator must do at the backend's limits (issue 28), through the
// public API: a refusal for want of mappings, address space, descriptors or
// host memory is met by giving back idle mappings and retrying, and only
// then reported, as out_of_memory naming the cause; a heap that fails inside
// the allocator is an error, never a std::bad_alloc out of allocate or an
// end of the process from the worker's thread; and the worker's thread
// changes no outcome.
// docs/reliability.md ("Limits other than memory") says how.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "heap_failure.hpp"
#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "pattern.hpp"
#include "soak.hpp"

namespace memlake::test {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kMiB = std::size_t{1} << 20;
// The emulated mapping limit below: a fraction of what the workload's cache
// holds without one, well above what its live blocks need.
constexpr std::size_t kLimit = 600;

// An allocator over counting(fault(host)) with the given HostBackend.
struct Rig {
  explicit Rig(HostBackendOptions h, WorkerMode worker = WorkerMode::inline_jobs) {
    h.shareable = false;
    auto host_ptr = std::make_unique<HostBackend>(h);
    host = host_ptr.get();
    auto below_ptr = std::make_unique<CountingBackend>(std::move(host_ptr));
    below = below_ptr.get();
    auto fault_ptr = std::make_unique<FaultBackend>(std::move(below_ptr));
    fault = fault_ptr.get();
    Config c;
    c.backend = BackendKind::host;
    c.capacity = h.capacity;
    c.worker = worker;
    alloc = std::make_unique<Allocator>(c, std::move(fault_ptr));
  }
  HostBackend* host;
  CountingBackend* below;
  FaultBackend* fault;
  std::unique_ptr<Allocator> alloc;
};

HostBackendOptions small_host(std::size_t max_mappings = 0) {
  HostBackendOptions h;
  h.capacity = 512 * kMiB;
  h.max_mappings = max_mappings;
  return h;
}

// Rounds of many one-chunk blocks freed again, then one large block that
// must stitch their chunks, of a size new every round. Every request fits
// the capacity with room to spare.
// Returns what each allocate did: 'o' served, 'M' out_of_memory, 'E'
// another memlake::error; every served block is checked and freed.
std::string stitch_rounds(Allocator& a, int rounds) {
  std::string outcome;
  auto take = [&](std::size_t size, std::vector<std::pair<void*, std::size_t>>& held) {
    try {
      void* p = a.allocate(size);
      fill_pattern(p, size, size);
      held.emplace_back(p, size);
      outcome += 'o';
    } catch (const out_of_memory&) {
      outcome += 'M';
    } catch (const error&) {
      outcome += 'E';
    }
  };
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::pair<void*, std::size_t>> held;
    for (int i = 0; i < 120; ++i) take(3 * kMiB / 2, held);
    for (std::size_t i = 0; i < held.size(); i += 2) {
      EXPECT_TRUE(check_pattern(held[i].first, held[i].second, held[i].second));
      a.deallocate(held[i].first, held[i].second);
    }
    std::vector<std::pair<void*, std::size_t>> big;
    take((40 + static_cast<std::size_t>(r % 50)) * 2 * kMiB - 4096, big);
    for (std::size_t i = 1; i < held.size(); i += 2) {
      EXPECT_TRUE(check_pattern(held[i].first, held[i].second, held[i].second));
      a.deallocate(held[i].first, held[i].second);
    }
    for (auto [p, n] : big) {
      EXPECT_TRUE(check_pattern(p, n, n));
      a.deallocate(p, n);
    }
    EXPECT_EQ(a.check_invariants(), "");
  }
  return outcome;
}

void expect_clean_end(Rig& r) {
  r.fault->clear();
  r.alloc->empty_cache();
  EXPECT_EQ(r.alloc->check_invariants(), "");
  EXPECT_EQ(r.host->live_chunks(), 0u);
  EXPECT_EQ(r.host->mapped_ranges(), 0u);
  EXPECT_EQ(r.host->reserved_ranges(), 0u);
}

// A soak on one stream (deterministic with the worker inline), no faults:
// mixed sizes near the capacity pile idle mappings up in the cache.
SoakOptions one_stream(std::size_t max_mappings, bool worker_thread) {
  SoakOptions o;
  o.operations = 30'000;
  o.streams = 1;
  o.fault_probability = 0;
  o.max_mappings = max_mappings;
  o.worker_thread = worker_thread;
  return o;
}

// The workload needs no more mappings than the limit: without a limit it
// completes, and its cache holds more than twice the limit. This one runs
// always; it keeps the tests below honest.
TEST(CoreLimits, TheWorkloadHoldsSeveralTimesTheLimitWithoutOne) {
  const SoakReport r = run_soak(one_stream(0, false));
  std::printf("[ soak     ] %s\n", r.summary().c_str());
  EXPECT_GT(r.peak_mapping_units, 2 * kLimit);
  EXPECT_EQ(r.exhaustion_errors(), 0u);
  EXPECT_EQ(r.chunks_left, 0u);
}

TEST(CoreLimits, AMappingLimitIsMetByGivingBackIdleMappings) {
  const SoakReport r = run_soak(one_stream(kLimit, false));
  std::printf("[ soak     ] %s\n", r.summary().c_str());
  EXPECT_GT(r.refused.count("out_of_mappings"), 0u) << "the limit was met";
  EXPECT_EQ(r.exhaustion_errors(), 0u);
  EXPECT_EQ(r.chunks_left, 0u);
  EXPECT_EQ(r.corrupted_blocks, 0u);
}

TEST(CoreLimits, TheWorkerThreadChangesNoOutcomeAtAMappingLimit) {
  for (bool thread : {false, true, true, true}) {
    const SoakReport r = run_soak(one_stream(kLimit, thread));
    std::printf("[ soak     ] worker:%s %s\n", thread ? "thread" : "inline", r.summary().c_str());
    EXPECT_EQ(r.exhaustion_errors(), 0u) << (thread ? "thread" : "inline");
    EXPECT_EQ(r.other_exceptions, 0u);
    EXPECT_EQ(r.chunks_left, 0u);
  }
}

// Each exhaustion status, once, on each call of a request that maps new
// memory: the request is served after a retry, or fails as out_of_memory
// naming the status; never backend_error.
TEST(CoreLimits, EveryExhaustionRefusalIsRetriedOrReportedAsOutOfMemory) {
  for (VmmOp op : {VmmOp::reserve, VmmOp::create, VmmOp::map, VmmOp::set_access}) {
    for (Status kind : {Status::out_of_va, Status::out_of_mappings, Status::out_of_descriptors,
                        Status::out_of_host_memory}) {
      SCOPED_TRACE(std::string(vmm_op_name(op)) + " " + status_name(kind));
      Rig r(small_host());
      void* warm = r.alloc->allocate(8 * kMiB);
      r.alloc->deallocate(warm, 8 * kMiB);
      r.fault->fail_nth(op, 1, kind);
      try {
        void* p = r.alloc->allocate(64 * kMiB);
        r.alloc->deallocate(p, 64 * kMiB);
      } catch (const out_of_memory& e) {
        EXPECT_THAT(e.what(), HasSubstr(status_name(kind)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << typeid(e).name() << ": " << e.what();
      }
      EXPECT_EQ(r.alloc->check_invariants(), "");
      expect_clean_end(r);
    }
  }
}

// operator new fails inside allocate after 0, 1, 2, ... allocations (ever
// sparser steps past the first few): the
// caller gets a memlake::error (out_of_memory), never std::bad_alloc, and
// the allocator stays consistent and usable.
TEST(CoreLimits, AHeapFailureInsideAllocateIsAnError) {
  for (std::size_t allow = 0; allow < 100'000; allow += 1 + allow / 8) {
    Rig r(small_host());
    stitch_rounds(*r.alloc, 2);     // cached ranges for reclaim to give back
    const char* escaped = nullptr;  // no std::string: the heap fails in here
    void* p = nullptr;
    {
      HeapFailure heap(allow);
      try {
        p = r.alloc->allocate(200 * kMiB);
      } catch (const error&) {
      } catch (const std::exception& e) {
        escaped = typeid(e).name();
      }
    }
    EXPECT_EQ(escaped, nullptr) << "with " << allow << " allocations allowed: " << escaped;
    EXPECT_EQ(r.alloc->check_invariants(), "") << "with " << allow << " allocations allowed";
    if (p != nullptr) r.alloc->deallocate(p, 200 * kMiB);
    expect_clean_end(r);
    if (p != nullptr) break;
  }
}

// The worker's thread cannot allocate at all: its jobs fail, and the
// process goes on (a std::bad_alloc out of the thread's function would end
// it in std::terminate).
TEST(CoreLimits, AHeapFailureOnTheWorkerThreadDoesNotEndTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        fail_heap_on_worker_threads(true);
        SoakOptions o = one_stream(0, true);
        o.operations = 10'000;
        o.reserve = 64 * kMiB;
        const SoakReport r = run_soak(o);
        std::fprintf(stderr, "%s\nheap failures on the worker's thread: %llu\n",
                     r.summary().c_str(), static_cast<unsigned long long>(heap_failures()));
        const bool ok = r.other_exceptions == 0 && r.invariant_failures == 0 &&
                        r.chunks_left == 0 && r.corrupted_blocks == 0 && heap_failures() > 0;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace memlake::test
