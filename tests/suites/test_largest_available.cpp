// Allocator::largest_available(): the largest block the allocator can hand
// out now without reclaiming cached ranges (what PyTorch's cacheInfo
// answers, and cuDNN sizes its workspace by). Each answer is checked by
// allocating it: a block of that size is served, and without a reclaim.
#include "suites/core_fixture.hpp"
#include "suites/stats_delta.hpp"

namespace memlake::test {
namespace {

class LargestAvailable : public CoreTest {};

TEST_F(LargestAvailable, AFreshAllocatorOffersItsWholeCapacity) {
  auto a = make_granule_chunks(64 * MiB);
  EXPECT_EQ(a->largest_available(), 64 * MiB);
  void* p = a->allocate(64 * MiB);
  platform_->fill(p, 64 * MiB, 3);
  EXPECT_TRUE(platform_->check(p, 64 * MiB, 3));
  EXPECT_EQ(a->largest_available(), 0u);
  a->deallocate(p, 64 * MiB);
  EXPECT_EQ(a->largest_available(), 64 * MiB) << "a freed block is available again at once";
  EXPECT_INVARIANTS(*a);
}

// Every other chunk freed: no free block is larger than a chunk, but the free
// chunks and the capacity left make one stitched block.
TEST_F(LargestAvailable, FreeChunksBetweenLiveBlocksCountWithTheCapacityLeft) {
  auto a = make_granule_chunks(64 * MiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 24; ++i) blocks.push_back(a->allocate(2 * MiB));
  for (int i = 0; i < 24; i += 2) {
    a->deallocate(blocks[i], 2 * MiB);
    blocks[i] = nullptr;
  }
  settle_all(*a);
  // 12 free chunks (24 MiB) and 16 MiB never reserved.
  const std::size_t available = a->largest_available();
  EXPECT_EQ(available, 40 * MiB);

  StatsDelta d(*a);
  void* big = a->allocate(available);
  EXPECT_EQ(d(&Stats::rung_reclaim_retry), 0) << d.changed();
  platform_->fill(big, available, 7);
  for (int i = 1; i < 24; i += 2) platform_->fill(blocks[i], 2 * MiB, 100 + i);
  EXPECT_TRUE(platform_->check(big, available, 7));
  for (int i = 1; i < 24; i += 2)
    EXPECT_TRUE(platform_->check(blocks[i], 2 * MiB, 100 + i)) << "block " << i;
  EXPECT_EQ(a->largest_available(), 0u);

  a->deallocate(big, available);
  for (void* p : blocks)
    if (p != nullptr) a->deallocate(p, 2 * MiB);
  EXPECT_INVARIANTS(*a);
}

// A chunk partly in use is not joined with others (stitching maps whole
// chunks): its free part counts only as a block of its own.
TEST_F(LargestAvailable, APartlyUsedChunkOffersItsFreePartOnly) {
  auto a = make_granule_chunks(8 * MiB);
  void* small = a->allocate(MiB + MiB / 2);  // over the small-block limit: a chunk of its own
  const std::size_t available = a->largest_available();
  EXPECT_EQ(available, 6 * MiB);
  void* big = a->allocate(available);
  platform_->fill(big, available, 11);
  platform_->fill(small, MiB + MiB / 2, 12);
  EXPECT_TRUE(platform_->check(big, available, 11));
  EXPECT_TRUE(platform_->check(small, MiB + MiB / 2, 12));
  EXPECT_EQ(a->largest_available(), MiB / 2) << "the rest of the small block's chunk";
  a->deallocate(big, available);
  a->deallocate(small, MiB + MiB / 2);
  EXPECT_INVARIANTS(*a);
}

}  // namespace
}  // namespace memlake::test
