// Stream-ordered mapping (defer_mapping), on every platform: the backend's
// host counters hold a stream until they are raised, and an allocator that
// hands out blocks before their chunks are mapped still gives every kernel
// (host function on the HostBackend) mapped memory, because the block's
// stream waits for the worker's batch first. Data written through each block
// on its stream must read back intact.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allocator/allocator_impl.hpp"
#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/adaptors/turn_taking_backend.hpp"
#include "suites/core_fixture.hpp"
#include "suites/device_work.hpp"

namespace memlake::test {
namespace {

class DeferredMapping : public CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    if (IsSkipped()) return;
    work_ = platform_->work();
    if (work_ == nullptr) GTEST_SKIP() << "no device work (kernels) on this platform";
  }
  static Config deferring_config() {
    Config c = base_config();
    c.max_chunk = 2 * MiB;  // many chunks a block: stitches of many handles
    c.worker = WorkerMode::thread;
    c.defer_mapping = true;
    return c;
  }
  // A backend with a counter and a stream; skips the test where the
  // platform has no counters. The caller stops on IsSkipped() or
  // HasFatalFailure().
  void counter_and_stream(std::unique_ptr<Backend>* backend, CounterHandle* counter,
                          StreamHandle* s) {
    *backend = platform_->backend(64 * MiB);
    const Status made = (*backend)->counter_create(counter);
    if (made == Status::not_supported) GTEST_SKIP() << (*backend)->last_error();
    ASSERT_EQ(made, Status::ok) << (*backend)->last_error();
    ASSERT_EQ((*backend)->stream_create(s), Status::ok) << (*backend)->last_error();
  }
  // A deferring allocator over a backend that fails the calls asked of
  // `*faults`.
  std::unique_ptr<Allocator> deferring_over_faults(FaultBackend** faults) {
    Config c = deferring_config();
    c.capacity = 256 * MiB;
    auto faulty = std::make_unique<FaultBackend>(platform_->backend(c.capacity));
    *faults = faulty.get();
    return std::make_unique<Allocator>(c, std::move(faulty));
  }
  Words read(const void* p, std::size_t words) {
    Words w(words);
    platform_->read(p, w.data(), words * sizeof(std::uint32_t));
    return w;
  }
  DeviceWork* work_ = nullptr;
};

TEST_F(DeferredMapping, CounterHoldsAStreamUntilRaised) {
  std::unique_ptr<Backend> backend;
  CounterHandle counter = nullptr;
  StreamHandle s = nullptr;
  counter_and_stream(&backend, &counter, &s);
  if (IsSkipped() || HasFatalFailure()) return;
  DevicePtr va = 0;
  ChunkHandle chunk = 0;
  const std::size_t g = backend->granularity();
  ASSERT_EQ(backend->reserve(g, &va), Status::ok);
  ASSERT_EQ(backend->create_chunk(g, &chunk), Status::ok);
  ASSERT_EQ(backend->map(va, g, chunk), Status::ok);
  ASSERT_EQ(backend->set_access(va, g), Status::ok);
  const std::size_t words = g / sizeof(std::uint32_t);
  auto* p = reinterpret_cast<std::uint32_t*>(va);
  work_->fill(*backend, s, p, words, 1);
  ASSERT_EQ(backend->stream_wait_counter(s, counter, 2), Status::ok) << backend->last_error();
  work_->fill(*backend, s, p, words, 2);
  EventHandle after = nullptr;
  ASSERT_EQ(backend->event_create(&after), Status::ok);
  ASSERT_EQ(backend->event_record(after, s), Status::ok);
  ASSERT_EQ(backend->counter_set(counter, 1), Status::ok);  // not enough yet
  EXPECT_EQ(backend->event_query(after), Status::not_ready);
  ASSERT_EQ(backend->counter_set(counter, 2), Status::ok);
  ASSERT_EQ(backend->stream_synchronize(s), Status::ok) << backend->last_error();
  EXPECT_EQ(backend->event_query(after), Status::ok);
  EXPECT_EQ(read(p, words), expected_fill(words, 2));
  EXPECT_EQ(backend->event_destroy(after), Status::ok);
  EXPECT_EQ(backend->counter_destroy(counter), Status::ok);
  EXPECT_EQ(backend->unmap(va, g), Status::ok);
  EXPECT_EQ(backend->release_chunk(chunk), Status::ok);
  EXPECT_EQ(backend->unreserve(va, g), Status::ok);
  EXPECT_EQ(backend->stream_destroy(s), Status::ok);
}

TEST_F(DeferredMapping, DestroyingACounterReleasesItsWaiters) {
  std::unique_ptr<Backend> backend;
  CounterHandle counter = nullptr;
  StreamHandle s = nullptr;
  counter_and_stream(&backend, &counter, &s);
  if (IsSkipped() || HasFatalFailure()) return;
  // Small and the largest value a wait may name: both are released.
  ASSERT_EQ(backend->stream_wait_counter(s, counter, 1'000'000), Status::ok);
  ASSERT_EQ(backend->stream_wait_counter(s, counter, Backend::kCounterReleased), Status::ok);
  ASSERT_EQ(backend->counter_destroy(counter), Status::ok);
  EXPECT_EQ(backend->stream_synchronize(s), Status::ok) << backend->last_error();
  EXPECT_EQ(backend->stream_destroy(s), Status::ok);
}

// Beyond kCounterReleased a cyclic comparison could never be met: such
// values are refused, and the counter stays usable.
TEST_F(DeferredMapping, ValuesAboveTheReleasedValueAreRefused) {
  std::unique_ptr<Backend> backend;
  CounterHandle counter = nullptr;
  StreamHandle s = nullptr;
  counter_and_stream(&backend, &counter, &s);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::uint64_t too_high = Backend::kCounterReleased + 1;
  EXPECT_EQ(backend->stream_wait_counter(s, counter, too_high), Status::invalid_argument);
  EXPECT_NE(backend->last_error().find("above 2^62"), std::string::npos) << backend->last_error();
  EXPECT_EQ(backend->counter_set(counter, too_high), Status::invalid_argument);
  ASSERT_EQ(backend->counter_set(counter, 3), Status::ok);
  ASSERT_EQ(backend->stream_wait_counter(s, counter, 3), Status::ok);
  EXPECT_EQ(backend->stream_synchronize(s), Status::ok) << backend->last_error();
  EXPECT_EQ(backend->counter_destroy(counter), Status::ok);
  EXPECT_EQ(backend->stream_destroy(s), Status::ok);
}

// Growth, stitches over scattered chunks and extensions, each block written
// on its stream right after it is handed out and checked after the stream
// drained.
TEST_F(DeferredMapping, BlocksHandedOutBeforeTheirMappingsHoldWhatTheirStreamWrites) {
  auto alloc = make(1024 * MiB, deferring_config());
  const Stream s = alloc->create_stream();
  struct Live {
    std::uint32_t* p;
    std::size_t words;
    std::uint32_t seed;
  };
  std::vector<Live> live;
  std::uint32_t seed = 10;
  auto take = [&](std::size_t bytes) {
    auto* p = static_cast<std::uint32_t*>(alloc->allocate(bytes, s));
    const std::size_t words = bytes / sizeof(std::uint32_t);
    work_->fill(alloc->backend(), s, p, words, ++seed);
    live.push_back({p, words, seed});
  };
  // Interleaved blocks, then every other one freed: scattered free chunks.
  for (int i = 0; i < 12; ++i) take((i % 2 == 0 ? 24 : 6) * MiB);
  for (std::size_t i = 0; i < live.size(); i += 2)
    alloc->deallocate(live[i].p, live[i].words * sizeof(std::uint32_t), s);
  std::vector<Live> kept;
  for (std::size_t i = 1; i < live.size(); i += 2) kept.push_back(live[i]);
  live = kept;
  // Larger than any free run: stitched; then larger than everything free:
  // the deficit is new memory. While a driver turn is held the worker's
  // threads make no VMM call, so what these two queue is still queued when
  // the stream is given the block, and the stream must wait.
  const Stats before = alloc->stats();
  {
    DriverTurns::ForegroundTurn hold(&alloc->impl().driver_turns());
    take(96 * MiB);
    take(200 * MiB);
  }
  const Stats held = alloc->stats();
  ASSERT_GT(held.deferred_batches.current, before.deferred_batches.current);
  EXPECT_GT(held.deferred_stream_waits.current, before.deferred_stream_waits.current);
  for (int i = 0; i < 6; ++i) take((3 + 5 * i) * MiB);
  ASSERT_EQ(alloc->backend().stream_synchronize(s), Status::ok);
  for (const Live& b : live) EXPECT_EQ(read(b.p, b.words), expected_fill(b.words, b.seed));
  const Stats st = alloc->stats();
  EXPECT_GT(st.deferred_vmm_calls.current, 0);
  EXPECT_GT(st.deferred_batches.current, 0);
  EXPECT_GT(st.stitches.current, 0);
  EXPECT_EQ(st.deferred_failures.current, 0);
  for (const Live& b : live) alloc->deallocate(b.p, b.words * sizeof(std::uint32_t), s);
  settle(*alloc);
  ASSERT_EQ(alloc->backend().stream_synchronize(s), Status::ok);
  alloc->empty_cache();
  EXPECT_INVARIANTS(*alloc);
  alloc->destroy_stream(s);
}

// Memory freed on one stream and taken by another while the mappings of the
// first are still queued: the second stream waits for them too.
TEST_F(DeferredMapping, AnotherStreamGivenTheMemoryWaitsToo) {
  auto alloc = make(512 * MiB, deferring_config());
  const Stream a = alloc->create_stream();
  const Stream b = alloc->create_stream();
  const std::size_t words = 40 * MiB / sizeof(std::uint32_t);
  int rounds_deferred = 0;
  for (std::uint32_t round = 0; round < 8; ++round) {
    auto* p = static_cast<std::uint32_t*>(alloc->allocate(words * sizeof(std::uint32_t), a));
    work_->fill(alloc->backend(), a, p, words, 100 + round);
    ASSERT_EQ(alloc->backend().stream_synchronize(a), Status::ok);
    alloc->deallocate(p, words * sizeof(std::uint32_t), a);
    // The worker's threads make no VMM call while a driver turn is held: a
    // batch the allocation queues is still queued when `b` is given it.
    const Stats before = alloc->stats();
    std::uint32_t* q = nullptr;
    {
      DriverTurns::ForegroundTurn hold(&alloc->impl().driver_turns());
      q = static_cast<std::uint32_t*>(alloc->allocate((words + round) * 4 + 8 * MiB, b));
    }
    const Stats after = alloc->stats();
    if (after.deferred_batches.current > before.deferred_batches.current) {
      ++rounds_deferred;
      EXPECT_GT(after.deferred_stream_waits.current, before.deferred_stream_waits.current)
          << "round " << round;
    }
    work_->fill(alloc->backend(), b, q, words, 200 + round);
    ASSERT_EQ(alloc->backend().stream_synchronize(b), Status::ok);
    EXPECT_EQ(read(q, words), expected_fill(words, 200 + round));
    alloc->deallocate(q, (words + round) * 4 + 8 * MiB, b);
  }
  EXPECT_GT(rounds_deferred, 0);
  EXPECT_INVARIANTS(*alloc);
  alloc->destroy_stream(a);
  alloc->destroy_stream(b);
}

// The maps are made before the block is handed out (a library looking the
// pointer up on the host finds it); access is granted by the worker's thread
// after it, and the stream waits for that.
TEST_F(DeferredMapping, MapsAreMadeBeforeTheBlockIsHandedOutAndAccessAfter) {
  auto alloc = make(256 * MiB, deferring_config());
  const Stream s = alloc->create_stream();
  const CountingBackend& counts = alloc->impl().counting();
  const std::size_t words = 24 * MiB / sizeof(std::uint32_t);
  std::uint32_t* p = nullptr;
  std::uint64_t maps = 0, access = 0, waits = 0;
  {
    // The worker's threads make no VMM call while a turn is held.
    DriverTurns::ForegroundTurn hold(&alloc->impl().driver_turns());
    maps = counts.calls(VmmOp::map);
    access = counts.calls(VmmOp::set_access);
    waits = alloc->stats().deferred_stream_waits.current;
    p = static_cast<std::uint32_t*>(alloc->allocate(words * sizeof(std::uint32_t), s));
    EXPECT_GT(counts.calls(VmmOp::map), maps) << "the maps wait for nothing";
    EXPECT_EQ(counts.calls(VmmOp::set_access), access) << "access is the worker's";
    EXPECT_GT(alloc->stats().deferred_stream_waits.current, waits);
    work_->fill(alloc->backend(), s, p, words, 3);
  }
  ASSERT_EQ(alloc->backend().stream_synchronize(s), Status::ok);
  EXPECT_GT(counts.calls(VmmOp::set_access), access);
  EXPECT_EQ(read(p, words), expected_fill(words, 3));
  alloc->deallocate(p, words * sizeof(std::uint32_t), s);
  EXPECT_INVARIANTS(*alloc);
  alloc->destroy_stream(s);
}

// A map the driver refuses is refused to the allocation that asked for it,
// as without deferring; the allocator stays usable.
TEST_F(DeferredMapping, ARefusedMapFailsTheAllocationThatAskedForIt) {
  FaultBackend* faults = nullptr;
  auto owned = deferring_over_faults(&faults);
  Allocator& alloc = *owned;
  const Stream s = alloc.create_stream();
  faults->fail_nth(VmmOp::map, 1);
  const std::size_t words = 8 * MiB / sizeof(std::uint32_t);
  EXPECT_THROW(alloc.allocate(words * sizeof(std::uint32_t), s), backend_error);
  EXPECT_EQ(faults->injected(VmmOp::map), 1u);
  auto* p = static_cast<std::uint32_t*>(alloc.allocate(words * sizeof(std::uint32_t), s));
  work_->fill(alloc.backend(), s, p, words, 4);
  ASSERT_EQ(alloc.backend().stream_synchronize(s), Status::ok);
  EXPECT_EQ(read(p, words), expected_fill(words, 4));
  EXPECT_EQ(alloc.stats().deferred_failures.current, 0);
  alloc.deallocate(p, words * sizeof(std::uint32_t), s);
  EXPECT_INVARIANTS(alloc);
  alloc.destroy_stream(s);
}

// A deferred access grant the driver refuses (twice: the runner tries again
// once): the stream is not held for ever, the next allocation reports the
// cause after making the refused calls again, and from then on the block
// and new ones hold what their stream writes.
TEST_F(DeferredMapping, ARefusedDeferredCallIsMadeAgainAndReported) {
  FaultBackend* faults = nullptr;
  auto owned = deferring_over_faults(&faults);
  Allocator& alloc = *owned;
  const Stream s = alloc.create_stream();
  faults->fail_nth(VmmOp::set_access, 1);
  faults->fail_nth(VmmOp::set_access, 2);
  const std::size_t words = 8 * MiB / sizeof(std::uint32_t);
  auto* p = static_cast<std::uint32_t*>(alloc.allocate(words * sizeof(std::uint32_t), s));
  ASSERT_EQ(alloc.backend().stream_synchronize(s), Status::ok);  // the counter was raised
  EXPECT_EQ(faults->injected(VmmOp::set_access), 2u);
  try {
    alloc.allocate(1 * MiB, s);
    ADD_FAILURE() << "no error after a refused deferred call";
  } catch (const backend_error& e) {
    EXPECT_NE(std::string(e.what()).find("made after its block was handed out failed"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("made again"), std::string::npos) << e.what();
  }
  work_->fill(alloc.backend(), s, p, words, 7);
  auto* q = static_cast<std::uint32_t*>(alloc.allocate(words * sizeof(std::uint32_t), s));
  work_->fill(alloc.backend(), s, q, words, 8);
  ASSERT_EQ(alloc.backend().stream_synchronize(s), Status::ok);
  EXPECT_EQ(read(p, words), expected_fill(words, 7));
  EXPECT_EQ(read(q, words), expected_fill(words, 8));
  EXPECT_GE(alloc.stats().deferred_failures.current, 1);
  alloc.deallocate(p, words * sizeof(std::uint32_t), s);
  alloc.deallocate(q, words * sizeof(std::uint32_t), s);
  EXPECT_INVARIANTS(alloc);
  alloc.destroy_stream(s);
}

TEST_F(DeferredMapping, NeedsTheWorkerThread) {
  Config c = deferring_config();
  c.worker = WorkerMode::inline_jobs;
  EXPECT_THROW(make(64 * MiB, c), config_error);
  c.worker = WorkerMode::off;
  EXPECT_THROW(make(64 * MiB, c), config_error);
}

}  // namespace
}  // namespace memlake::test
