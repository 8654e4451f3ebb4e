// Tests of the backend layer on the CPU: HostBackend's VMM contract (real
// bytes through several mappings, whole-chunk maps, access rules, capacity,
// bad arguments), its host streams and events, simulated latency, the
// adaptors (forwarding, counting, fault injection, limiting) and
// make_backend's choice of backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/adaptors/backend_adaptor.hpp"
#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/adaptors/limiting_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "backend/make_backend.hpp"
#include "memlake/config.hpp"
#include "memlake/errors.hpp"
#if MEMLAKE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace memlake {
namespace {

using std::chrono::steady_clock;
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

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

// A host job that blocks its stream until the test opens it.
class Gate {
 public:
  void wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  static void job(void* self) { static_cast<Gate*>(self)->wait(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Host jobs from lambdas; the deque keeps their addresses stable.
class Jobs {
 public:
  void launch(Backend& b, StreamHandle s, std::function<void()> fn) {
    jobs_.push_back(std::move(fn));
    ASSERT_EQ(b.launch_host_func(s, &Jobs::run, &jobs_.back()), Status::ok) << b.last_error();
  }

 private:
  static void run(void* fn) { (*static_cast<std::function<void()>*>(fn))(); }
  std::deque<std::function<void()>> jobs_;
};

HostBackendOptions small(std::size_t capacity_granules) {
  HostBackendOptions o;
  o.capacity = capacity_granules * kG;
  return o;
}

// ---------------------------------------------------------------------------
// Virtual memory
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

TEST(HostBackendVm, ReserveIsAlignedAndTracked) {
  HostBackend b;
  DevicePtr va = 0, vb = 0;
  ASSERT_EQ(b.reserve(3 * kG, &va), Status::ok);
  ASSERT_EQ(b.reserve(kG, &vb), Status::ok);
  EXPECT_EQ(va % kG, 0u);
  EXPECT_EQ(vb % kG, 0u);
  EXPECT_TRUE(vb >= va + 3 * kG || vb + kG <= va) << "ranges overlap";
  EXPECT_EQ(b.reserved_ranges(), 2u);
  EXPECT_FALSE(b.is_accessible(va, kG));
  EXPECT_EQ(b.unreserve(va, 3 * kG), Status::ok);
  EXPECT_EQ(b.unreserve(va, 3 * kG), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("not a reserved range"));
  EXPECT_EQ(b.unreserve(vb, 2 * kG), Status::invalid_argument) << "size must match";
  EXPECT_EQ(b.unreserve(vb, kG), Status::ok);
  EXPECT_EQ(b.reserved_ranges(), 0u);
}

TEST(HostBackendVm, OneChunkAtTwoAddressesShowsTheSameBytes) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0, vb = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(kG, &va), Status::ok);
  ASSERT_EQ(b.reserve(kG, &vb), Status::ok);
  ASSERT_EQ(b.map(va, kG, c), Status::ok) << b.last_error();
  ASSERT_EQ(b.map(vb, kG, c), Status::ok) << b.last_error();
  EXPECT_EQ(b.chunk_mappings(c), 2u);
  ASSERT_EQ(b.set_access(va, kG), Status::ok);
  ASSERT_EQ(b.set_access(vb, kG), Status::ok);

  fill(va, kG, 7);
  EXPECT_TRUE(holds(vb, kG, 7));
  std::memset(bytes(vb) + 100, 0xab, 64);
  EXPECT_EQ(bytes(va)[100], 0xab);
  EXPECT_EQ(bytes(va)[163], 0xab);

  EXPECT_EQ(b.unmap(va, kG), Status::ok);
  EXPECT_EQ(b.unmap(vb, kG), Status::ok);
  EXPECT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.unreserve(va, kG), Status::ok);
  EXPECT_EQ(b.unreserve(vb, kG), Status::ok);
}

TEST(HostBackendVm, StitchedRangeShowsBytesOfEachChunk) {
  // Two chunks, each mapped on its own, then both stitched into one range.
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
  ASSERT_EQ(b.set_access(v1, kG), Status::ok);
  ASSERT_EQ(b.set_access(v2, 2 * kG), Status::ok);
  fill(v1, kG, 1);
  fill(v2, 2 * kG, 2);

  ASSERT_EQ(b.map(s + kG, 2 * kG, c2), Status::ok);
  ASSERT_EQ(b.map(s, kG, c1), Status::ok);
  EXPECT_FALSE(b.is_accessible(s, 3 * kG));
  ASSERT_EQ(b.set_access(s, 3 * kG), Status::ok) << "one call over the whole stitched range";
  EXPECT_TRUE(b.is_accessible(s, 3 * kG));
  EXPECT_TRUE(b.is_accessible(s + kG / 2, kG));  // straddles the chunk boundary
  EXPECT_TRUE(holds(s, kG, 1));
  EXPECT_TRUE(holds(s + kG, 2 * kG, 2));

  // Writes through the stitched range land in the chunks.
  bytes(s)[kG - 1] = 0x11;
  bytes(s)[kG] = 0x22;
  EXPECT_EQ(bytes(v1)[kG - 1], 0x11);
  EXPECT_EQ(bytes(v2)[0], 0x22);

  EXPECT_EQ(b.unmap(s, 3 * kG), Status::ok) << "one call over both chunks";
  EXPECT_EQ(b.mapped_ranges(), 2u);
  EXPECT_FALSE(b.is_accessible(s, kG));
  EXPECT_EQ(b.unreserve(s, 3 * kG), Status::ok);
}

TEST(HostBackendVm, UnmapKeepsTheChunkAndRemapShowsItsBytes) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(2 * kG, &va), Status::ok);
  ASSERT_EQ(b.map(va, kG, c), Status::ok);
  ASSERT_EQ(b.set_access(va, kG), Status::ok);
  fill(va, kG, 42);
  ASSERT_EQ(b.unmap(va, kG), Status::ok);
  EXPECT_EQ(b.mapped_ranges(), 0u);
  EXPECT_EQ(b.chunk_mappings(c), 0u);
  EXPECT_FALSE(b.is_accessible(va, kG));
  EXPECT_EQ(b.unmap(va, kG), Status::invalid_argument) << "already unmapped";

  // Map again, at the other half of the range: the bytes are the chunk's.
  ASSERT_EQ(b.map(va + kG, kG, c), Status::ok);
  EXPECT_FALSE(b.is_accessible(va + kG, kG)) << "a new mapping starts inaccessible";
  ASSERT_EQ(b.set_access(va + kG, kG), Status::ok);
  EXPECT_TRUE(holds(va + kG, kG, 42));
  ASSERT_EQ(b.unmap(va + kG, kG), Status::ok);
  ASSERT_EQ(b.map(va, kG, c), Status::ok);
  ASSERT_EQ(b.set_access(va, kG), Status::ok);
  EXPECT_TRUE(holds(va, kG, 42));
  ASSERT_EQ(b.unmap(va, kG), Status::ok);
  EXPECT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.unreserve(va, 2 * kG), Status::ok);
}

TEST(HostBackendVm, RejectsMisalignedPartialAndOverlappingMaps) {
  HostBackend b;
  ChunkHandle c = 0, big = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.create_chunk(2 * kG, &big), Status::ok);
  ASSERT_EQ(b.reserve(3 * kG, &va), Status::ok);

  EXPECT_EQ(b.map(va + 4096, kG, c), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("not aligned"));
  EXPECT_EQ(b.map(va, kG / 2, c), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("mapped whole"));
  EXPECT_EQ(b.map(va, 2 * kG, c), Status::invalid_argument);
  EXPECT_EQ(b.map(va, kG, big), Status::invalid_argument) << "part of a chunk";
  EXPECT_EQ(b.map(va + 2 * kG, 2 * kG, big), Status::invalid_argument) << "past the reservation";
  EXPECT_THAT(b.last_error(), HasSubstr("reserved range"));
  EXPECT_EQ(b.map(va + 64 * kG, kG, c), Status::invalid_argument) << "outside any reservation";
  EXPECT_EQ(b.mapped_ranges(), 0u);

  ASSERT_EQ(b.map(va + kG, 2 * kG, big), Status::ok);
  EXPECT_EQ(b.map(va + kG, kG, c), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("overlaps"));
  EXPECT_EQ(b.map(va + 2 * kG, kG, c), Status::invalid_argument);
  EXPECT_EQ(b.mapped_ranges(), 1u);
  EXPECT_EQ(b.map(va, kG, c), Status::ok) << "the free granule before it";
  EXPECT_EQ(b.unmap(va, 3 * kG), Status::ok);
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

TEST(HostBackendVm, RejectsBadHandlesAndSizesWithAMessage) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0;
  EXPECT_EQ(b.release_chunk(12345), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unknown chunk handle"));
  EXPECT_THAT(b.last_error(), HasSubstr("12345"));
  EXPECT_EQ(b.create_chunk(0, &c), Status::invalid_argument);
  EXPECT_EQ(b.create_chunk(kG + 4096, &c), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("granularity"));
  EXPECT_EQ(b.create_chunk(kG, nullptr), Status::invalid_argument);
  EXPECT_EQ(b.reserve(0, &va), Status::invalid_argument);
  EXPECT_EQ(b.reserve(kG / 2, &va), Status::invalid_argument);
  EXPECT_EQ(b.reserve(kG, nullptr), Status::invalid_argument);

  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(kG, &va), Status::ok);
  EXPECT_EQ(b.map(va, kG, c + 1), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unknown chunk"));
  EXPECT_EQ(b.unmap(va, kG), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unmap"));
  EXPECT_EQ(b.set_access(va, kG), Status::invalid_argument);

  ASSERT_EQ(b.map(va, kG, c), Status::ok);
  EXPECT_EQ(b.unreserve(va, kG), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unmap it first"));
  EXPECT_EQ(b.reserved_ranges(), 1u);
  ASSERT_EQ(b.unmap(va, kG), Status::ok);
  EXPECT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.release_chunk(c), Status::invalid_argument) << "double release";
  EXPECT_EQ(b.map(va, kG, c), Status::invalid_argument) << "released handle";
  EXPECT_EQ(b.unreserve(va, kG), Status::ok);

  int dummy = 0;
  EXPECT_EQ(b.launch_host_func(&dummy, Gate::job, nullptr), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unknown stream"));
  EXPECT_EQ(b.event_query(&dummy), Status::invalid_argument);
  EXPECT_THAT(b.last_error(), HasSubstr("unknown event"));
  EXPECT_EQ(b.event_record(&dummy, nullptr), Status::invalid_argument);
  EXPECT_EQ(b.event_destroy(&dummy), Status::invalid_argument);
  EXPECT_EQ(b.stream_destroy(&dummy), Status::invalid_argument);
  EXPECT_EQ(b.stream_destroy(nullptr), Status::invalid_argument);
  EXPECT_EQ(b.stream_synchronize(&dummy), Status::invalid_argument);
  bool capturing = true;
  EXPECT_EQ(b.stream_is_capturing(&dummy, &capturing), Status::invalid_argument);
  EXPECT_EQ(b.launch_host_func(nullptr, nullptr, nullptr), Status::invalid_argument);
}

TEST(HostBackendVm, LastErrorIsPerThread) {
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

TEST(HostBackendVm, CapacityGivesOutOfMemoryUntilAChunkIsReleased) {
  HostBackend b(small(3));
  ChunkHandle c1 = 0, c2 = 0, c3 = 0;
  ASSERT_EQ(b.create_chunk(2 * kG, &c1), Status::ok);
  EXPECT_EQ(b.physical_bytes(), 2 * kG);
  EXPECT_EQ(b.create_chunk(2 * kG, &c2), Status::out_of_memory);
  EXPECT_THAT(b.last_error(), HasSubstr("out of memory"));
  EXPECT_EQ(b.live_chunks(), 1u);
  EXPECT_EQ(b.create_chunk(4 * kG, &c2), Status::out_of_memory);
  ASSERT_EQ(b.create_chunk(kG, &c2), Status::ok) << "exactly at capacity";
  EXPECT_EQ(b.physical_bytes(), 3 * kG);
  EXPECT_EQ(b.create_chunk(kG, &c3), Status::out_of_memory);
  ASSERT_EQ(b.release_chunk(c1), Status::ok);
  EXPECT_EQ(b.physical_bytes(), kG);
  EXPECT_EQ(b.create_chunk(2 * kG, &c3), Status::ok) << b.last_error();
  EXPECT_EQ(b.live_chunks(), 2u);
  EXPECT_NE(c3, c1) << "handles are not reused";
}

TEST(HostBackendVm, ReleasedChunkStaysReadableWhileMapped) {
  HostBackend b;
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b.create_chunk(kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(kG, &va), Status::ok);
  ASSERT_EQ(b.map(va, kG, c), Status::ok);
  ASSERT_EQ(b.set_access(va, kG), Status::ok);
  fill(va, kG, 9);
  ASSERT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.live_chunks(), 0u);
  EXPECT_EQ(b.physical_bytes(), 0u);
  EXPECT_TRUE(holds(va, kG, 9));
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

TEST(HostBackendVm, ManyThreadsCreateMapAndCheckTheirBytes) {
  HostBackend b;
  constexpr int kThreads = 8;
  constexpr int kRounds = 24;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const std::size_t n = 1 + static_cast<std::size_t>((t + r) % 3);
        ChunkHandle c = 0;
        DevicePtr va = 0, vb = 0;
        bool ok = b.create_chunk(n * kG, &c) == Status::ok &&
                  b.reserve(n * kG, &va) == Status::ok && b.reserve(n * kG, &vb) == Status::ok &&
                  b.map(va, n * kG, c) == Status::ok && b.map(vb, n * kG, c) == Status::ok &&
                  b.set_access(va, n * kG) == Status::ok && b.set_access(vb, n * kG) == Status::ok;
        if (ok) {
          const unsigned seed = static_cast<unsigned>(t * 1000 + r);
          fill(va, n * kG, seed);
          ok = holds(vb, n * kG, seed);
        }
        ok = ok && b.unmap(va, n * kG) == Status::ok && b.unmap(vb, n * kG) == Status::ok &&
             b.release_chunk(c) == Status::ok && b.unreserve(va, n * kG) == Status::ok &&
             b.unreserve(vb, n * kG) == Status::ok;
        if (!ok) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(b.live_chunks(), 0u);
  EXPECT_EQ(b.mapped_ranges(), 0u);
  EXPECT_EQ(b.reserved_ranges(), 0u);
  EXPECT_EQ(b.physical_bytes(), 0u);
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
// Streams and events
// ---------------------------------------------------------------------------

TEST(HostBackendStreams, JobsRunInOrderOnAnotherThread) {
  HostBackend b;
  StreamHandle s = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  ASSERT_NE(s, nullptr);
  std::vector<int> order;
  std::thread::id runner;
  Jobs jobs;
  for (int i = 0; i < 500; ++i) {
    jobs.launch(b, s, [&, i] {
      order.push_back(i);
      runner = std::this_thread::get_id();
    });
  }
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  ASSERT_EQ(order.size(), 500u);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_NE(runner, std::this_thread::get_id());
  EXPECT_EQ(b.stream_destroy(s), Status::ok);
}

TEST(HostBackendStreams, DefaultStreamIsAnOrderedQueueToo) {
  HostBackend b;
  std::vector<int> order;
  Jobs jobs;
  for (int i = 0; i < 100; ++i) jobs.launch(b, nullptr, [&, i] { order.push_back(i); });
  ASSERT_EQ(b.stream_synchronize(nullptr), Status::ok);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  bool capturing = true;
  EXPECT_EQ(b.stream_is_capturing(nullptr, &capturing), Status::ok);
  EXPECT_FALSE(capturing);
}

TEST(HostBackendStreams, EventIsPendingWhileEarlierWorkRuns) {
  HostBackend b;
  StreamHandle s = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  ASSERT_EQ(b.event_create(&e), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::ok) << "never recorded counts as complete";

  Gate gate;
  ASSERT_EQ(b.launch_host_func(s, Gate::job, &gate), Status::ok);
  ASSERT_EQ(b.event_record(e, s), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::not_ready);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(b.event_query(e), Status::not_ready);
  gate.open();
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::ok);
  EXPECT_EQ(b.event_destroy(e), Status::ok);
  EXPECT_EQ(b.stream_destroy(s), Status::ok);
}

TEST(HostBackendStreams, EventCoversOnlyWorkBeforeTheRecord) {
  HostBackend b;
  StreamHandle s = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  ASSERT_EQ(b.event_create(&e), Status::ok);
  ASSERT_EQ(b.event_record(e, s), Status::ok);
  Gate gate;
  ASSERT_EQ(b.launch_host_func(s, Gate::job, &gate), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::ok) << "the gate was enqueued after the record";

  ASSERT_EQ(b.event_record(e, s), Status::ok);  // re-record: now behind the gate
  EXPECT_EQ(b.event_query(e), Status::not_ready);
  gate.open();
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  EXPECT_EQ(b.event_query(e), Status::ok);
  EXPECT_EQ(b.event_destroy(e), Status::ok);
}

TEST(HostBackendStreams, StreamWaitEventOrdersStreamsWithoutBlockingTheCaller) {
  HostBackend b;
  StreamHandle sa = nullptr, sb = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b.stream_create(&sa), Status::ok);
  ASSERT_EQ(b.stream_create(&sb), Status::ok);
  ASSERT_EQ(b.event_create(&e), Status::ok);

  Gate gate;
  std::atomic<bool> a_done{false}, b_ran{false}, b_saw_a{false};
  Jobs jobs;
  ASSERT_EQ(b.launch_host_func(sa, Gate::job, &gate), Status::ok);
  jobs.launch(b, sa, [&] { a_done = true; });
  ASSERT_EQ(b.event_record(e, sa), Status::ok);

  // A caller that blocked here would never return: the gate is still shut.
  auto call = std::async(std::launch::async, [&] { return b.stream_wait_event(sb, e); });
  ASSERT_EQ(call.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "stream_wait_event blocked the calling thread";
  ASSERT_EQ(call.get(), Status::ok);
  jobs.launch(b, sb, [&] {
    b_saw_a = a_done.load();
    b_ran = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(b_ran.load()) << "stream B ran before A's event completed";

  gate.open();
  ASSERT_EQ(b.stream_synchronize(sb), Status::ok);
  EXPECT_TRUE(b_ran.load());
  EXPECT_TRUE(b_saw_a.load());
  EXPECT_EQ(b.event_destroy(e), Status::ok);
  EXPECT_EQ(b.stream_destroy(sa), Status::ok);
  EXPECT_EQ(b.stream_destroy(sb), Status::ok);
}

TEST(HostBackendStreams, WaitUsesTheRecordAtTheTimeOfTheCall) {
  HostBackend b;
  StreamHandle sa = nullptr, sb = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b.stream_create(&sa), Status::ok);
  ASSERT_EQ(b.stream_create(&sb), Status::ok);
  ASSERT_EQ(b.event_create(&e), Status::ok);
  Gate first, second;
  ASSERT_EQ(b.launch_host_func(sa, Gate::job, &first), Status::ok);
  ASSERT_EQ(b.event_record(e, sa), Status::ok);
  ASSERT_EQ(b.stream_wait_event(sb, e), Status::ok);
  ASSERT_EQ(b.launch_host_func(sa, Gate::job, &second), Status::ok);
  ASSERT_EQ(b.event_record(e, sa), Status::ok);  // moves the event behind `second`

  std::atomic<bool> b_ran{false};
  Jobs jobs;
  jobs.launch(b, sb, [&] { b_ran = true; });
  first.open();
  auto sync = std::async(std::launch::async, [&] { return b.stream_synchronize(sb); });
  EXPECT_EQ(sync.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "B waited for the later record";
  second.open();
  EXPECT_EQ(sync.get(), Status::ok);
  EXPECT_TRUE(b_ran.load());
  EXPECT_EQ(b.event_destroy(e), Status::ok);
}

TEST(HostBackendStreams, LaunchHostFuncPassesItsArgument) {
  HostBackend b;
  StreamHandle s = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  int value = 0;
  auto add = [](void* p) { *static_cast<int*>(p) += 5; };
  ASSERT_EQ(b.launch_host_func(s, add, &value), Status::ok);
  ASSERT_EQ(b.launch_host_func(s, add, &value), Status::ok);
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  EXPECT_EQ(value, 10);
}

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
  EXPECT_GE(time_of([&] { ASSERT_EQ(b.create_chunk(kG, &c[0]), Status::ok); }), microseconds(10));
  for (int i = 1; i < 4; ++i) ASSERT_EQ(b.create_chunk(kG, &c[i]), Status::ok);
  ASSERT_EQ(b.reserve(4 * kG, &va), Status::ok);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(b.map(va + static_cast<std::size_t>(i) * kG, kG, c[i]), Status::ok);
  }
  // set_access and unmap cost per chunk in the range.
  EXPECT_GE(time_of([&] { ASSERT_EQ(b.set_access(va, 4 * kG), Status::ok); }), microseconds(92));
  EXPECT_GE(time_of([&] { ASSERT_EQ(b.unmap(va, 4 * kG), Status::ok); }), microseconds(64));
  EXPECT_GE(time_of([&] { ASSERT_EQ(b.release_chunk(c[0]), Status::ok); }), microseconds(12));
}

// ---------------------------------------------------------------------------
// Adaptors
// ---------------------------------------------------------------------------

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
            std::chrono::microseconds(10));
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
