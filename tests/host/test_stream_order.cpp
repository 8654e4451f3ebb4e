// Stream order on host streams with deliberately slow queued work: a block
// freed on one stream is not handed to another before that work is done,
// unless the other stream was made to wait for it; the work's bytes prove it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <tuple>

#include "backend/adaptors/counting_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// A job that waits for a gate, then writes `tag` over the block.
struct GatedWrite {
  std::atomic<bool> open{false};
  std::atomic<bool> done{false};
  void* block = nullptr;
  std::size_t size = 0;
  unsigned char tag = 0;
  static void run(void* self) {
    auto* g = static_cast<GatedWrite*>(self);
    while (!g->open.load()) {
    }
    std::memset(g->block, g->tag, g->size);
    g->done = true;
  }
};

// A job that checks the block still holds `expect` everywhere, then writes
// `tag`.
struct CheckThenWrite {
  void* block = nullptr;
  std::size_t size = 0;
  unsigned char expect = 0, tag = 0;
  std::atomic<bool> saw_expected{false};
  static void run(void* self) {
    auto* c = static_cast<CheckThenWrite*>(self);
    const auto* b = static_cast<const unsigned char*>(c->block);
    bool ok = true;
    for (std::size_t i = 0; i < c->size; ++i) ok &= b[i] == c->expect;
    c->saw_expected = ok;
    std::memset(c->block, c->tag, c->size);
  }
};

std::unique_ptr<Allocator> make(bool cross_stream_wait) {
  Config c;
  c.cross_stream_wait = cross_stream_wait;
  c.capacity = 64 * MiB;
  HostBackendOptions o;
  o.capacity = 64 * MiB;
  return std::make_unique<Allocator>(c, std::make_unique<HostBackend>(o));
}

TEST(StreamOrder, PendingBlockIsNotGivenToAnotherStreamWithoutAWait) {
  auto a = make(/*cross_stream_wait=*/false);
  Stream sa = a->create_stream(), sb = a->create_stream();
  void* p = a->allocate(4 * MiB, sa);
  GatedWrite job;
  job.block = p;
  job.size = 4 * MiB;
  job.tag = 0xAA;
  ASSERT_EQ(a->backend().launch_host_func(sa, &GatedWrite::run, &job), Status::ok);
  a->deallocate(p, 4 * MiB, sa);  // A's work still writes p
  void* q = a->allocate(4 * MiB, sb);
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_NE(q, p) << "a block still written by A was handed to B";
  job.open = true;
  a->backend().stream_synchronize(sa);
  EXPECT_EQ(static_cast<unsigned char*>(p)[0], 0xAA);
  a->deallocate(q, 4 * MiB, sb);
  EXPECT_EQ(a->stats().host_waits.current, 0);
  a->destroy_stream(sa);
  a->destroy_stream(sb);
}

TEST(StreamOrder, CrossStreamHandoverMakesTheNewStreamWait) {
  auto a = make(/*cross_stream_wait=*/true);
  // Fill the capacity so that B can only get memory from A's pending free.
  Stream sa = a->create_stream(), sb = a->create_stream();
  void* p = a->allocate(64 * MiB, sa);
  GatedWrite job;
  job.block = p;
  job.size = 64 * MiB;
  job.tag = 0x5A;
  ASSERT_EQ(a->backend().launch_host_func(sa, &GatedWrite::run, &job), Status::ok);
  a->deallocate(p, 64 * MiB, sa);
  const Stats s0 = a->stats();
  void* q = a->allocate(64 * MiB, sb);
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_EQ(q, p);
  EXPECT_EQ(a->stats().cross_stream_waits.current - s0.cross_stream_waits.current, 1);
  // B's work runs only after A's: it sees A's bytes, then writes its own.
  CheckThenWrite check;
  check.block = q;
  check.size = 64 * MiB;
  check.expect = 0x5A;
  check.tag = 0x33;
  ASSERT_EQ(a->backend().launch_host_func(sb, &CheckThenWrite::run, &check), Status::ok);
  job.open = true;
  a->backend().stream_synchronize(sb);
  EXPECT_TRUE(check.saw_expected.load()) << "B's work ran before A's finished";
  EXPECT_EQ(static_cast<unsigned char*>(q)[64 * MiB - 1], 0x33);
  a->deallocate(q, 64 * MiB, sb);
  EXPECT_EQ(a->stats().host_waits.current, 0);
  a->destroy_stream(sa);
  a->destroy_stream(sb);
}

// Under memory pressure a pending block larger than the request is taken
// and split: the request gets its front (after a GPU-side wait when the block
// is another stream's), the rest stays pending on the requesting stream, and
// nothing new is created. Cuts inside a chunk and at a chunk boundary.
TEST(StreamOrder, ALargerPendingBlockIsSplitRatherThanNewMemoryMade) {
  auto a = make(/*cross_stream_wait=*/true);
  Stream sa = a->create_stream(), sb = a->create_stream();
  char* p = static_cast<char*>(a->allocate(64 * MiB, sa));
  GatedWrite job;
  job.block = p;
  job.size = 64 * MiB;
  job.tag = 0x5A;
  ASSERT_EQ(a->backend().launch_host_func(sa, &GatedWrite::run, &job), Status::ok);
  a->deallocate(p, 64 * MiB, sa);
  const Stats s0 = a->stats();
  const std::size_t n1 = 24 * MiB + 4096, n2 = 30 * MiB, n3 = 4 * MiB - 4096;
  void* q1 = a->allocate(n1, sb);  // A's block, by a wait: cut inside a chunk
  void* q2 = a->allocate(n2, sb);  // the rest, pending on B: no wait, cut inside a chunk
  void* q3 = a->allocate(n3, sb);  // cut at a chunk boundary
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_EQ(q1, p);
  EXPECT_EQ(q2, p + n1);
  EXPECT_EQ(q3, p + n1 + n2);
  const Stats s1 = a->stats();
  EXPECT_EQ(s1.cross_stream_waits.current - s0.cross_stream_waits.current, 1);
  EXPECT_EQ(s1.reserved_bytes.current, s0.reserved_bytes.current) << "no new memory";
  EXPECT_EQ(s1.pending_free_bytes.current, static_cast<std::int64_t>(64 * MiB - n1 - n2 - n3));
  CheckThenWrite c1, c2, c3;
  for (auto [c, q, n, tag] : {std::tuple{&c1, q1, n1, 0x31}, std::tuple{&c2, q2, n2, 0x32},
                              std::tuple{&c3, q3, n3, 0x33}}) {
    c->block = q;
    c->size = n;
    c->expect = 0x5A;
    c->tag = static_cast<unsigned char>(tag);
    ASSERT_EQ(a->backend().launch_host_func(sb, &CheckThenWrite::run, c), Status::ok);
  }
  job.open = true;
  a->backend().stream_synchronize(sb);
  EXPECT_TRUE(c1.saw_expected.load() && c2.saw_expected.load() && c3.saw_expected.load())
      << "B's work ran before A's finished";
  EXPECT_EQ(p[n1 - 1], 0x31);
  EXPECT_EQ(p[n1], 0x32);
  EXPECT_EQ(p[n1 + n2 - 1], 0x32);
  EXPECT_EQ(p[n1 + n2], 0x33);
  EXPECT_EQ(p[n1 + n2 + n3], 0x5A) << "the part nobody took was written";
  EXPECT_EQ(a->check_invariants(), "");
  a->deallocate(q2, n2, sb);
  a->deallocate(q1, n1, sb);
  a->deallocate(q3, n3, sb);
  a->process_pending_frees();
  void* whole = a->allocate(64 * MiB, sb);  // the pieces came back together
  EXPECT_EQ(whole, p);
  a->deallocate(whole, 64 * MiB, sb);
  EXPECT_EQ(a->check_invariants(), "");
  EXPECT_EQ(a->stats().host_waits.current, 0);
  a->destroy_stream(sa);
  a->destroy_stream(sb);
}

TEST(StreamOrder, RecordStreamExtendsTheBlocksLife) {
  auto a = make(/*cross_stream_wait=*/false);
  Stream sa = a->create_stream(), sb = a->create_stream();
  void* p = a->allocate(4 * MiB, sa);
  a->record_stream(p, sb);
  GatedWrite job;
  job.block = p;
  job.size = 4 * MiB;
  job.tag = 0x11;
  ASSERT_EQ(a->backend().launch_host_func(sb, &GatedWrite::run, &job), Status::ok);
  a->deallocate(p, 4 * MiB, sa);
  // Not even stream A may reuse it: B still uses it.
  void* q = a->allocate(4 * MiB, sa);
  EXPECT_NE(q, p);
  a->process_pending_frees();
  void* r = a->allocate(4 * MiB, nullptr);
  EXPECT_NE(r, p) << "handed out while B's work was still queued";
  job.open = true;
  a->backend().stream_synchronize(sb);
  a->process_pending_frees();
  EXPECT_EQ(a->stats().pending_free_bytes.current, 0);
  a->deallocate(q, 4 * MiB, sa);
  a->deallocate(r, 4 * MiB, nullptr);
  EXPECT_EQ(a->check_invariants(), "");
  a->destroy_stream(sa);
  a->destroy_stream(sb);
}

TEST(StreamOrder, SameStreamReuseNeedsNoEvent) {
  auto a = make(/*cross_stream_wait=*/false);
  Stream sa = a->create_stream();
  void* p = a->allocate(4 * MiB, sa);
  GatedWrite job;
  job.block = p;
  job.size = 4 * MiB;
  ASSERT_EQ(a->backend().launch_host_func(sa, &GatedWrite::run, &job), Status::ok);
  a->deallocate(p, 4 * MiB, sa);
  const Stats s0 = a->stats();
  void* q = a->allocate(4 * MiB, sa);  // stream order makes this safe
  EXPECT_EQ(q, p);
  EXPECT_EQ(a->stats().path_stream_cache.current - s0.path_stream_cache.current, 1);
  EXPECT_EQ(a->stats().events_recorded.current, s0.events_recorded.current);
  job.open = true;
  a->deallocate(q, 4 * MiB, sa);
  a->destroy_stream(sa);
}

TEST(StreamOrder, UnknownStreamIsMisuse) {
  auto a = make(false);
  int not_a_stream = 0;
  try {
    a->allocate(1024, &not_a_stream);
    FAIL() << "expected misuse";
  } catch (const misuse& e) {
    EXPECT_NE(std::string(e.what()).find("unknown stream"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memlake

namespace memlake {
namespace {

// host_waits counts stream synchronizations made inside allocator calls; a
// synchronize outside them (the caller's own) does not count.
TEST(StreamOrder, HostWaitsCountOnlyInsideAllocatorCalls) {
  auto a = make(false);
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

namespace memlake {
namespace {

// lazy_batches: a slow-path request that mapped free memory serves records no
// event and leaves the open batch alone; one that would need mapping first
// closes the batch (one event) and reuses its block instead of making memory.
void lazy_batches_case(bool lazy) {
  Config c = Config::parse("backend:host,capacity:1G,worker:off");
  c.lazy_batches = lazy;
  Allocator a(c);
  Stream s = a.create_stream();
  void* big = a.allocate(64 * MiB, s);
  void* warm = a.allocate(8 * MiB, s);
  a.deallocate(warm, 8 * MiB, s);
  a.process_pending_frees();  // 8 MiB mapped and free in the lake
  std::memset(big, 0x6B, 64 * MiB);
  a.deallocate(big, 64 * MiB, s);  // pending in the stream's open batch
  const Stats s0 = a.stats();
  void* small = a.allocate(2 * MiB, s);  // not the same size: the slow path
  const Stats s1 = a.stats();
  EXPECT_EQ(s1.events_recorded.current - s0.events_recorded.current, lazy ? 0 : 1);
  void* again = a.allocate(60 * MiB, s);  // more than is mapped and free
  const Stats s2 = a.stats();
  EXPECT_EQ(s2.events_recorded.current - s0.events_recorded.current, 1);
  EXPECT_EQ(s2.reserved_bytes.current, s0.reserved_bytes.current) << "the freed 64 MiB served";
  EXPECT_EQ(s2.critical_path_vmm_calls.current, s0.critical_path_vmm_calls.current);
  std::memset(again, 0x11, 60 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(again)[60 * MiB - 1], 0x11);
  a.deallocate(small, 2 * MiB, s);
  a.deallocate(again, 60 * MiB, s);
  EXPECT_EQ(a.check_invariants(), "");
  a.destroy_stream(s);
}

TEST(StreamOrder, LazyBatchesRecordNoEventWhileMappedFreeMemoryServes) {
  lazy_batches_case(true);
}

TEST(StreamOrder, EagerBatchesCloseOnEverySlowPathAllocation) {
  lazy_batches_case(false);
}

}  // namespace
}  // namespace memlake
