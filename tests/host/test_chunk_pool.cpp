// ChunkPool's runs: a client that takes or gives back a large block's chunks
// together leaves the pool as one chunk at a time would, and every other
// client that listens hears of each chunk.
#include <gtest/gtest.h>

#include <vector>

#include "backend/host/host_backend.hpp"
#include "common/observer_list.hpp"
#include "lake/chunk_pool.hpp"

namespace memlake::lake {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Listener : ChunkPool::Client {
  void chunk_added(ChunkId) override {}
  void chunk_removed(ChunkId) override {}
  void chunk_changed(ChunkId id) override { heard.push_back(id); }
  std::vector<ChunkId> heard;
};

class ChunkPoolRuns : public ::testing::Test {
 protected:
  HostBackend backend_;
  Stats stats_;
  ObserverList observers_;
  Refusal refusal_;
  ChunkPool pool_{backend_, 64 * kMiB, stats_, observers_, refusal_};
};

TEST_F(ChunkPoolRuns, ARunTakenAndGivenBackIsHeardChunkByChunkByTheOthers) {
  Listener taker, other;
  const ClientId taker_id = pool_.attach(&taker);
  pool_.attach(&other);
  std::vector<ChunkId> run;
  for (int i = 0; i < 3; ++i) run.push_back(pool_.create(4 * kMiB));
  const ChunkId apart = pool_.create(2 * kMiB);
  ASSERT_NE(apart, kNone);
  ASSERT_EQ(pool_.free_bytes(), 14 * kMiB);

  pool_.take_all(run, taker_id);
  EXPECT_EQ(pool_.free_bytes(), 2 * kMiB);
  for (ChunkId c : run) EXPECT_FALSE(pool_.is_free(c));
  EXPECT_TRUE(pool_.is_free(apart));
  EXPECT_EQ(pool_.free_set().size(), 1u);
  EXPECT_EQ(other.heard, run);
  EXPECT_TRUE(taker.heard.empty()) << "the taker keeps its own books";
  EXPECT_EQ(pool_.check_invariants(), "");

  other.heard.clear();
  pool_.give_back_all(run);
  EXPECT_EQ(pool_.free_bytes(), 14 * kMiB);
  for (ChunkId c : run) EXPECT_TRUE(pool_.is_free(c));
  EXPECT_EQ(pool_.free_set().size(), 4u);
  EXPECT_EQ(other.heard, run);
  EXPECT_TRUE(taker.heard.empty());
  EXPECT_EQ(pool_.check_invariants(), "");
}

TEST_F(ChunkPoolRuns, ARunOfAClientThatAloneListensCallsNobody) {
  Listener only, quiet;
  const ClientId only_id = pool_.attach(&only);
  const ClientId quiet_id = pool_.attach(&quiet, /*hears_changes=*/false);
  std::vector<ChunkId> run{pool_.create(4 * kMiB), pool_.create(4 * kMiB)};
  pool_.take_all(run, only_id);
  pool_.give_back_all(run);
  EXPECT_TRUE(only.heard.empty());
  EXPECT_TRUE(quiet.heard.empty());
  // A client that does not listen takes a run: the one that listens hears.
  pool_.take_all(run, quiet_id);
  EXPECT_EQ(only.heard, run);
  EXPECT_TRUE(quiet.heard.empty());
  pool_.give_back_all(run);
  EXPECT_EQ(only.heard.size(), 4u);
  EXPECT_EQ(pool_.free_bytes(), 8 * kMiB);
  EXPECT_EQ(pool_.check_invariants(), "");
}

}  // namespace
}  // namespace memlake::lake
