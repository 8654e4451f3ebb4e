// Stream order on host streams with deliberately slow queued work: a block
// freed on one stream is not handed to another before that work is done,
// unless the other stream was made to wait for it; the work's bytes prove it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/adaptors/counting_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "gated_jobs.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Frees are deferred in batches here, as with several streams in use; the
// direct frees of a single stream have their own tests below.
std::unique_ptr<Allocator> make(bool cross_stream_wait, bool direct_free = false) {
  Config c;
  c.cross_stream_wait = cross_stream_wait;
  c.direct_free = direct_free;
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
  ASSERT_TRUE(start_gated_write(*a, job, p, 4 * MiB, 0xAA, sa));
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
  ASSERT_TRUE(start_gated_write(*a, job, p, 64 * MiB, 0x5A, sa));
  a->deallocate(p, 64 * MiB, sa);
  const Stats s0 = a->stats();
  void* q = a->allocate(64 * MiB, sb);
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_EQ(q, p);
  EXPECT_EQ(a->stats().cross_stream_waits.current - s0.cross_stream_waits.current, 1);
  // B's work runs only after A's: it sees A's bytes, then writes its own.
  EXPECT_TRUE(ran_after_gate(*a, job, q, 64 * MiB, sb, 0x33)) << "B's work ran before A's finished";
  EXPECT_EQ(static_cast<unsigned char*>(q)[64 * MiB - 1], 0x33);
  a->deallocate(q, 64 * MiB, sb);
  EXPECT_EQ(a->stats().host_waits.current, 0);
  a->destroy_stream(sa);
  a->destroy_stream(sb);
}

// Under memory pressure a pending block larger than the request is taken
// and split: the request gets its front after a GPU-side wait (the block is
// another stream's), the rest is pending on the requesting stream and serves
// its next requests (through the lake, released under that stream's own
// fence), and nothing new is created. Every byte shows B's work ran after A's.
TEST(StreamOrder, ALargerPendingBlockIsSplitRatherThanNewMemoryMade) {
  auto a = make(/*cross_stream_wait=*/true);
  Stream sa = a->create_stream(), sb = a->create_stream();
  char* p = static_cast<char*>(a->allocate(64 * MiB, sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 64 * MiB, 0x5A, sa));
  a->deallocate(p, 64 * MiB, sa);
  const Stats s0 = a->stats();
  const std::size_t n1 = 24 * MiB + 4096, n2 = 30 * MiB, n3 = 4 * MiB - 4096;
  char* q1 = static_cast<char*>(a->allocate(n1, sb));  // A's block, by a wait: cut inside a chunk
  char* q2 = static_cast<char*>(a->allocate(n2, sb));  // the rest, B's own now: no wait
  char* q3 = static_cast<char*>(a->allocate(n3, sb));
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_EQ(q1, p);
  for (auto [q, n] : {std::pair{q2, n2}, {q3, n3}}) {
    EXPECT_GE(q, p + n1) << "inside the rest of A's block";
    EXPECT_LE(q + n, p + 64 * MiB);
  }
  EXPECT_TRUE(q3 >= q2 + n2 || q3 + n3 <= q2) << "q2 and q3 overlap";
  const Stats s1 = a->stats();
  EXPECT_EQ(s1.cross_stream_waits.current - s0.cross_stream_waits.current, 1);
  EXPECT_EQ(s1.reserved_bytes.current, s0.reserved_bytes.current) << "no new memory";
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
  std::size_t untouched = 0;
  for (std::size_t i = 0; i < 64 * MiB; ++i) {
    const char* at = p + i;
    const unsigned char want = at < q1 + n1                 ? 0x31
                               : (at >= q2 && at < q2 + n2) ? 0x32
                               : (at >= q3 && at < q3 + n3) ? 0x33
                                                            : 0x5A;
    if (static_cast<unsigned char>(*at) != want) {
      ADD_FAILURE() << "byte " << i << " holds " << int(*at) << ", not " << int(want);
      break;
    }
    untouched += want == 0x5A;
  }
  EXPECT_EQ(untouched, 64 * MiB - n1 - n2 - n3) << "the part nobody took holds A's write";
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

// A stream's own frees still pending on its queued work serve its next
// request of another size before anything is mapped (stream order makes
// that safe), without waiting for the work. Another stream given memory
// freed that way waits for the work first, GPU-side: its job sees the bytes
// the first stream's job wrote.
TEST(StreamOrder, OwnPendingFreesServeTheStreamAndOthersWaitForThem) {
  auto a = make(/*cross_stream_wait=*/true);
  Stream sa = a->create_stream(), sb = a->create_stream();
  void* b_known = a->allocate(4096, sb);  // B is a stream the allocator knows already
  char* p = static_cast<char*>(a->allocate(16 * MiB, sa));
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(*a, job, p, 16 * MiB, 0x5A, sa));
  a->deallocate(p, 16 * MiB, sa);
  const Stats s0 = a->stats();
  char* mine = static_cast<char*>(a->allocate(6 * MiB, sa));  // another size, same stream
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  const Stats s1 = a->stats();
  EXPECT_GE(mine, p);
  EXPECT_LE(mine + 6 * MiB, p + 16 * MiB) << "served from A's own pending free";
  EXPECT_EQ(s1.own_releases.current - s0.own_releases.current, 1);
  EXPECT_EQ(s1.vmm_calls.current, s0.vmm_calls.current) << "nothing mapped";
  EXPECT_EQ(s1.cross_stream_waits.current, s0.cross_stream_waits.current);
  // B gets the rest of that block: only after A's work, by a GPU-side wait.
  char* theirs = static_cast<char*>(a->allocate(8 * MiB, sb));
  EXPECT_FALSE(job.done.load()) << "allocate must not wait for stream A";
  EXPECT_GE(theirs, p);
  EXPECT_LE(theirs + 8 * MiB, p + 16 * MiB);
  EXPECT_EQ(a->stats().cross_stream_waits.current - s1.cross_stream_waits.current, 1);
  EXPECT_EQ(a->stats().reserved_bytes.current, s0.reserved_bytes.current);
  EXPECT_TRUE(ran_after_gate(*a, job, theirs, 8 * MiB, sb, 0x42))
      << "B's job ran before A's had finished";
  a->backend().stream_synchronize(sa);
  a->deallocate(mine, 6 * MiB, sa);
  a->deallocate(theirs, 8 * MiB, sb);
  a->deallocate(b_known, 4096, sb);
  a->process_pending_frees();
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
  ASSERT_TRUE(start_gated_write(*a, job, p, 4 * MiB, 0x11, sb));
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
  ASSERT_TRUE(start_gated_write(*a, job, p, 4 * MiB, 0, sa));
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
  Config c = Config::parse("backend:host,capacity:1G,worker:off,direct_free:false");
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

// Frees retire completed frees of their stream a few at a time (the
// retire_per_free option), so the next allocation does not find a whole
// step's frees to hand to the lake; blocks whose work is still queued stay
// pending.
std::int64_t pending_after_frees(std::size_t retire_per_free, bool gated) {
  Config c;
  c.capacity = 64 * MiB;
  c.free_batch = 4;
  c.retire_per_free = retire_per_free;
  c.direct_free = false;
  HostBackendOptions o;
  o.capacity = 64 * MiB;
  Allocator a(c, std::make_unique<HostBackend>(o));
  Stream s = a.create_stream();
  constexpr int kBlocks = 24;  // six batches: under the count that retires them all
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) blocks.push_back(a.allocate(MiB, s));
  GatedWrite job;
  if (gated) {
    EXPECT_TRUE(start_gated_write(a, job, blocks.front(), MiB, 0x5A, s));
  }
  for (void* p : blocks) a.deallocate(p, MiB, s);
  const std::int64_t pending = a.stats().pending_free_bytes.current;
  EXPECT_EQ(a.check_invariants(), "");
  job.open = true;
  a.backend().stream_synchronize(s);
  if (gated) {
    EXPECT_EQ(static_cast<unsigned char*>(blocks.front())[0], 0x5A);
  }
  a.process_pending_frees();
  EXPECT_EQ(a.stats().pending_free_bytes.current, 0);
  EXPECT_EQ(a.stats().host_waits.current, 0);
  a.destroy_stream(s);
  return pending;
}

TEST(StreamOrder, FreesRetireTheirStreamsCompletedFreesAFewAtATime) {
  // Four frees per batch, two retired per free: at most the last batch stays.
  EXPECT_LE(pending_after_frees(/*retire_per_free=*/2, /*gated=*/false),
            static_cast<std::int64_t>(4 * MiB));
  EXPECT_EQ(pending_after_frees(/*retire_per_free=*/0, /*gated=*/false),
            static_cast<std::int64_t>(24 * MiB));
  // Work queued before the frees still runs: nothing of theirs is retired.
  EXPECT_EQ(pending_after_frees(/*retire_per_free=*/2, /*gated=*/true),
            static_cast<std::int64_t>(24 * MiB));
}

TEST(StreamOrder, LazyBatchesRecordNoEventWhileMappedFreeMemoryServes) {
  lazy_batches_case(true);
}

TEST(StreamOrder, EagerBatchesCloseOnEverySlowPathAllocation) {
  lazy_batches_case(false);
}

}  // namespace
}  // namespace memlake

namespace memlake {
namespace {

// Notes whether the gated jobs had finished when it ran, then writes `tag`.
struct RunsAfter {
  const GatedWrite* first = nullptr;
  const GatedWrite* second = nullptr;
  void* block = nullptr;
  std::size_t size = 0;
  unsigned char tag = 0;
  std::atomic<bool> ran_after{false};
  static void run(void* self) {
    auto* r = static_cast<RunsAfter*>(self);
    r->ran_after = r->first->done.load() && r->second->done.load();
    std::memset(r->block, r->tag, r->size);
  }
};

// Two 32 MiB blocks freed on streams A and B while their queued work still
// writes them, the capacity full: no single pending block holds a 64 MiB
// request on C, together they do. A fence makes every stream wait for A's and
// B's work so far, and the request is served from their memory, without new
// memory and without a host wait.
struct FenceCase {
  std::unique_ptr<Allocator> a = make(/*cross_stream_wait=*/true);
  Stream sa = a->create_stream(), sb = a->create_stream(), sc = a->create_stream();
  GatedWrite job_a, job_b;
  void* p1 = nullptr;
  void* p2 = nullptr;

  FenceCase() {
    p1 = a->allocate(32 * MiB, sa);
    p2 = a->allocate(32 * MiB, sb);
    gate(job_a, p1, 0x11, sa);
    gate(job_b, p2, 0x22, sb);
    a->deallocate(p1, 32 * MiB, sa);
    a->deallocate(p2, 32 * MiB, sb);
  }
  void gate(GatedWrite& job, void* p, unsigned char tag, Stream s) {
    EXPECT_TRUE(start_gated_write(*a, job, p, 32 * MiB, tag, s));
  }
  void open_gates() {
    job_a.open = true;
    job_b.open = true;
    a->backend().stream_synchronize(sa);
    a->backend().stream_synchronize(sb);
    a->backend().stream_synchronize(sc);  // it waits on the fence
  }
  // Queues a write of `tag` over the block on `s`, opens the gates, and says
  // whether the write ran after A's and B's work.
  bool write_runs_after_gates(void* block, std::size_t size, unsigned char tag, Stream s) {
    RunsAfter use;
    use.first = &job_a;
    use.second = &job_b;
    use.block = block;
    use.size = size;
    use.tag = tag;
    EXPECT_EQ(a->backend().launch_host_func(s, &RunsAfter::run, &use), Status::ok);
    open_gates();
    a->backend().stream_synchronize(s);
    return use.ran_after.load();
  }
  ~FenceCase() {
    open_gates();
    EXPECT_EQ(a->stats().host_waits.current, 0);
    EXPECT_EQ(a->check_invariants(), "");
    a->destroy_stream(sa);
    a->destroy_stream(sb);
    a->destroy_stream(sc);
  }
};

TEST(StreamOrder, PendingBlocksTogetherServeALargerRequestBehindAFence) {
  FenceCase f;
  const Stats s0 = f.a->stats();
  void* q = f.a->allocate(64 * MiB, f.sc);
  const Stats s1 = f.a->stats();
  EXPECT_FALSE(f.job_a.done.load() || f.job_b.done.load()) << "allocate must not wait";
  EXPECT_EQ(s1.fences.current - s0.fences.current, 1);
  EXPECT_EQ(s1.reserved_bytes.current, s0.reserved_bytes.current) << "no new memory";
  EXPECT_EQ(s1.pending_free_bytes.current, 0);
  EXPECT_TRUE(f.write_runs_after_gates(q, 64 * MiB, 0x33, f.sc))
      << "C's work ran before A's and B's finished";
  const auto* b = static_cast<const unsigned char*>(q);
  for (std::size_t i = 0; i < 64 * MiB; i += 4096)
    ASSERT_EQ(b[i], 0x33) << "A's or B's work wrote over C's block at byte " << i;
  f.a->deallocate(q, 64 * MiB, f.sc);
}

TEST(StreamOrder, AStreamFirstSeenAfterAFenceWaitsForIt) {
  FenceCase f;
  void* q = f.a->allocate(40 * MiB, f.sc);  // a fence; 24 MiB of A's and B's stay free
  Stream sd = f.a->create_stream();
  void* r = f.a->allocate(16 * MiB, sd);  // from the fenced memory
  EXPECT_FALSE(f.job_a.done.load() || f.job_b.done.load()) << "allocate must not wait";
  EXPECT_TRUE(f.write_runs_after_gates(r, 16 * MiB, 0x44, sd))
      << "the new stream's work ran before the fenced work";
  EXPECT_EQ(static_cast<unsigned char*>(r)[16 * MiB - 1], 0x44);
  f.a->deallocate(q, 40 * MiB, f.sc);
  f.a->deallocate(r, 16 * MiB, sd);
  f.a->destroy_stream(sd);
}

// Queued work may still write fenced blocks through their own addresses:
// reclaim leaves those ranges mapped until the fence completes.
TEST(StreamOrder, FencedRangesStayMappedUntilTheFenceCompletes) {
  FenceCase f;
  void* q = f.a->allocate(64 * MiB, f.sc);
  f.a->deallocate(q, 64 * MiB, f.sc);
  f.a->empty_cache();
  EXPECT_GE(f.a->stats().reserved_bytes.current, static_cast<std::int64_t>(64 * MiB));
  f.open_gates();  // A and B write through p1 and p2: still mapped
  EXPECT_EQ(static_cast<unsigned char*>(f.p1)[32 * MiB - 1], 0x11);
  EXPECT_EQ(static_cast<unsigned char*>(f.p2)[0], 0x22);
  f.a->empty_cache();
  EXPECT_EQ(f.a->stats().reserved_bytes.current, 0) << "released once the fence completed";
}

// A request that pending blocks cannot cover even together gets new memory
// and leaves them pending: no fence.
TEST(StreamOrder, NoFenceWhenPendingBlocksCannotHoldTheRequest) {
  Config c;
  c.capacity = 128 * MiB;
  c.direct_free = false;
  HostBackendOptions o;
  o.capacity = 128 * MiB;
  Allocator a(c, std::make_unique<HostBackend>(o));
  Stream sa = a.create_stream(), sb = a.create_stream();
  void* p = a.allocate(8 * MiB, sa);
  GatedWrite job;
  ASSERT_TRUE(start_gated_write(a, job, p, 8 * MiB, 0, sa));
  a.deallocate(p, 8 * MiB, sa);
  void* q = a.allocate(32 * MiB, sb);
  EXPECT_EQ(a.stats().fences.current, 0);
  EXPECT_EQ(a.stats().pending_free_bytes.current, static_cast<std::int64_t>(8 * MiB));
  job.open = true;
  a.backend().stream_synchronize(sa);
  a.deallocate(q, 32 * MiB, sb);
  a.destroy_stream(sa);
  a.destroy_stream(sb);
}

}  // namespace
}  // namespace memlake
