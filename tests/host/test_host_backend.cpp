// HostBackend beyond the backend contract (which tests/suites/ runs over it
// and its adaptor stacks): its options, its tables of chunks, reservations
// and mappings and what they refuse with which message, page protection
// that faults without set_access, descriptors given back, HostStream's own
// rules (destroy drains the queue), simulated H200 latency, and
// make_backend's choice of backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "backend/host/host_backend.hpp"
#include "backend/host/simulated_latency.hpp"
#include "backend/make_backend.hpp"
#include "memlake/config.hpp"
#include "memlake/errors.hpp"
#include "suites/stream_jobs.hpp"
#if MEMLAKE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace memlake {
namespace {

using std::chrono::steady_clock;
using test::Gate;
using test::Jobs;
using ::testing::HasSubstr;

constexpr std::size_t kG = std::size_t{2} << 20;  // default granularity

unsigned char* bytes(DevicePtr va) {
  return reinterpret_cast<unsigned char*>(va);
}

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

HostBackendOptions small(std::size_t capacity_granules) {
  HostBackendOptions o;
  o.capacity = capacity_granules * kG;
  return o;
}

// ---------------------------------------------------------------------------
// Virtual memory: options, tables, refusals
// ---------------------------------------------------------------------------

TEST(HostBackendVm, ReportsItsConfiguration) {
  HostBackendOptions o;
  o.device = 3;
  o.granularity = std::size_t{1} << 20;
  o.capacity = std::size_t{64} << 20;
  HostBackend b(o);
  EXPECT_STREQ(b.name(), "host");
  EXPECT_EQ(b.device(), 3);
  EXPECT_EQ(b.granularity(), std::size_t{1} << 20);
  EXPECT_EQ(b.capacity(), std::size_t{64} << 20);
  EXPECT_EQ(b.physical_bytes(), 0u);
  EXPECT_EQ(HostBackend().capacity(), std::size_t{80} << 30);
  EXPECT_EQ(HostBackend().granularity(), kG);
}

TEST(HostBackendVm, RejectsGranularityThatIsNotPageMultiple) {
  HostBackendOptions o;
  o.granularity = 1000;
  EXPECT_THROW(HostBackend{o}, backend_error);
  o.granularity = 0;
  EXPECT_THROW(HostBackend{o}, backend_error);
}

TEST(HostBackendVm, ReservationsAreTrackedAndFreedOnce) {
  HostBackend b;
  DevicePtr va = 0, vb = 0;
  ASSERT_EQ(b.reserve(3 * kG, &va), Status::ok);
  ASSERT_EQ(b.reserve(kG, &vb), Status::ok);
  EXPECT_EQ(b.reserved_ranges(), 2u);
  EXPECT_FALSE(b.is_accessible(va, kG));
  EXPECT_EQ(b.unreserve(va, 3 * kG), Status::ok);
  EXPECT_EQ(b.unreserve(va, 3 * kG), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("not a reserved range"));
  EXPECT_EQ(b.unreserve(vb, 2 * kG), Status::invalid_argument) << "size must match";
  EXPECT_EQ(b.unreserve(vb, kG), Status::ok);
  EXPECT_EQ(b.reserved_ranges(), 0u);
}

TEST(HostBackendVm, MappingsAreCountedPerChunk) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0, vb = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(kG, &va), Status::ok);
  ASSERT_EQ(b.reserve(kG, &vb), Status::ok);
  ASSERT_EQ(b.map(va, kG, c), Status::ok) << b.last_error();
  ASSERT_EQ(b.map(vb, kG, c), Status::ok) << b.last_error();
  EXPECT_EQ(b.chunk_mappings(c), 2u);
  EXPECT_EQ(b.mapped_ranges(), 2u);
  EXPECT_EQ(b.unmap(va, kG), Status::ok);
  EXPECT_EQ(b.chunk_mappings(c), 1u);
  EXPECT_EQ(b.unmap(vb, kG), Status::ok);
  EXPECT_EQ(b.chunk_mappings(c), 0u);
  EXPECT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.chunk_mappings(c), 0u) << "unknown handles have none";
  EXPECT_EQ(b.unreserve(va, kG), Status::ok);
  EXPECT_EQ(b.unreserve(vb, kG), Status::ok);
}

TEST(HostBackendVm, StitchedRangeAccessIsTrackedPerMapping) {
  HostBackend b;
  ChunkHandle c1 = 0, c2 = 0;
  DevicePtr v1 = 0, v2 = 0, s = 0;
  ASSERT_EQ(b.create_chunk(kG, &c1), Status::ok);
  ASSERT_EQ(b.create_chunk(2 * kG, &c2), Status::ok);
  ASSERT_EQ(b.reserve(kG, &v1), Status::ok);
  ASSERT_EQ(b.reserve(2 * kG, &v2), Status::ok);
  ASSERT_EQ(b.reserve(3 * kG, &s), Status::ok);
  ASSERT_EQ(b.map(v1, kG, c1), Status::ok);
  ASSERT_EQ(b.map(v2, 2 * kG, c2), Status::ok);
  ASSERT_EQ(b.map(s + kG, 2 * kG, c2), Status::ok);
  ASSERT_EQ(b.map(s, kG, c1), Status::ok);
  EXPECT_FALSE(b.is_accessible(s, 3 * kG));
  ASSERT_EQ(b.set_access(s, 3 * kG), Status::ok);
  EXPECT_TRUE(b.is_accessible(s, 3 * kG));
  EXPECT_TRUE(b.is_accessible(s + kG / 2, kG));  // straddles the chunk boundary
  EXPECT_FALSE(b.is_accessible(v1, kG)) << "each mapping has its own access";
  EXPECT_EQ(b.mapped_ranges(), 4u);
  EXPECT_EQ(b.unmap(s, 3 * kG), Status::ok);
  EXPECT_EQ(b.mapped_ranges(), 2u);
  EXPECT_FALSE(b.is_accessible(s, kG));
  EXPECT_EQ(b.unreserve(s, 3 * kG), Status::ok);
}

TEST(HostBackendVm, UnmapIsTrackedAndANewMappingStartsInaccessible) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(2 * kG, &va), Status::ok);
  ASSERT_EQ(b.map(va, kG, c), Status::ok);
  ASSERT_EQ(b.set_access(va, kG), Status::ok);
  ASSERT_EQ(b.unmap(va, kG), Status::ok);
  EXPECT_EQ(b.mapped_ranges(), 0u);
  EXPECT_EQ(b.chunk_mappings(c), 0u);
  EXPECT_FALSE(b.is_accessible(va, kG));
  EXPECT_EQ(b.unmap(va, kG), Status::invalid_argument) << "already unmapped";
  ASSERT_EQ(b.map(va + kG, kG, c), Status::ok);
  EXPECT_FALSE(b.is_accessible(va + kG, kG)) << "a new mapping starts inaccessible";
  ASSERT_EQ(b.unmap(va + kG, kG), Status::ok);
  EXPECT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.unreserve(va, 2 * kG), Status::ok);
}

TEST(HostBackendVm, RejectsMapsOutsideOrOverlappingAReservation) {
  HostBackend b;
  ChunkHandle c = 0, big = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.create_chunk(2 * kG, &big), Status::ok);
  ASSERT_EQ(b.reserve(3 * kG, &va), Status::ok);
  EXPECT_EQ(b.map(va + 2 * kG, 2 * kG, big), Status::invalid_argument) << "past the reservation";
  EXPECT_THAT(b.last_error(), HasSubstr("reserved range"));
  EXPECT_EQ(b.map(va + 64 * kG, kG, c), Status::invalid_argument) << "outside any reservation";
  EXPECT_EQ(b.mapped_ranges(), 0u);

  ASSERT_EQ(b.map(va + kG, 2 * kG, big), Status::ok);
  EXPECT_EQ(b.map(va + kG, kG, c), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("overlaps"));
  EXPECT_EQ(b.map(va + 2 * kG, kG, c), Status::invalid_argument);
  EXPECT_EQ(b.mapped_ranges(), 1u);
  EXPECT_EQ(b.unmap(va + kG, 2 * kG), Status::ok);
}

TEST(HostBackendVm, SetAccessAndUnmapNeedWholeMappedChunks) {
  HostBackend b;
  ChunkHandle c1 = 0, c2 = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(2 * kG, &c1), Status::ok);
  ASSERT_EQ(b.create_chunk(kG, &c2), Status::ok);
  ASSERT_EQ(b.reserve(5 * kG, &va), Status::ok);
  ASSERT_EQ(b.map(va, 2 * kG, c1), Status::ok);
  ASSERT_EQ(b.map(va + 3 * kG, kG, c2), Status::ok);  // a gap at va + 2G

  EXPECT_EQ(b.set_access(va, kG), Status::invalid_argument) << "half a chunk";
  EXPECT_THAT(b.last_error(), HasSubstr("set_access"));
  EXPECT_EQ(b.set_access(va, 4 * kG), Status::invalid_argument) << "spans the gap";
  EXPECT_EQ(b.set_access(va + 2 * kG, kG), Status::invalid_argument) << "not mapped";
  EXPECT_EQ(b.set_access(va, 0), Status::invalid_argument);
  EXPECT_FALSE(b.is_accessible(va, 2 * kG));
  EXPECT_EQ(b.unmap(va + kG, kG), Status::invalid_argument) << "half a chunk";
  EXPECT_EQ(b.unmap(va, 4 * kG), Status::invalid_argument) << "spans the gap";
  EXPECT_EQ(b.mapped_ranges(), 2u);

  EXPECT_EQ(b.set_access(va, 2 * kG), Status::ok);
  EXPECT_EQ(b.set_access(va + 3 * kG, kG), Status::ok);
  EXPECT_TRUE(b.is_accessible(va, 2 * kG));
  EXPECT_FALSE(b.is_accessible(va, 4 * kG));
  EXPECT_EQ(b.unmap(va, 2 * kG), Status::ok);
  EXPECT_EQ(b.unmap(va + 3 * kG, kG), Status::ok);
}

TEST(HostBackendVm, RejectsUnknownHandlesOfEveryKindWithAMessage) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0;
  EXPECT_EQ(b.release_chunk(12345), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("12345")) << "the message names the handle";
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(kG, &va), Status::ok);
  EXPECT_EQ(b.unmap(va, kG), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unmap"));
  EXPECT_EQ(b.set_access(va, kG), Status::invalid_argument);

  ASSERT_EQ(b.map(va, kG, c), Status::ok);
  EXPECT_EQ(b.unreserve(va, kG), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unmap it first"));
  EXPECT_EQ(b.reserved_ranges(), 1u);
  ASSERT_EQ(b.unmap(va, kG), Status::ok);
  EXPECT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.unreserve(va, kG), Status::ok);

  int dummy = 0;
  EXPECT_EQ(b.launch_host_func(&dummy, Gate::job, nullptr), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unknown stream"));
  EXPECT_EQ(b.event_query(&dummy), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unknown event"));
  EXPECT_EQ(b.event_record(&dummy, nullptr), Status::invalid_argument);
  EXPECT_EQ(b.event_destroy(&dummy), Status::invalid_argument);
  EXPECT_EQ(b.stream_destroy(&dummy), Status::invalid_argument);
  EXPECT_EQ(b.stream_synchronize(&dummy), Status::invalid_argument);
  bool capturing = true;
  EXPECT_EQ(b.stream_is_capturing(&dummy, &capturing), Status::invalid_argument);
}

TEST(HostBackendVm, LastErrorNamesTheCallOfItsOwnThread) {
  HostBackend b;
  EXPECT_EQ(b.release_chunk(777), Status::invalid_argument);
  std::string other;
  std::thread([&] {
    EXPECT_EQ(b.release_chunk(888), Status::invalid_argument);
    other = b.last_error();
  }).join();
  EXPECT_THAT(b.last_error(), HasSubstr("777"));
  EXPECT_THAT(other, HasSubstr("888"));
}

TEST(HostBackendVm, CapacityCountsLiveChunksAndNeverReusesHandles) {
  HostBackend b(small(3));
  ChunkHandle c1 = 0, c2 = 0, c3 = 0;
  ASSERT_EQ(b.create_chunk(2 * kG, &c1), Status::ok);
  EXPECT_EQ(b.create_chunk(2 * kG, &c2), Status::out_of_memory);
  EXPECT_EQ(b.live_chunks(), 1u);
  ASSERT_EQ(b.create_chunk(kG, &c2), Status::ok);
  ASSERT_EQ(b.release_chunk(c1), Status::ok);
  EXPECT_EQ(b.create_chunk(2 * kG, &c3), Status::ok) << b.last_error();
  EXPECT_EQ(b.live_chunks(), 2u);
  EXPECT_NE(c3, c1) << "handles are not reused";
}

TEST(HostBackendVm, ReleasedChunkLeavesTheTableWhileStillMapped) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(kG, &va), Status::ok);
  ASSERT_EQ(b.map(va, kG, c), Status::ok);
  ASSERT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.live_chunks(), 0u);
  EXPECT_EQ(b.mapped_ranges(), 1u);
  EXPECT_EQ(b.unmap(va, kG), Status::ok);
  EXPECT_EQ(b.unreserve(va, kG), Status::ok);
}

TEST(HostBackendVm, AccessNeedsSetAccess) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(2 * kG, &va), Status::ok);
  ASSERT_EQ(b.map(va, kG, c), Status::ok);
  EXPECT_FALSE(b.is_accessible(va, kG));
  EXPECT_FALSE(b.is_accessible(va + kG, kG)) << "reserved, not mapped";
  ASSERT_EQ(b.set_access(va, kG), Status::ok);
  EXPECT_TRUE(b.is_accessible(va, kG));
  EXPECT_TRUE(b.is_accessible(va + 4096, 4096));
  EXPECT_FALSE(b.is_accessible(va, kG + 1));
  EXPECT_FALSE(b.is_accessible(va, 0));
}

TEST(HostBackendVmDeathTest, TouchingMemoryWithoutAccessFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto touch = [](bool mapped) {
    HostBackend b;
    ChunkHandle c = 0;
    DevicePtr va = 0;
    if (b.create_chunk(kG, &c) != Status::ok || b.reserve(2 * kG, &va) != Status::ok ||
        b.map(va, kG, c) != Status::ok) {
      std::_Exit(3);
    }
    volatile unsigned char* p = bytes(mapped ? va : va + kG);
    p[0] = 1;
    std::_Exit(0);
  };
  EXPECT_EXIT(touch(true), ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EXIT(touch(false), ::testing::KilledBySignal(SIGSEGV), "");
}

TEST(HostBackendVm, DestructorFreesWhatIsStillLive) {
  const std::size_t before = open_fds();
  {
    HostBackend b;
    for (int i = 0; i < 5; ++i) {
      ChunkHandle c = 0;
      DevicePtr va = 0;
      ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
      ASSERT_EQ(b.reserve(kG, &va), Status::ok);
      ASSERT_EQ(b.map(va, kG, c), Status::ok);
    }
    EXPECT_GE(open_fds(), before + 5);
  }
  EXPECT_EQ(open_fds(), before);
}

// ---------------------------------------------------------------------------
// HostStream: destroying a stream or the backend drains the work queued
// ---------------------------------------------------------------------------

TEST(HostBackendStreams, StreamDestroyDrainsItsQueue) {
  HostBackend b;
  StreamHandle s = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  std::atomic<int> ran{0};
  Jobs jobs;
  for (int i = 0; i < 50; ++i) {
    jobs.launch(b, s, [&] {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      ++ran;
    });
  }
  ASSERT_EQ(b.stream_destroy(s), Status::ok);
  EXPECT_EQ(ran.load(), 50);
  EXPECT_EQ(b.launch_host_func(s, Gate::job, nullptr), Status::invalid_argument);
}

TEST(HostBackendStreams, EventOfADestroyedStreamIsComplete) {
  HostBackend b;
  StreamHandle s = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  ASSERT_EQ(b.event_create(&e), Status::ok);
  Jobs jobs;
  jobs.launch(b, s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
  ASSERT_EQ(b.event_record(e, s), Status::ok);
  ASSERT_EQ(b.stream_destroy(s), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::ok);
}

TEST(HostBackendStreams, DestructorDrainsEveryStream) {
  std::atomic<int> ran{0};
  Jobs jobs;
  {
    auto b = std::make_unique<HostBackend>();
    StreamHandle s1 = nullptr, s2 = nullptr;
    EventHandle e = nullptr;
    ASSERT_EQ(b->stream_create(&s1), Status::ok);
    ASSERT_EQ(b->stream_create(&s2), Status::ok);
    ASSERT_EQ(b->event_create(&e), Status::ok);
    for (int i = 0; i < 20; ++i) {
      jobs.launch(*b, s1, [&] {
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        ++ran;
      });
    }
    ASSERT_EQ(b->event_record(e, s1), Status::ok);
    ASSERT_EQ(b->stream_wait_event(s2, e), Status::ok);
    for (int i = 0; i < 20; ++i) jobs.launch(*b, s2, [&] { ++ran; });
    jobs.launch(*b, nullptr, [&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 41);
}

// ---------------------------------------------------------------------------
// Simulated latency
// ---------------------------------------------------------------------------

template <class F>
std::chrono::nanoseconds time_of(F&& f) {
  const auto t0 = steady_clock::now();
  f();
  return steady_clock::now() - t0;
}

TEST(HostBackendLatency, SimulatedCallsTakeAtLeastTheH200Medians) {
  HostBackendOptions o;
  o.simulate_latency = true;
  HostBackend b(o);
  using std::chrono::microseconds;
  ChunkHandle c[4] = {};
  DevicePtr va = 0;
  EXPECT_GE(time_of([&] { ASSERT_EQ(b.create_chunk(kG, &c[0]), Status::ok); }), microseconds(9));
  for (int i = 1; i < 4; ++i) ASSERT_EQ(b.create_chunk(kG, &c[i]), Status::ok);
  ASSERT_EQ(b.reserve(4 * kG, &va), Status::ok);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(b.map(va + static_cast<std::size_t>(i) * kG, kG, c[i]), Status::ok);
  }
  // set_access and unmap cost per chunk in the range.
  EXPECT_GE(time_of([&] { ASSERT_EQ(b.set_access(va, 4 * kG), Status::ok); }), microseconds(91));
  EXPECT_GE(time_of([&] { ASSERT_EQ(b.unmap(va, 4 * kG), Status::ok); }), microseconds(62));
  EXPECT_GE(time_of([&] { ASSERT_EQ(b.release_chunk(c[0]), Status::ok); }), microseconds(11));
}

// A large handle costs a little more than a small one, far less per byte:
// the medians of traces/vmm_costs.txt at 2, 16 and 64 MiB, interpolated
// between them and extended past 64 MiB on the 16-64 MiB slope.
TEST(HostBackendLatency, CostsFollowTheMeasuredMediansBySize) {
  using detail::simulated_cost;
  using std::chrono::nanoseconds;
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  EXPECT_EQ(simulated_cost(VmmOp::set_access, 2 * kMiB), nanoseconds(22'970));
  EXPECT_EQ(simulated_cost(VmmOp::set_access, 16 * kMiB), nanoseconds(23'420));
  EXPECT_EQ(simulated_cost(VmmOp::set_access, 64 * kMiB), nanoseconds(41'980));
  EXPECT_EQ(simulated_cost(VmmOp::unmap, 64 * kMiB), nanoseconds(25'080));
  EXPECT_EQ(simulated_cost(VmmOp::release, 16 * kMiB), nanoseconds(22'550));
  EXPECT_EQ(simulated_cost(VmmOp::create, 2 * kMiB), nanoseconds(9'640));
  // Below the granularity of the H200: the 2 MiB cost.
  EXPECT_EQ(simulated_cost(VmmOp::set_access, 64 * 1024), nanoseconds(22'970));
  // Halfway between 16 and 64 MiB: halfway between their costs.
  EXPECT_EQ(simulated_cost(VmmOp::set_access, 40 * kMiB), nanoseconds(32'700));
  // Past 64 MiB: 18.56 us more per 48 MiB.
  EXPECT_EQ(simulated_cost(VmmOp::set_access, 112 * kMiB), nanoseconds(60'540));
  for (VmmOp op : {VmmOp::create, VmmOp::release, VmmOp::map, VmmOp::set_access, VmmOp::unmap}) {
    nanoseconds last{0};
    for (std::size_t mib = 2; mib <= 2048; mib *= 2) {
      const nanoseconds cost = simulated_cost(op, mib * kMiB);
      EXPECT_GE(cost, last) << vmm_op_name(op) << " " << mib << " MiB";
      // Per byte, one large handle costs less than the 2 MiB ones it replaces.
      if (mib > 2) {
        EXPECT_LT(cost, simulated_cost(op, 2 * kMiB) * static_cast<long>(mib / 2));
      }
      last = cost;
    }
  }
  EXPECT_EQ(simulated_cost(VmmOp::reserve, 1024 * kMiB), simulated_cost(VmmOp::reserve, 2 * kMiB));
}

// ---------------------------------------------------------------------------
// make_backend
// ---------------------------------------------------------------------------

TEST(HostBackendFactory, HostKindHonoursTheConfig) {
  Config cfg;
  cfg.backend = BackendKind::host;
  cfg.device = 2;
  cfg.host_granularity = std::size_t{1} << 20;
  auto b = make_backend(cfg);
  ASSERT_NE(b, nullptr);
  EXPECT_STREQ(b->name(), "host");
  EXPECT_EQ(b->device(), 2);
  EXPECT_EQ(b->granularity(), std::size_t{1} << 20);
  EXPECT_EQ(b->capacity(), std::size_t{80} << 30);

  cfg.capacity = std::size_t{16} << 20;
  EXPECT_EQ(make_backend(cfg)->capacity(), std::size_t{16} << 20);
  cfg.capacity = 0;
  cfg.capacity_fraction = 0.5;
  EXPECT_EQ(make_backend(cfg)->capacity(), std::size_t{40} << 30);

  cfg.capacity = 0;
  cfg.capacity_fraction = 0;
  cfg.host_simulate_latency = true;
  auto slow = make_backend(cfg);
  ChunkHandle c = 0;
  EXPECT_GE(time_of([&] { ASSERT_EQ(slow->create_chunk(std::size_t{1} << 20, &c), Status::ok); }),
            std::chrono::microseconds(9));
}

TEST(HostBackendFactory, AutomaticAndCudaKinds) {
  Config cfg;
  cfg.backend = BackendKind::automatic;
  bool gpu = false;
  bool compiled = false;
#if MEMLAKE_HAVE_CUDA
  gpu = CudaBackend::device_count() > 0;
  compiled = true;
#endif
  EXPECT_EQ(cuda_backend_compiled(), compiled);
  auto b = make_backend(cfg);
  EXPECT_STREQ(b->name(), gpu ? "cuda" : "host");
  cfg.backend = BackendKind::cuda;
  if (!gpu) {
    try {
      make_backend(cfg);
      ADD_FAILURE() << "backend:cuda without a GPU must throw";
    } catch (const backend_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("backend:cuda requested but"));
    }
  } else {
    EXPECT_STREQ(make_backend(cfg)->name(), "cuda");
    cfg.device = 1000;
    EXPECT_THROW(make_backend(cfg), backend_error);
  }
}

}  // namespace
}  // namespace memlake
