// Direct frees (direct_free): a block freed on a stream goes to the lake at
// once, with no batch and no event of its own; a stream seen later first
// waits (GPU-side, here host-stream-side) on the work queued before, and with
// several streams (direct_free_streams) a stream given another's free waits
// on that stream's fence. Slow queued work and its bytes prove the order, as in
// test_stream_order.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/host/host_backend.hpp"
#include "gated_jobs.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::unique_ptr<Allocator> make(bool cross_stream_wait = true, bool several_streams = true) {
  Config c;
  c.capacity = 64 * MiB;
  c.free_batch = 4;
  c.worker = WorkerMode::off;
  c.cross_stream_wait = cross_stream_wait;
  c.direct_free_streams = several_streams;
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
// from the lake: nothing pending, nothing mapped, no event, no wait.
TEST(DirectFree, AFreeReachesTheLakeAtOnceWithoutAnEvent) {
  auto a = make();
  Stream s = a->create_stream();
  char* p = static_cast<char*>(a->allocate(16 * MiB, s));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, s));
  const Stats s0 = a->stats();
  a->deallocate(p, 16 * MiB, s);  // the job still writes p
  char* q = static_cast<char*>(a->allocate(6 * MiB, s));
  const Stats s1 = a->stats();
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for the stream";
  EXPECT_GE(q, p);
  EXPECT_LE(q + 6 * MiB, p + 16 * MiB) << "served from the block just freed";
  EXPECT_EQ(s1.direct_frees.current - s0.direct_frees.current, 1);
  EXPECT_EQ(s1.pending_free_bytes.current, 0);
  EXPECT_EQ(s1.events_recorded.current, s0.events_recorded.current);
  EXPECT_EQ(s1.own_releases.current, s0.own_releases.current);
  EXPECT_EQ(s1.vmm_calls.current, s0.vmm_calls.current);
  // Stream order: the request's work runs after the job.
  EXPECT_TRUE(ran_after_gate(*a, job, q, 6 * MiB, s, 0x42));
  EXPECT_EQ(static_cast<unsigned char*>(static_cast<void*>(q))[6 * MiB - 1], 0x42);
  a->deallocate(q, 6 * MiB, s);
  EXPECT_EQ(a->check_invariants(), "");
  EXPECT_EQ(a->stats().host_waits.current, 0);
  a->destroy_stream(s);
}

// An event is recorded every free_batch direct frees (4 here), only so that
// the memory can be unmapped once the work before it is done.
TEST(DirectFree, OneEventPerFreeBatch) {
  auto a = make();
  Stream s = a->create_stream();
  std::vector<void*> blocks;
  for (int i = 0; i < 9; ++i) blocks.push_back(a->allocate(MiB, s));
  const Stats s0 = a->stats();
  for (void* p : blocks) a->deallocate(p, MiB, s);
  const Stats s1 = a->stats();
  EXPECT_EQ(s1.direct_frees.current - s0.direct_frees.current, 9);
  EXPECT_EQ(s1.events_recorded.current - s0.events_recorded.current, 2);
  EXPECT_EQ(s1.pending_free_bytes.current, 0);
  a->destroy_stream(s);
}

// A stream first seen after direct frees waits for the work queued before on
// the first stream: given that memory, its work runs after that work.
TEST(DirectFree, AStreamSeenLaterWaitsForTheWorkBefore) {
  auto a = make();
  Stream sa = a->create_stream(), sb = a->create_stream();
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sa));
  a->deallocate(p, 16 * MiB, sa);  // direct: sb was never used
  const Stats s0 = a->stats();
  char* q = static_cast<char*>(a->allocate(8 * MiB, sb));
  const Stats s1 = a->stats();
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_GE(q, p);
  EXPECT_LE(q + 8 * MiB, p + 16 * MiB);
  EXPECT_EQ(s1.reserved_bytes.current, s0.reserved_bytes.current);
  EXPECT_EQ(s1.cross_stream_waits.current - s0.cross_stream_waits.current, 1);
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

// Two streams in use, direct_free_streams: a free on A still goes to the
// lake at once, under A's open fence. B given that memory first waits on the
// fence, recorded then (its work runs after A's); A takes it back without a
// wait (stream order).
TEST(DirectFree, WithSeveralStreamsAnotherStreamGivenTheMemoryWaitsForItsFence) {
  auto a = make();
  TwoStreamsInUse streams(*a);
  const Stream sa = streams.sa, sb = streams.sb;
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sa));
  const Stats s0 = a->stats();
  a->deallocate(p, 16 * MiB, sa);
  const Stats s1 = a->stats();
  EXPECT_EQ(s1.direct_frees.current - s0.direct_frees.current, 1);
  EXPECT_EQ(s1.pending_free_bytes.current, 0);
  EXPECT_EQ(s1.events_recorded.current, s0.events_recorded.current) << "the fence stays open";
  char* q = static_cast<char*>(a->allocate(8 * MiB, sb));
  const Stats s2 = a->stats();
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_GE(q, p);
  EXPECT_LE(q + 8 * MiB, p + 16 * MiB) << "served from A's free, not new memory";
  EXPECT_EQ(s2.reserved_bytes.current, s1.reserved_bytes.current);
  EXPECT_EQ(s2.events_recorded.current - s1.events_recorded.current, 1) << "A's fence recorded";
  EXPECT_EQ(s2.cross_stream_waits.current - s1.cross_stream_waits.current, 1);
  EXPECT_TRUE(ran_after_gate(*a, job, q, 8 * MiB, sb, 0x42))
      << "B's job ran before A's had finished";
  // B frees it; A takes it back: A waits on B's fence, since B's work may
  // still use it, and no wait on its own.
  GatedWrite job_b;
  ASSERT_TRUE(start_gated_write(*a, job_b, q, 8 * MiB, 0x6B, sb));
  a->deallocate(q, 8 * MiB, sb);
  char* r = static_cast<char*>(a->allocate(8 * MiB, sa));
  EXPECT_FALSE(job_b.done.load());
  EXPECT_EQ(r, q) << "the same request takes the same place";
  EXPECT_EQ(a->stats().cross_stream_waits.current - s2.cross_stream_waits.current, 1);
  EXPECT_TRUE(ran_after_gate(*a, job_b, r, 8 * MiB, sa, 0x24))
      << "A's job ran before B's had finished";
  a->deallocate(r, 8 * MiB, sa);
  EXPECT_EQ(a->check_invariants(), "");
  EXPECT_EQ(a->stats().host_waits.current, 0);
}

// A stream reuses its own direct frees among several streams without any
// wait or event: stream order covers them.
TEST(DirectFree, WithSeveralStreamsAStreamReusesItsOwnFreesWithoutWaiting) {
  auto a = make();
  TwoStreamsInUse streams(*a);
  const Stream sa = streams.sa;
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sa));
  const Stats s0 = a->stats();
  a->deallocate(p, 16 * MiB, sa);
  char* q = static_cast<char*>(a->allocate(16 * MiB, sa));
  const Stats s1 = a->stats();
  EXPECT_EQ(q, p);
  EXPECT_EQ(s1.cross_stream_waits.current, s0.cross_stream_waits.current);
  EXPECT_EQ(s1.events_recorded.current, s0.events_recorded.current);
  EXPECT_TRUE(ran_after_gate(*a, job, q, 16 * MiB, sa, 0x42));
  a->deallocate(q, 16 * MiB, sa);
  EXPECT_EQ(a->check_invariants(), "");
}

// A block also used on B (record_stream) and freed on A goes to the lake at
// once too; even A, given it back, first waits for B's work on it.
TEST(DirectFree, ARecordedStreamsWorkIsWaitedForEvenByTheFreeingStream) {
  auto a = make();
  TwoStreamsInUse streams(*a);
  const Stream sa = streams.sa, sb = streams.sb;
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;  // B's work on the block
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sb));
  a->record_stream(p, sb);
  const Stats s0 = a->stats();
  a->deallocate(p, 16 * MiB, sa);
  const Stats s1 = a->stats();
  EXPECT_EQ(s1.direct_frees.current - s0.direct_frees.current, 1);
  EXPECT_EQ(s1.pending_free_bytes.current, 0);
  EXPECT_EQ(s1.events_recorded.current, s0.events_recorded.current);
  char* q = static_cast<char*>(a->allocate(16 * MiB, sa));
  const Stats s2 = a->stats();
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream B";
  EXPECT_EQ(q, p);
  EXPECT_EQ(s2.cross_stream_waits.current - s1.cross_stream_waits.current, 1);
  EXPECT_TRUE(ran_after_gate(*a, job, q, 16 * MiB, sa, 0x42))
      << "A's job ran before B's had finished";
  a->deallocate(q, 16 * MiB, sa);
  EXPECT_EQ(a->check_invariants(), "");
  EXPECT_EQ(a->stats().host_waits.current, 0);
}

// A stream that only has blocks recorded to it (as a communication stream
// does) gets its fence recorded every free_batch such frees too, as the
// freeing stream does: no fence stays open to hold back unmapping.
TEST(DirectFree, ARecordedStreamsFenceClosesEveryFreeBatch) {
  auto a = make();
  TwoStreamsInUse streams(*a);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(a->allocate(MiB, streams.sa));
    a->record_stream(blocks.back(), streams.sb);
  }
  const Stats s0 = a->stats();
  for (void* p : blocks) a->deallocate(p, MiB, streams.sa);
  const Stats s1 = a->stats();
  EXPECT_EQ(s1.direct_frees.current - s0.direct_frees.current, 4);
  EXPECT_EQ(s1.events_recorded.current - s0.events_recorded.current, 2)
      << "A's fence and B's, each after free_batch (4) frees";
  EXPECT_EQ(s1.pending_free_bytes.current, 0);
}

// direct_free_streams off: once two streams are in use, frees wait in
// batches on their stream again.
TEST(DirectFree, WithoutDirectFreeStreamsTwoStreamsUseBatches) {
  auto a = make(/*cross_stream_wait=*/true, /*several_streams=*/false);
  TwoStreamsInUse streams(*a);
  const Stream sa = streams.sa;
  EXPECT_EQ(a->stats().direct_frees.current, 1) << "one stream seen so far";
  void* r = a->allocate(2 * MiB, sa);
  a->deallocate(r, 2 * MiB, sa);
  EXPECT_EQ(a->stats().direct_frees.current, 1);
  EXPECT_EQ(a->stats().pending_free_bytes.current, static_cast<std::int64_t>(2 * MiB));
  a->process_pending_frees();
  EXPECT_EQ(a->check_invariants(), "");
}

// Queued work may still write a directly freed block through its address:
// empty_cache leaves its range mapped until the work is done.
TEST(DirectFree, FreedRangesStayMappedUntilTheWorkBeforeIsDone) {
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

// Without cross-stream waits no stream may be made to wait on another's
// work, not even once: frees stay pending in batches.
TEST(DirectFree, OffWithoutCrossStreamWaits) {
  auto a = make(/*cross_stream_wait=*/false);
  Stream s = a->create_stream();
  void* p = a->allocate(MiB, s);
  a->deallocate(p, MiB, s);
  EXPECT_EQ(a->stats().direct_frees.current, 0);
  EXPECT_EQ(a->stats().pending_free_bytes.current, static_cast<std::int64_t>(MiB));
  a->destroy_stream(s);
}

}  // namespace
}  // namespace memlake
