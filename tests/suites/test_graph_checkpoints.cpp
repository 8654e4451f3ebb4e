// Checkpoints of graph pools (memlake/graph.hpp: pool_blocks, restore_pool),
// what PyTorch's CUDA graph trees need, on every platform: a pool put back to
// a checkpoint holds exactly its blocks, each at its address, the blocks live
// throughout keep their bytes, later blocks never overlap them, and a
// checkpoint that cannot be put back leaves the pool as it was.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "memlake/graph.hpp"
#include "suites/core_fixture.hpp"
#include "suites/device_work.hpp"

namespace memlake::test {
namespace {

struct Held {
  std::size_t size;
  std::uint32_t seed;  // the pattern its bytes hold
};

class GraphCheckpoints : public CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    if (IsSkipped()) return;
    Config c = base_config();
    c.worker = WorkerMode::inline_jobs;
    alloc_ = make(512 * MiB, c);
    s_ = alloc_->create_stream();
    s2_ = alloc_->create_stream();
    pool_ = graph_pool_handle(*alloc_);
    // As graph trees warm up: the thread's allocations go to the pool, no capture.
    begin_allocate_to_pool(*alloc_, pool_, [this](Stream s) { return s == s_; });
  }
  void TearDown() override {
    if (!alloc_) return;
    EXPECT_EQ(alloc_->backend().stream_synchronize(s_), Status::ok);
    EXPECT_INVARIANTS(*alloc_);
    for (const auto& [ptr, h] : held_) alloc_->deallocate(ptr, h.size, s_);
    end_allocate_to_pool(*alloc_, pool_);
    release_pool(*alloc_, pool_);
    alloc_->destroy_stream(s_);
    alloc_->destroy_stream(s2_);
  }

  void* hold(std::size_t size) {
    void* p = alloc_->allocate(size, s_);
    const std::uint32_t seed = next_seed_++;
    platform_->fill(p, size, seed);
    held_[p] = {size, seed};
    return p;
  }
  void drop(void* p) {
    alloc_->deallocate(p, held_.at(p).size, s_);
    held_.erase(p);
  }
  // What pool_blocks must list: the blocks held, in address order.
  std::vector<PoolBlock> expected_blocks() const {
    std::vector<PoolBlock> out;
    for (const auto& [ptr, h] : held_) out.push_back({ptr, h.size, s_});
    return out;
  }
  static std::string text(const std::vector<PoolBlock>& blocks) {
    std::string t;
    for (const PoolBlock& b : blocks)
      t += std::to_string(reinterpret_cast<std::uintptr_t>(b.ptr)) + "+" + std::to_string(b.size) +
           (b.stream ? "@s " : "@0 ");
    return t;
  }
  // Every block held holds its pattern: none overlaps another.
  void expect_bytes(const char* when) {
    for (const auto& [ptr, h] : held_)
      ASSERT_TRUE(platform_->check(ptr, h.size, h.seed))
          << when << ": block " << ptr << " of " << h.size << " bytes lost its bytes";
  }

  std::unique_ptr<Allocator> alloc_;
  Stream s_ = nullptr;
  Stream s2_ = nullptr;
  PoolId pool_;
  std::map<void*, Held> held_;
  std::uint32_t next_seed_ = 1;
};

TEST_F(GraphCheckpoints, APoolPutBackHoldsTheCheckpointsBlocksAtTheirAddresses) {
  void* a = hold(3 * MiB + 4096);  // over chunks, ending inside one
  void* b = hold(100 * 1024);      // small, beside others in a chunk
  void* c = hold(9 * MiB);
  void* d = hold(64 * 1024);
  const std::vector<PoolBlock> checkpoint = pool_blocks(*alloc_, pool_);
  ASSERT_EQ(text(checkpoint), text(expected_blocks()));
  // The next graph frees some and makes others, over the same memory.
  drop(b);
  drop(c);
  hold(5 * MiB);
  hold(200 * 1024);
  hold(6 * MiB);
  const std::vector<PoolBlock> before = pool_blocks(*alloc_, pool_);
  const std::vector<void*> freed = restore_pool(*alloc_, pool_, checkpoint);
  std::vector<void*> want_freed;
  for (const PoolBlock& x : before) want_freed.push_back(x.ptr);
  EXPECT_EQ(freed, want_freed) << "every block live before the restore is freed";
  EXPECT_EQ(text(pool_blocks(*alloc_, pool_)), text(checkpoint));
  // a and d were live throughout: their bytes are theirs. b and c are back
  // at their addresses, and whatever is allocated next lies elsewhere.
  std::map<void*, Held> now;
  now[a] = held_.at(a);
  now[d] = held_.at(d);
  held_.swap(now);
  EXPECT_TRUE(platform_->check(a, 3 * MiB + 4096, held_.at(a).seed));
  EXPECT_TRUE(platform_->check(d, 64 * 1024, held_.at(d).seed));
  for (void* p : {b, c}) {
    const std::size_t size = p == b ? 100 * 1024 : 9 * MiB;
    held_[p] = {size, next_seed_};
    platform_->fill(p, size, next_seed_++);
  }
  for (std::size_t size : {128 * 1024 * std::size_t{1}, 3 * MiB, 12 * MiB}) hold(size);
  expect_bytes("after new blocks beside the restored ones");
  const GraphPoolStats st = graph_pool_stats(*alloc_, pool_);
  EXPECT_EQ(st.live_blocks, held_.size());
  EXPECT_EQ(st.unmaps, 0u);
  EXPECT_INVARIANTS(*alloc_);
}

// Graph trees' sequence with real captures: graph A keeps an output, the
// pool is checkpointed; graph B, recorded after A, reads it and keeps its
// own; to record C after A instead (another branch of the tree), the pool is
// put back to A's checkpoint, which frees B's output, and C is captured over
// that memory. A and C then replay in turn, and A's output and C's results
// stay right on every replay.
TEST_F(GraphCheckpoints, AGraphRecordedAfterAPutBackReplaysBesideTheOneBeforeIt) {
  DeviceWork* work = platform_->work();
  if (work == nullptr) GTEST_SKIP() << "no device work (kernels) on this platform";
  Backend& b = alloc_->backend();
  const PoolId tree = graph_pool_handle(*alloc_);
  constexpr std::size_t kWords = 3 * MiB / 4 + 300;  // over chunks, ending inside one
  auto words = [&](Stream s) {
    return static_cast<std::uint32_t*>(alloc_->allocate(kWords * sizeof(std::uint32_t), s));
  };
  std::uint32_t* a_out = nullptr;
  std::uint32_t* b_out = nullptr;
  std::uint32_t* c_out = nullptr;
  auto a = std::make_unique<CapturedGraph>(*alloc_, tree, s2_, [&](Stream s) {
    a_out = words(s);
    work->fill(b, s, a_out, kWords, 7);
  });
  const std::vector<PoolBlock> after_a = pool_blocks(*alloc_, tree);
  ASSERT_EQ(after_a.size(), 1u);
  auto graph_b = std::make_unique<CapturedGraph>(*alloc_, tree, s2_, [&](Stream s) {
    std::uint32_t* tmp = words(s);
    work->mix(b, s, a_out, tmp, kWords, 8);
    b_out = words(s);
    work->mix(b, s, tmp, b_out, kWords, 9);
    alloc_->deallocate(tmp, kWords * sizeof(std::uint32_t), s);
  });
  graph_b.reset();  // that branch is gone; its output's memory is the pool's again
  const std::vector<void*> freed = restore_pool(*alloc_, tree, after_a);
  EXPECT_EQ(freed.size(), 2u);
  ASSERT_EQ(pool_blocks(*alloc_, tree).size(), 1u);
  auto c = std::make_unique<CapturedGraph>(*alloc_, tree, s2_, [&](Stream s) {
    c_out = words(s);
    work->mix(b, s, a_out, c_out, kWords, 10);
  });
  Words want_a = expected_fill(kWords, 7), want_c(kWords);
  for (std::size_t i = 0; i < kWords; ++i)
    want_c[i] = mix_word(want_a[i], 10, static_cast<std::uint32_t>(i));
  for (int r = 0; r < 50; ++r) {
    a->launch(s2_);
    c->launch(s2_);
    ASSERT_EQ(b.stream_synchronize(s2_), Status::ok);
    Words got_a(kWords), got_c(kWords);
    platform_->read(a_out, got_a.data(), kWords * sizeof(std::uint32_t));
    platform_->read(c_out, got_c.data(), kWords * sizeof(std::uint32_t));
    ASSERT_EQ(got_a, want_a) << "replay " << r << ": A's output";
    ASSERT_EQ(got_c, want_c) << "replay " << r << ": C's output";
  }
  EXPECT_EQ(graph_pool_stats(*alloc_, tree).unmaps, 0u);
  EXPECT_INVARIANTS(*alloc_);
  alloc_->deallocate(a_out, kWords * sizeof(std::uint32_t), s2_);
  alloc_->deallocate(c_out, kWords * sizeof(std::uint32_t), s2_);
  a.reset();
  c.reset();
  // Released by its last graph; freed once no pool is allocated to (the
  // fixture's is, all along).
  EXPECT_TRUE(graph_pool_stats(*alloc_, tree).released);
}

TEST_F(GraphCheckpoints, RandomCheckpointsPutThePoolBackAndEveryBlockKeepsItsBytes) {
  std::mt19937 rng(20261206);
  auto size_of = [&] {
    switch (rng() % 3) {
      case 0:
        return std::size_t{512} * (1 + rng() % 512);  // up to 256 KiB
      case 1:
        return std::size_t{4096} * (256 + rng() % 768);  // 1-4 MiB
      default:
        return std::size_t{65536} * (64 + rng() % 256);  // 4-20 MiB
    }
  };
  std::vector<std::vector<PoolBlock>> checkpoints;
  std::size_t live_bytes = 0, restores = 0;
  for (int round = 0; round < 400; ++round) {
    const unsigned op = rng() % 12;
    if (op < 6 && live_bytes < 160 * MiB) {
      const std::size_t size = size_of();
      hold(size);
      live_bytes += size;
    } else if (op < 9 && !held_.empty()) {
      auto it = std::next(held_.begin(), static_cast<long>(rng() % held_.size()));
      live_bytes -= it->second.size;
      drop(it->first);
    } else if (op == 9) {
      checkpoints.push_back(pool_blocks(*alloc_, pool_));
      ASSERT_EQ(text(checkpoints.back()), text(expected_blocks())) << "round " << round;
    } else if (op >= 10 && !checkpoints.empty()) {
      const std::vector<PoolBlock>& cp = checkpoints[rng() % checkpoints.size()];
      const std::size_t had = held_.size();
      ASSERT_EQ(restore_pool(*alloc_, pool_, cp).size(), had) << "round " << round;
      ++restores;
      ASSERT_EQ(text(pool_blocks(*alloc_, pool_)), text(cp)) << "round " << round;
      // A block at the same address and size before and after holds what
      // it held; the others get new bytes.
      std::map<void*, Held> now;
      live_bytes = 0;
      for (const PoolBlock& b : cp) {
        auto same = held_.find(b.ptr);
        if (same != held_.end() && same->second.size == b.size) {
          now[b.ptr] = same->second;
        } else {
          now[b.ptr] = {b.size, next_seed_};
          platform_->fill(b.ptr, b.size, next_seed_++);
        }
        live_bytes += b.size;
      }
      held_.swap(now);
      ASSERT_EQ(alloc_->check_invariants(), "") << "round " << round;
    }
    if (round % 25 == 24) expect_bytes(("round " + std::to_string(round)).c_str());
  }
  expect_bytes("the end");
  EXPECT_GE(restores, 10u) << "the walk put the pool back too rarely to mean much";
  EXPECT_EQ(graph_pool_stats(*alloc_, pool_).unmaps, 0u);
}

TEST_F(GraphCheckpoints, ACheckpointThatCannotGoBackLeavesThePoolAsItWas) {
  void* a = hold(3 * MiB);
  hold(100 * 1024);
  const std::vector<PoolBlock> live = pool_blocks(*alloc_, pool_);
  void* eager = alloc_->allocate(MiB, s2_);  // not routed to the pool
  expect_misuse(
      [&] {
        restore_pool(*alloc_, pool_, {live[0], {eager, MiB, s_}});
      },
      "cannot go back");
  expect_misuse(
      [&] {
        restore_pool(*alloc_, pool_, {{a, 3 * MiB, s_}, {a, 3 * MiB, s_}});
      },
      "cannot go back");
  expect_misuse([&] { restore_pool(*alloc_, pool_, {{a, 3 * MiB, s2_}}); }, "cannot go back");
  expect_misuse(
      [&] {
        restore_pool(*alloc_, pool_, {{a, std::size_t{1} << 32, s_}});
      },
      "cannot go back");
  EXPECT_EQ(text(pool_blocks(*alloc_, pool_)), text(live));
  expect_bytes("after the refused restores");
  EXPECT_INVARIANTS(*alloc_);
  alloc_->deallocate(eager, MiB, s2_);
  // A list that fits goes back.
  EXPECT_EQ(restore_pool(*alloc_, pool_, {live[0]}).size(), 2u);
  held_.erase(live[1].ptr);
  expect_bytes("after the restore");
}

TEST_F(GraphCheckpoints, ABlockUsedOnAnotherStreamOrAnExclusivePoolIsRefused) {
  void* a = hold(MiB);
  const std::vector<PoolBlock> live = pool_blocks(*alloc_, pool_);
  alloc_->record_stream(a, s2_);
  expect_misuse([&] { restore_pool(*alloc_, pool_, live); }, "record_stream");
  EXPECT_EQ(text(pool_blocks(*alloc_, pool_)), text(live));
  const ExclusiveGroupId group = new_exclusive_group(*alloc_);
  const PoolId exclusive = exclusive_pool_handle(*alloc_, group);
  begin_allocate_to_pool(*alloc_, exclusive, [this](Stream s) { return s == s2_; });
  void* e = alloc_->allocate(MiB, s2_);
  expect_misuse([&] { restore_pool(*alloc_, exclusive, {}); }, "exclusive group");
  alloc_->deallocate(e, MiB, s2_);
  end_allocate_to_pool(*alloc_, exclusive);
  release_pool(*alloc_, exclusive);
  expect_misuse([&] { pool_blocks(*alloc_, PoolId{7, 7}); }, "is not known");
}

}  // namespace
}  // namespace memlake::test
