// With frees in batches (direct_free_streams:false), blocks used on several
// streams (record_stream) get an event per stream at their free. Events on one stream complete in
// order, so once a harvest finds one incomplete it does not ask the later blocks' events on that
// stream.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "backend/adaptors/backend_adaptor.hpp"
#include "backend/host/host_backend.hpp"
#include "gated_jobs.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

class QueryCounting : public BackendAdaptor {
 public:
  QueryCounting(std::unique_ptr<Backend> upstream, std::atomic<int>* queries)
      : BackendAdaptor(std::move(upstream), "query-counting"), queries_(queries) {}
  Status event_query(EventHandle event) override {
    ++*queries_;
    return BackendAdaptor::event_query(event);
  }

 private:
  std::atomic<int>* queries_;
};

TEST(TaggedFrees, AStreamFoundBehindIsNotAskedAgainForLaterBlocks) {
  std::atomic<int> queries{0};
  HostBackendOptions o;
  o.capacity = 64 * MiB;
  Config c;
  c.capacity = 64 * MiB;
  c.worker = WorkerMode::off;
  c.direct_free_streams = false;
  Allocator a(c, std::make_unique<QueryCounting>(std::make_unique<HostBackend>(o), &queries));
  Stream sa = a.create_stream(), sb = a.create_stream();
  GatedWrite gate;  // B's queued work: not done until the gate opens
  ASSERT_TRUE(start_gated_write(a, gate, a.allocate(MiB, sb), MiB, 0x3C, sb));
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) {
    blocks.push_back(a.allocate(2 * MiB, sa));
    a.record_stream(blocks.back(), sb);
  }
  for (void* p : blocks) a.deallocate(p, 2 * MiB, sa);  // each: an event on B, one on A
  EXPECT_EQ(a.stats().pending_free_bytes.current, static_cast<std::int64_t>(6 * MiB));
  const int before = queries.load();
  a.process_pending_frees();
  EXPECT_EQ(queries.load() - before, 1) << "B's first event is incomplete: its later ones too";
  EXPECT_EQ(a.stats().pending_free_bytes.current, static_cast<std::int64_t>(6 * MiB));
  gate.open = true;
  a.backend().stream_synchronize(sb);
  a.backend().stream_synchronize(sa);
  a.process_pending_frees();
  EXPECT_EQ(a.stats().pending_free_bytes.current, 0) << "all three retire once B is done";
  EXPECT_EQ(static_cast<unsigned char*>(gate.block)[MiB - 1], 0x3C);
  a.deallocate(gate.block, MiB, sb);
  a.process_pending_frees();
  EXPECT_EQ(a.check_invariants(), "");
  a.destroy_stream(sa);
  a.destroy_stream(sb);
}

}  // namespace
}  // namespace memlake
