// Observers hear every kind of event, with what it did: allocations with the
// rung that served them, frees, ranges mapped and unmapped, chunks created
// and released, reclaim, worker jobs and out-of-memory; removed observers
// hear nothing. (GPU-side waits: tests/host/test_stream_order.cpp.)
#include <string>
#include <vector>

#include "suites/core_fixture.hpp"

namespace memlake::test {
namespace {

struct Log final : Observer {
  std::vector<AllocEvent> allocs;
  std::vector<FreeEvent> frees;
  std::vector<MapEvent> maps, unmaps;
  std::size_t created = 0, released = 0, reclaimed = 0, reclaims = 0;
  std::vector<WorkerJobEvent> jobs;
  std::vector<std::size_t> ooms;
  void on_alloc(const AllocEvent& e) override { allocs.push_back(e); }
  void on_free(const FreeEvent& e) override { frees.push_back(e); }
  void on_map(const MapEvent& e) override { maps.push_back(e); }
  void on_unmap(const MapEvent& e) override { unmaps.push_back(e); }
  void on_chunk_created(std::size_t bytes) override { created += bytes; }
  void on_chunk_released(std::size_t bytes) override { released += bytes; }
  void on_reclaim(std::size_t bytes) override {
    reclaimed += bytes;
    ++reclaims;
  }
  void on_worker_job(const WorkerJobEvent& e) override { jobs.push_back(e); }
  void on_oom(std::size_t bytes, void*) override { ooms.push_back(bytes); }
};

TEST_F(CoreTest, ObserversHearEveryKindOfEvent) {
  Config c = base_config();
  c.max_chunk = 2 * MiB;
  c.worker = WorkerMode::inline_jobs;
  auto a = make(64 * MiB, c);
  Log log;
  a->add_observer(&log);

  // New memory, then the rung that served each request.
  void* p = a->allocate(6 * MiB);
  ASSERT_EQ(log.allocs.size(), 1u);
  EXPECT_EQ(log.allocs[0].ptr, p);
  EXPECT_EQ(log.allocs[0].bytes, 6 * MiB);
  EXPECT_EQ(log.allocs[0].size, 6 * MiB);
  EXPECT_EQ(log.allocs[0].rung, Rung::new_memory);
  EXPECT_GT(log.allocs[0].ns, 0);
  EXPECT_EQ(log.created, 6 * MiB) << "three 2 MiB chunks";
  ASSERT_EQ(log.maps.size(), 1u);
  EXPECT_FALSE(log.maps[0].stitched);
  EXPECT_EQ(log.maps[0].bytes, 6 * MiB);
  a->deallocate(p, 6 * MiB);
  ASSERT_EQ(log.frees.size(), 1u);
  EXPECT_EQ(log.frees[0].ptr, p);
  EXPECT_EQ(log.frees[0].bytes, 6 * MiB);
  void* small = a->allocate(1000);
  EXPECT_EQ(log.allocs.back().size, 1024u) << "rounded to 512 bytes";

  // Four scattered chunks stitched: a stitched map.
  auto b = make(64 * MiB, c);
  Log log_b;
  b->add_observer(&log_b);
  std::vector<void*> ps;
  for (int i = 0; i < 16; ++i) ps.push_back(b->allocate(2 * MiB));
  for (void* q : ps) b->deallocate(q, 2 * MiB);
  void* big = b->allocate(8 * MiB);
  EXPECT_EQ(log_b.allocs.back().rung, Rung::stitch);
  EXPECT_TRUE(log_b.maps.back().stitched);
  EXPECT_EQ(log_b.maps.back().bytes, 8 * MiB);

  // empty_cache: ranges unmapped, chunks released, one reclaim.
  b->deallocate(big, 8 * MiB);
  settle_all(*b);
  b->empty_cache();
  EXPECT_FALSE(log_b.unmaps.empty());
  EXPECT_EQ(log_b.reclaims, 1u);
  EXPECT_EQ(log_b.reclaimed, 32 * MiB);
  EXPECT_EQ(log_b.released, 32 * MiB);

  // Out of memory.
  try {
    b->allocate(65 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory&) {
  }
  ASSERT_EQ(log_b.ooms.size(), 1u);
  EXPECT_EQ(log_b.ooms[0], 65 * MiB);

  // A worker job: the reserve made at the first allocation's sync point
  // (inline), then made again once a request took it.
  Config rc = c;
  rc.reserve = 4 * MiB;
  auto r = make(64 * MiB, rc);
  Log log_r;
  r->add_observer(&log_r);
  void* from_reserve = r->allocate(3 * MiB);
  ASSERT_FALSE(log_r.jobs.empty()) << "the worker makes its reserve";
  EXPECT_EQ(log_r.jobs[0].kind, WorkerJobKind::reserve);
  EXPECT_FALSE(log_r.jobs[0].failed);
  EXPECT_EQ(log_r.jobs[0].bytes, 4 * MiB);
  EXPECT_LE(log_r.jobs[0].start_ns, log_r.jobs[0].end_ns);
  EXPECT_EQ(log_r.allocs.back().rung, Rung::reserve);
  r->deallocate(from_reserve, 3 * MiB);
  r->deallocate(r->allocate(1 * MiB), 1 * MiB);
  EXPECT_EQ(log_r.jobs.size(), 2u) << "taking the reserve leaves the worker a new one to make";
  EXPECT_INVARIANTS(*r);

  // A removed observer hears nothing more.
  a->remove_observer(&log);
  const std::size_t heard = log.allocs.size();
  a->deallocate(small, 1000);
  a->deallocate(a->allocate(4096), 4096);
  EXPECT_EQ(log.allocs.size(), heard);
  EXPECT_INVARIANTS(*a);
  EXPECT_INVARIANTS(*b);
}

}  // namespace
}  // namespace memlake::test
