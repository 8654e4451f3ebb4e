// Stream order on host streams with deliberately slow queued work: a freed
// block goes to the lake at once, under its stream's fence (src/stream/
// stream_order.hpp); no stream is given memory another stream's queued work
// may still use without first waiting for that work (GPU-side: here, on the
// host stream), and the allocating thread never waits. The queued work's
// bytes prove the order.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/adaptors/counting_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "gated_jobs.hpp"
#include "memlake/allocator.hpp"
#include "stream/stream_order.hpp"
#include "suites/stats_delta.hpp"

namespace memlake {
namespace {

using test::StatsDelta;

constexpr std::size_t MiB = std::size_t{1} << 20;

std::unique_ptr<Allocator> make() {
  Config c;
  c.capacity = 64 * MiB;
  c.worker = WorkerMode::off;
  HostBackendOptions o;
  o.capacity = 64 * MiB;
  return std::make_unique<Allocator>(c, std::make_unique<HostBackend>(o));
}

// Two streams of `a`, both in use (each has had a block), destroyed at the
// end of the test.
struct TwoStreamsInUse {
  explicit TwoStreamsInUse(Allocator& alloc)
      : a(alloc), sa(alloc.create_stream()), sb(alloc.create_stream()) {
    a.deallocate(a.allocate(MiB, sb), MiB, sb);
  }
  ~TwoStreamsInUse() {
    a.destroy_stream(sa);
    a.destroy_stream(sb);
  }
  TwoStreamsInUse(const TwoStreamsInUse&) = delete;
  TwoStreamsInUse& operator=(const TwoStreamsInUse&) = delete;
  Allocator& a;
  Stream sa, sb;
};

// The freed block serves the stream's next request of another size at once,
// from the lake: nothing mapped, no event, no wait.
TEST(StreamOrder, AFreeReachesTheLakeAtOnceWithoutAnEvent) {
  auto a = make();
  Stream s = a->create_stream();
  char* p = static_cast<char*>(a->allocate(16 * MiB, s));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, s));
  StatsDelta d(*a);
  a->deallocate(p, 16 * MiB, s);  // the job still writes p
  char* q = static_cast<char*>(a->allocate(6 * MiB, s));
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for the stream";
  EXPECT_GE(q, p);
  EXPECT_LE(q + 6 * MiB, p + 16 * MiB) << "served from the block just freed";
  EXPECT_EQ(d(&Stats::events_recorded), 0);
  EXPECT_EQ(d(&Stats::cross_stream_waits), 0);
  EXPECT_EQ(d(&Stats::vmm_calls), 0) << d.changed();
  // Stream order: the request's work runs after the job.
  EXPECT_TRUE(ran_after_gate(*a, job, q, 6 * MiB, s, 0x42));
  EXPECT_EQ(static_cast<unsigned char*>(static_cast<void*>(q))[6 * MiB - 1], 0x42);
  a->deallocate(q, 6 * MiB, s);
  EXPECT_EQ(a->check_invariants(), "");
  EXPECT_EQ(a->stats().host_waits.current, 0);
  a->destroy_stream(s);
}

// A stream records its fence once every kFreesPerFence frees, only so that
// the memory can be unmapped once the work before it is done.
TEST(StreamOrder, OneEventPerFenceOfFrees) {
  auto a = make();
  Stream s = a->create_stream();
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < 2 * kFreesPerFence + 1; ++i) blocks.push_back(a->allocate(4096, s));
  StatsDelta d(*a);
  for (void* p : blocks) a->deallocate(p, 4096, s);
  EXPECT_EQ(d(&Stats::frees), static_cast<std::int64_t>(blocks.size()));
  EXPECT_EQ(d(&Stats::events_recorded), 2);
  a->destroy_stream(s);
}

// A stream first seen after frees waits for the work queued before on the
// first stream: given that memory, its work runs after that work.
TEST(StreamOrder, AStreamSeenLaterWaitsForTheWorkBefore) {
  auto a = make();
  Stream sa = a->create_stream(), sb = a->create_stream();
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sa));
  a->deallocate(p, 16 * MiB, sa);  // sb was never used
  StatsDelta d(*a);
  char* q = static_cast<char*>(a->allocate(8 * MiB, sb));
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_GE(q, p);
  EXPECT_LE(q + 8 * MiB, p + 16 * MiB);
  EXPECT_EQ(d(&Stats::reserved_bytes), 0);
  EXPECT_EQ(d(&Stats::cross_stream_waits), 1);
  EXPECT_TRUE(ran_after_gate(*a, job, q, 8 * MiB, sb, 0x42))
      << "B's job ran before A's had finished";
  a->deallocate(q, 8 * MiB, sb);
  a->backend().stream_synchronize(sa);
  a->process_pending_frees();
  EXPECT_EQ(a->check_invariants(), "");
  EXPECT_EQ(a->stats().host_waits.current, 0);
  a->destroy_stream(sa);
  a->destroy_stream(sb);
}

// Two streams in use: a free on A goes to the lake at once, under A's open
// fence. B given that memory first waits on the fence, recorded then (its
// work runs after A's); A takes memory B freed back after waiting on B's.
TEST(StreamOrder, AnotherStreamGivenTheMemoryWaitsForItsFence) {
  auto a = make();
  TwoStreamsInUse streams(*a);
  const Stream sa = streams.sa, sb = streams.sb;
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sa));
  StatsDelta d(*a);
  a->deallocate(p, 16 * MiB, sa);
  EXPECT_EQ(d(&Stats::events_recorded), 0) << "the fence stays open";
  d.restart();
  char* q = static_cast<char*>(a->allocate(8 * MiB, sb));
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_GE(q, p);
  EXPECT_LE(q + 8 * MiB, p + 16 * MiB) << "served from A's free, not new memory";
  EXPECT_EQ(d(&Stats::reserved_bytes), 0);
  EXPECT_EQ(d(&Stats::events_recorded), 1) << "A's fence recorded";
  EXPECT_EQ(d(&Stats::cross_stream_waits), 1);
  EXPECT_TRUE(ran_after_gate(*a, job, q, 8 * MiB, sb, 0x42))
      << "B's job ran before A's had finished";
  GatedWrite job_b;
  ASSERT_TRUE(start_gated_write(*a, job_b, q, 8 * MiB, 0x6B, sb));
  d.restart();
  a->deallocate(q, 8 * MiB, sb);
  char* r = static_cast<char*>(a->allocate(8 * MiB, sa));
  EXPECT_FALSE(job_b.done.load());
  EXPECT_EQ(r, q) << "the same request takes the same place";
  EXPECT_EQ(d(&Stats::cross_stream_waits), 1);
  EXPECT_TRUE(ran_after_gate(*a, job_b, r, 8 * MiB, sa, 0x24))
      << "A's job ran before B's had finished";
  a->deallocate(r, 8 * MiB, sa);
  EXPECT_EQ(a->check_invariants(), "");
  EXPECT_EQ(a->stats().host_waits.current, 0);
}

// A stream reuses its own frees among several streams without any wait or
// event: stream order covers them.
TEST(StreamOrder, AStreamReusesItsOwnFreesWithoutWaiting) {
  auto a = make();
  TwoStreamsInUse streams(*a);
  const Stream sa = streams.sa;
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sa));
  StatsDelta d(*a);
  a->deallocate(p, 16 * MiB, sa);
  char* q = static_cast<char*>(a->allocate(16 * MiB, sa));
  EXPECT_EQ(q, p);
  EXPECT_EQ(d(&Stats::cross_stream_waits), 0);
  EXPECT_EQ(d(&Stats::events_recorded), 0);
  EXPECT_TRUE(ran_after_gate(*a, job, q, 16 * MiB, sa, 0x42));
  a->deallocate(q, 16 * MiB, sa);
  EXPECT_EQ(a->check_invariants(), "");
}

// A block also used on B (record_stream) and freed on A goes to the lake at
// once too; even A, given it back, first waits for B's work on it.
TEST(StreamOrder, ARecordedStreamsWorkIsWaitedForEvenByTheFreeingStream) {
  auto a = make();
  TwoStreamsInUse streams(*a);
  const Stream sa = streams.sa, sb = streams.sb;
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;  // B's work on the block
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sb));
  a->record_stream(p, sb);
  StatsDelta d(*a);
  a->deallocate(p, 16 * MiB, sa);
  EXPECT_EQ(d(&Stats::events_recorded), 0);
  EXPECT_EQ(a->check_invariants(), "") << "B stays listed for a block freed already";
  d.restart();
  char* q = static_cast<char*>(a->allocate(16 * MiB, sa));
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream B";
  EXPECT_EQ(q, p);
  EXPECT_EQ(d(&Stats::cross_stream_waits), 1);
  EXPECT_TRUE(ran_after_gate(*a, job, q, 16 * MiB, sa, 0x42))
      << "A's job ran before B's had finished";
  a->deallocate(q, 16 * MiB, sa);
  EXPECT_EQ(a->check_invariants(), "");
  EXPECT_EQ(a->stats().host_waits.current, 0);
}

// A stream that only has blocks recorded to it (as a communication stream
// does) gets its fence recorded after as many frees as the freeing stream:
// no fence stays open to hold back unmapping.
TEST(StreamOrder, ARecordedStreamsFenceClosesAfterItsFrees) {
  auto a = make();
  TwoStreamsInUse streams(*a);
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < kFreesPerFence; ++i) {
    blocks.push_back(a->allocate(4096, streams.sa));
    a->record_stream(blocks.back(), streams.sb);
  }
  StatsDelta d(*a);
  for (void* p : blocks) a->deallocate(p, 4096, streams.sa);
  EXPECT_EQ(d(&Stats::events_recorded), 2) << "A's fence and B's, each after kFreesPerFence frees";
}

// Queued work may still write a freed block through its address:
// empty_cache leaves its range mapped until the work is done.
TEST(StreamOrder, FreedRangesStayMappedUntilTheWorkBeforeIsDone) {
  auto a = make();
  Stream s = a->create_stream();
  char* p = static_cast<char*>(a->allocate(32 * MiB, s));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 32 * MiB, 0x77, s));
  a->deallocate(p, 32 * MiB, s);
  a->empty_cache();
  EXPECT_GE(a->stats().reserved_bytes.current, static_cast<std::int64_t>(32 * MiB));
  job.open = true;
  a->backend().stream_synchronize(s);
  EXPECT_EQ(static_cast<unsigned char*>(static_cast<void*>(p))[32 * MiB - 1], 0x77);
  a->empty_cache();
  EXPECT_EQ(a->stats().reserved_bytes.current, 0) << "released once the work was done";
  EXPECT_EQ(a->stats().host_waits.current, 0);
  a->destroy_stream(s);
}

// Events on a stream complete in order: once one allocation finds a
// stream's oldest fence incomplete, it asks about none of its later ones.
// Allocations served from mapped memory look at the fences once in
// kAllocationsPerFenceLook calls, and a look asks one event per stream
// behind, however many of its fences are in flight.
TEST(StreamOrder, AllocationsLookAtFencesRarelyAndAskOneEventPerStreamBehind) {
  auto a = make();
  Stream s = a->create_stream();
  void* gated = a->allocate(MiB, s);
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, gated, MiB, 0x31, s));
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < 3 * kFreesPerFence; ++i) blocks.push_back(a->allocate(4096, s));
  for (void* p : blocks) a->deallocate(p, 4096, s);  // three fences, all behind the job
  StatsDelta d(*a);
  blocks.clear();
  for (std::size_t i = 0; i < kAllocationsPerFenceLook; ++i) blocks.push_back(a->allocate(4096, s));
  EXPECT_EQ(d(&Stats::event_queries), 1);
  job.open = true;
  a->backend().stream_synchronize(s);
  for (void* p : blocks) a->deallocate(p, 4096, s);
  a->deallocate(gated, MiB, s);
  a->destroy_stream(s);
}

// Observers hear each GPU-side wait: which stream waited on which.
TEST(StreamOrder, ObserversHearWhichStreamWaitedOnWhich) {
  struct Waits final : Observer {
    std::vector<std::pair<void*, void*>> seen;
    void on_stream_wait(void* stream, void* source) override { seen.emplace_back(stream, source); }
  } waits;
  auto a = make();
  TwoStreamsInUse streams(*a);
  a->add_observer(&waits);
  char* p = static_cast<char*>(a->allocate(16 * MiB, streams.sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, streams.sa));
  a->deallocate(p, 16 * MiB, streams.sa);
  void* q = a->allocate(8 * MiB, streams.sb);
  ASSERT_EQ(waits.seen.size(), 1u);
  EXPECT_EQ(waits.seen[0].first, streams.sb);
  EXPECT_EQ(waits.seen[0].second, streams.sa);
  job.open = true;
  a->backend().stream_synchronize(streams.sa);
  a->deallocate(q, 8 * MiB, streams.sb);
  a->remove_observer(&waits);
}

TEST(StreamOrder, UnknownStreamIsMisuse) {
  auto a = make();
  int not_a_stream = 0;
  try {
    a->allocate(1024, &not_a_stream);
    FAIL() << "expected misuse";
  } catch (const misuse& e) {
    EXPECT_NE(std::string(e.what()).find("unknown stream"), std::string::npos) << e.what();
  }
}

// host_waits counts stream synchronizations made inside allocator calls; a
// synchronize outside them (the caller's own) does not count.
TEST(StreamOrder, HostWaitsCountOnlyInsideAllocatorCalls) {
  auto a = make();
  Stream s = a->create_stream();
  a->backend().stream_synchronize(s);
  EXPECT_EQ(a->stats().host_waits.current, 0);
  {
    CriticalPathScope inside;  // as malloc/free would be
    a->backend().stream_synchronize(s);
  }
  EXPECT_EQ(a->stats().host_waits.current, 1);
  a->destroy_stream(s);
}

}  // namespace
}  // namespace memlake
