// Core behaviour of the lake through the public allocator, on every platform:
// stitching keeps data, each strategy path is reached, OOM is clean and
// recoverable, misuse is reported, a random workload matches a reference
// model, and threads can share one allocator.
#include <algorithm>
#include <climits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "allocator/allocator_impl.hpp"
#include "suites/core_fixture.hpp"
#include "suites/stats_delta.hpp"

namespace memlake::test {
namespace {

// Four one-chunk blocks in four segments, all freed and back in the lake:
// no segment's free space is even half of 8 MiB, so a request of 8 MiB
// cannot grow a segment; it stitches the four chunks.
void scatter_four_chunks(Allocator& a) {
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(a.allocate(2 * MiB));
  for (void* q : ps) a.deallocate(q, 2 * MiB);
  a.process_pending_frees();
}

// Chunk X: [free head 1.5M][small 256K][free tail 256K] once the caller has
// settled the free of the head's block. For the borrowed-ends tests.
constexpr std::size_t KiB = 1024;
void small_behind_a_free_head(Allocator& a, void** small) {
  void* first = a.allocate(1536 * KiB);
  *small = a.allocate(256 * KiB);
  ASSERT_EQ(static_cast<char*>(*small), static_cast<char*>(first) + 1536 * KiB);
  a.deallocate(first, 1536 * KiB);
}

TEST_F(CoreTest, StitchedBlockSharesBytesWithItsChunksOtherMappings) {
  Config c = base_config();
  c.max_chunk = 2 * MiB;  // every chunk one granule, so a stitch is certain
  auto a = make(64 * MiB, c);
  scatter_four_chunks(*a);
  StatsDelta d(*a);
  void* big = a->allocate(8 * MiB);
  EXPECT_EQ(d(&Stats::rung_stitch), 1) << d.changed();
  EXPECT_EQ(d(&Stats::reserved_bytes), 0) << "stitch must not create memory";

  auto aliases = a->impl().aliases(big);
  ASSERT_EQ(aliases.size(), 4u);  // four 2 MiB chunks, each also mapped in its own segment
  auto slice = [&](std::size_t i) { return static_cast<char*>(big) + i * 2 * MiB; };
  auto alias = [&](std::size_t i) { return reinterpret_cast<void*>(aliases[i].first); };
  for (std::size_t i = 0; i < 4; ++i) ASSERT_EQ(aliases[i].second, 2 * MiB);
  // Written through the stitched range, read through the chunks' pBlocks...
  for (std::size_t i = 0; i < 4; ++i)
    platform_->fill(slice(i), 2 * MiB, 10 + static_cast<std::uint32_t>(i));
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(platform_->check(alias(i), 2 * MiB, 10 + static_cast<std::uint32_t>(i)))
        << "chunk " << i;
  // ...and the other way round.
  for (std::size_t i = 0; i < 4; ++i)
    platform_->fill(alias(i), 2 * MiB, 20 + static_cast<std::uint32_t>(i));
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(platform_->check(slice(i), 2 * MiB, 20 + static_cast<std::uint32_t>(i)))
        << "chunk " << i;
  EXPECT_FALSE(platform_->check(slice(0), 2 * MiB, 10)) << "the check must see a changed pattern";
  a->deallocate(big, 8 * MiB);
  EXPECT_INVARIANTS(*a);
}

TEST_F(CoreTest, RungsOfNewMemoryIdleSegmentFragmentGrowAndStitch) {
  Config c = base_config();
  c.max_chunk = 2 * MiB;
  auto a = make(64 * MiB, c);
  void* p = nullptr;
  StatsDelta d(*a);
  p = a->allocate(6 * MiB);
  EXPECT_EQ(d(&Stats::rung_new_memory), 1) << d.changed();
  a->deallocate(p, 6 * MiB);
  // The 6 MiB segment is idle: a whole cached range of the right size.
  d.restart();
  p = a->allocate(6 * MiB - 4096);
  EXPECT_EQ(d(&Stats::rung_idle_segment), 1) << d.changed();
  // Its tail (4 KiB of the last chunk) serves a small request.
  void* small = nullptr;
  d.restart();
  small = a->allocate(1024);
  EXPECT_EQ(d(&Stats::rung_fragment), 1) << d.changed();
  EXPECT_EQ(reinterpret_cast<char*>(small), reinterpret_cast<char*>(p) + 6 * MiB - 4096);
  a->deallocate(small, 1024);
  a->deallocate(p, 6 * MiB - 4096);
  // 8 MiB where the idle 6 MiB segment is: it grows by one new chunk at its
  // end (three VMM calls: create, map, access), nothing else is mapped.
  d.restart();
  p = a->allocate(8 * MiB);
  EXPECT_EQ(d(&Stats::rung_grow), 1) << d.changed();
  EXPECT_EQ(d(&Stats::vmm_calls), 3);
  EXPECT_EQ(d(&Stats::reserved_bytes), static_cast<std::int64_t>(2 * MiB));
  platform_->fill(p, 8 * MiB, 5);
  EXPECT_TRUE(platform_->check(p, 8 * MiB, 5));
  a->deallocate(p, 8 * MiB);
  EXPECT_INVARIANTS(*a);
  // Scattered free chunks, none near the request's size: a stitch.
  auto b = make(64 * MiB, c);
  scatter_four_chunks(*b);
  StatsDelta db(*b);
  p = b->allocate(8 * MiB);
  EXPECT_EQ(db(&Stats::rung_stitch), 1) << db.changed();
  b->deallocate(p, 8 * MiB);
  EXPECT_INVARIANTS(*b);
}

// A buffer that grows a little at each step, replaced by its longer copy
// (a decoder's keys and values): once it has grown twice, each version takes
// a range of its own, so the next finds an idle range or room at its end
// and maps at most the granule it grows into, where laid after its
// predecessor's tail every version would map its whole size again. Every
// version keeps its bytes.
TEST_F(CoreTest, ABufferThatKeepsGrowingMapsOnlyWhatItGrowsBy) {
  Config c = base_config();
  c.max_chunk = 2 * MiB;
  auto a = make(256 * MiB, c);
  std::size_t size = 10 * MiB + 12345;
  void* old = a->allocate(size);
  platform_->fill(old, size, 1);
  std::int64_t calls_after_warmup = 0;
  for (int step = 0; step < 40; ++step) {
    const std::size_t longer = size + 64 * KiB;
    const std::int64_t before = a->stats().critical_path_vmm_calls.current;
    void* next = a->allocate(longer);
    if (step >= 4) calls_after_warmup += a->stats().critical_path_vmm_calls.current - before;
    ASSERT_TRUE(platform_->check(old, size, static_cast<unsigned char>(step + 1))) << step;
    platform_->fill(next, longer, static_cast<unsigned char>(step + 2));
    a->deallocate(old, size);
    a->process_pending_frees();
    old = next;
    size = longer;
  }
  // 36 steps grow the buffer by 2.25 MiB: at most three granules crossed,
  // three calls each (create, map, access). Laid after its predecessor's
  // tail, the buffer made 20.
  EXPECT_LE(calls_after_warmup, 9) << "critical-path VMM calls over 36 steps";
  EXPECT_TRUE(platform_->check(old, size, 41));
  a->deallocate(old, size);
  EXPECT_INVARIANTS(*a);
}

// A range whose free chunks lie at its start and at its end, and a request
// larger than all free memory: growing the range at its end could not map
// the chunks at its start again and would make new memory for them too; a
// new range over every free chunk makes only what they lack.
TEST_F(CoreTest, NewMemoryIsOnlyWhatEveryFreeChunkLacks) {
  auto a = make_granule_chunks(64 * MiB);
  void* whole = a->allocate(14 * MiB);
  a->deallocate(whole, 14 * MiB);
  settle_all(*a);
  void* head = a->allocate(2 * MiB);
  void* middle = a->allocate(2 * MiB);
  void* end = a->allocate(10 * MiB);
  ASSERT_EQ(static_cast<char*>(middle), static_cast<char*>(head) + 2 * MiB);
  ASSERT_EQ(static_cast<char*>(end), static_cast<char*>(middle) + 2 * MiB);
  ASSERT_EQ(a->stats().reserved_bytes.current, static_cast<std::int64_t>(14 * MiB));
  platform_->fill(middle, 2 * MiB, 7);
  a->deallocate(head, 2 * MiB);
  a->deallocate(end, 10 * MiB);
  settle_all(*a);

  // 12 MiB free (2 at the range's start, 10 at its end) for 16 MiB: 4 new.
  StatsDelta d(*a);
  void* big = a->allocate(16 * MiB);
  EXPECT_EQ(d(&Stats::reserved_bytes), static_cast<std::int64_t>(4 * MiB)) << d.changed();
  EXPECT_EQ(d(&Stats::rung_grow), 0) << d.changed();
  platform_->fill(big, 16 * MiB, 8);
  EXPECT_TRUE(platform_->check(middle, 2 * MiB, 7));
  EXPECT_TRUE(platform_->check(big, 16 * MiB, 8));
  a->deallocate(big, 16 * MiB);
  a->deallocate(middle, 2 * MiB);
  EXPECT_INVARIANTS(*a);
}

// A request of at least large_chunk_from bytes gets its body in large_chunk
// chunks (half the handles to map), a smaller one in max_chunk chunks; the
// last granule is a chunk of its own either way, and the bytes are intact.
TEST_F(CoreTest, LargeRequestsAreMadeOfLargerChunks) {
  Config c = base_config();
  c.max_chunk = 2 * MiB;
  c.large_chunk = 4 * MiB;
  c.large_chunk_from = 64 * MiB;
  auto a = make(512 * MiB, c);
  StatsDelta d(*a);
  void* big = a->allocate(70 * MiB);  // 68 MiB body in 4 MiB chunks + one granule
  EXPECT_EQ(d(&Stats::chunks), 17 + 1);
  d.restart();
  void* medium = a->allocate(62 * MiB);  // below the threshold: 2 MiB chunks
  EXPECT_EQ(d(&Stats::chunks), 31);
  platform_->fill(big, 70 * MiB, 41);
  platform_->fill(medium, 62 * MiB, 42);
  EXPECT_TRUE(platform_->check(big, 70 * MiB, 41));
  EXPECT_TRUE(platform_->check(medium, 62 * MiB, 42));
  a->deallocate(big, 70 * MiB);
  a->deallocate(medium, 62 * MiB);
  EXPECT_INVARIANTS(*a);
}

// A large block freed while a small block still sits in the tail of its last
// chunk: the next request of its size goes back to the same place (the free
// chunks plus the free head of that chunk), mapping and creating nothing,
// and the small block's bytes are untouched.
TEST_F(CoreTest, ABlockFreedAroundASmallBlockInItsTailReturnsToItsPlace) {
  auto a = make_granule_chunks(64 * MiB);
  const std::size_t size = 7 * MiB - 4096;
  void* big = a->allocate(size);
  void* small = a->allocate(4096);
  ASSERT_EQ(static_cast<char*>(small), static_cast<char*>(big) + size) << "small shares the tail";
  platform_->fill(small, 4096, 77);
  a->deallocate(big, size);
  settle(*a);
  const Stats before = a->stats();
  void* again = a->allocate(size);
  const Stats after = a->stats();
  EXPECT_EQ(again, big);
  EXPECT_EQ(after.vmm_calls.current, before.vmm_calls.current);
  EXPECT_EQ(after.reserved_bytes.current, before.reserved_bytes.current);
  platform_->fill(again, size, 78);
  EXPECT_TRUE(platform_->check(again, size, 78));
  EXPECT_TRUE(platform_->check(small, 4096, 77));
  a->deallocate(again, size);
  a->deallocate(small, 4096);
  EXPECT_INVARIANTS(*a);
}

// A large block's whole chunks go back to the pool together when it is
// freed, while its last chunk stays with the small block in its tail: the
// whole ones are a free run of the range again and serve a block of
// another size there, with no new memory and no mapping, and every chunk is
// released once nothing lives in it.
TEST_F(CoreTest, ABlocksWholeChunksGoBackTogetherWhileItsTailStaysInUse) {
  auto a = make_granule_chunks(64 * MiB);
  const std::size_t size = 21 * MiB;  // ten whole chunks and half of an eleventh
  void* big = a->allocate(size);
  void* small = a->allocate(4096);
  ASSERT_EQ(static_cast<char*>(small), static_cast<char*>(big) + size) << "small shares the tail";
  platform_->fill(small, 4096, 91);
  // A request of a size not seen before reads the ranges: they catch up
  // with the chunks `big` took.
  void* beside = a->allocate(4 * MiB);
  a->deallocate(big, size);
  settle(*a);
  EXPECT_INVARIANTS(*a);

  StatsDelta d(*a);
  const std::size_t other = 19 * MiB;
  char* body = static_cast<char*>(a->allocate(other));
  EXPECT_EQ(d(&Stats::rung_free_run), 1) << d.changed();
  EXPECT_GE(body, static_cast<char*>(big)) << "in the ten whole chunks, free again";
  EXPECT_LE(body + other, static_cast<char*>(big) + 20 * MiB);
  EXPECT_EQ(d(&Stats::reserved_bytes), 0) << d.changed();
  EXPECT_EQ(d(&Stats::vmm_calls), 0) << d.changed();
  platform_->fill(body, other, 92);
  EXPECT_TRUE(platform_->check(body, other, 92));
  EXPECT_TRUE(platform_->check(small, 4096, 91));
  EXPECT_INVARIANTS(*a);

  a->deallocate(body, other);
  a->deallocate(small, 4096);
  a->deallocate(beside, 4 * MiB);
  settle_all(*a);
  a->empty_cache();
  EXPECT_EQ(a->stats().reserved_bytes.current, 0);
  EXPECT_INVARIANTS(*a);
}

// A small block goes beside other small blocks, not into the free tail of a
// large block's chunk, even where that tail is the tighter fit: there it
// would keep the chunk once the large block is freed, so the large block's
// chunks could not all be stitched again.
TEST_F(CoreTest, ASmallBlockGoesBesideSmallBlocksNotIntoALargeBlocksTail) {
  auto a = make_granule_chunks(64 * MiB);
  const std::size_t large = 4 * MiB - 64 * KiB;  // two chunks, a free tail of 64K
  void* big = a->allocate(large);
  void* first_small = a->allocate(128 * KiB);  // too large for the tail: a chunk of its own
  ASSERT_NE(static_cast<char*>(first_small), static_cast<char*>(big) + large);
  StatsDelta d(*a);
  void* second_small = a->allocate(32 * KiB);
  EXPECT_EQ(d(&Stats::rung_fragment), 1) << d.changed();
  EXPECT_NE(static_cast<char*>(second_small), static_cast<char*>(big) + large)
      << "not in the large block's tail";
  EXPECT_TRUE(static_cast<char*>(second_small) + 32 * KiB == static_cast<char*>(first_small) ||
              static_cast<char*>(second_small) == static_cast<char*>(first_small) + 128 * KiB)
      << "beside the first small block";
  platform_->fill(first_small, 128 * KiB, 1);
  platform_->fill(second_small, 32 * KiB, 2);
  EXPECT_INVARIANTS(*a);

  // The large block's two chunks come back whole: a block of their size
  // is made of them, with no new memory.
  a->deallocate(big, large);
  settle_all(*a);
  EXPECT_EQ(a->stats().reserved_bytes.current, static_cast<std::int64_t>(6 * MiB));
  void* again = a->allocate(4 * MiB);
  EXPECT_EQ(a->stats().reserved_bytes.current, static_cast<std::int64_t>(6 * MiB));
  platform_->fill(again, 4 * MiB, 3);
  EXPECT_TRUE(platform_->check(first_small, 128 * KiB, 1));
  EXPECT_TRUE(platform_->check(second_small, 32 * KiB, 2));
  EXPECT_TRUE(platform_->check(again, 4 * MiB, 3));
  EXPECT_INVARIANTS(*a);
  for (auto [p, n] :
       {std::pair{first_small, 128 * KiB}, {second_small, 32 * KiB}, {again, 4 * MiB}})
    a->deallocate(p, n);
  settle_all(*a);
  EXPECT_INVARIANTS(*a);
}

// Where new memory would be made for a block of a granule or two, the free
// tail of one chunk and the free head of another, both holding other blocks,
// take it instead: a new range maps the two, the block runs across them, no
// memory is made, and every block's bytes are intact. The range stays
// mapped through empty_cache while the block lives, though it owns no chunk.
TEST_F(CoreTest, ABlockAcrossTheFreeEndsOfTwoBusyChunksMakesNoNewMemory) {
  auto a = make_granule_chunks(64 * MiB);
  void* small = nullptr;
  ASSERT_NO_FATAL_FAILURE(small_behind_a_free_head(*a, &small));
  settle_all(*a);
  // It continues X's tail into a new chunk Y, leaving Y's tail free.
  void* second = a->allocate(1536 * KiB + 4 * KiB);
  ASSERT_EQ(static_cast<char*>(second), static_cast<char*>(small) + 256 * KiB);
  platform_->fill(small, 256 * KiB, 1);
  platform_->fill(second, 1540 * KiB, 2);
  EXPECT_INVARIANTS(*a);

  // 2 MiB: Y's free tail (764K) and X's free head (1.5M) hold it.
  StatsDelta d(*a);
  void* across = a->allocate(2 * MiB);
  EXPECT_EQ(d(&Stats::reserved_bytes), 0) << "no new memory";
  EXPECT_EQ(d(&Stats::chunks_created), 0);
  EXPECT_EQ(d(&Stats::rung_borrowed_ends), 1) << d.changed();
  EXPECT_EQ(d(&Stats::segments), 1);
  EXPECT_INVARIANTS(*a);
  platform_->fill(across, 2 * MiB, 3);
  EXPECT_TRUE(platform_->check(small, 256 * KiB, 1));
  EXPECT_TRUE(platform_->check(second, 1540 * KiB, 2));
  EXPECT_TRUE(platform_->check(across, 2 * MiB, 3));

  // The blocks around it go; empty_cache unmaps what no block needs.
  a->deallocate(small, 256 * KiB);
  a->deallocate(second, 1540 * KiB);
  settle_all(*a);
  a->empty_cache();
  EXPECT_INVARIANTS(*a);
  EXPECT_TRUE(platform_->check(across, 2 * MiB, 3));
  a->deallocate(across, 2 * MiB);
  settle_all(*a);
  a->empty_cache();
  EXPECT_EQ(a->stats().reserved_bytes.current, 0);
  EXPECT_EQ(a->stats().segments.current, 0);
  EXPECT_INVARIANTS(*a);
}

// A small block placed in the free head of a chunk takes the head's end:
// what is left still starts the chunk, so a later block can borrow it
// across into another chunk, where a gap between live pieces would serve
// only smaller blocks.
TEST_F(CoreTest, ASmallBlockInAFreeHeadLeavesAHead) {
  auto a = make_granule_chunks(64 * MiB);
  void* small = nullptr;
  ASSERT_NO_FATAL_FAILURE(small_behind_a_free_head(*a, &small));
  platform_->fill(small, 256 * KiB, 5);
  settle_all(*a);
  void* inside = a->allocate(512 * KiB);  // the head (1.5M) is the only fit
  EXPECT_EQ(static_cast<char*>(inside), static_cast<char*>(small) - 512 * KiB);
  platform_->fill(inside, 512 * KiB, 6);
  // The 1 MiB left at the chunk's start is a head: with the tail of a
  // second chunk it holds a 2 MiB block without new memory.
  void* second = a->allocate(1536 * KiB + 4 * KiB);  // continues the tail into a new chunk
  platform_->fill(second, 1540 * KiB, 7);
  const Stats before = a->stats();
  void* across = a->allocate(1536 * KiB);
  EXPECT_EQ(a->stats().reserved_bytes.current, before.reserved_bytes.current);
  platform_->fill(across, 1536 * KiB, 8);
  EXPECT_TRUE(platform_->check(small, 256 * KiB, 5));
  EXPECT_TRUE(platform_->check(inside, 512 * KiB, 6));
  EXPECT_TRUE(platform_->check(second, 1540 * KiB, 7));
  EXPECT_TRUE(platform_->check(across, 1536 * KiB, 8));
  EXPECT_INVARIANTS(*a);
  for (auto [p, n] : {std::pair{small, 256 * KiB},
                      {inside, 512 * KiB},
                      {second, 1540 * KiB},
                      {across, 1536 * KiB}})
    a->deallocate(p, n);
  settle_all(*a);
  EXPECT_INVARIANTS(*a);
}

// While free heads hold fewer bytes than free tails, a block placed on free
// chunks leaves its slack before it, as a head: a later block that starts in
// a tail can end there instead of in a new granule. Placed at the start of
// its chunks, the block would leave one more tail and the later block would
// make memory.
TEST_F(CoreTest, ABlockLeavesItsSlackAsAHeadWhereHeadsAreScarce) {
  auto a = make_granule_chunks(64 * MiB);
  // Chunks C1 C2 C3 of one segment; C3: [P 256K][R 256K][free tail 1.5M].
  const std::size_t p_size = 4 * MiB + 256 * KiB;
  void* p = a->allocate(p_size);
  void* r = a->allocate(256 * KiB);
  ASSERT_EQ(static_cast<char*>(r), static_cast<char*>(p) + p_size) << "R shares P's last chunk";
  platform_->fill(r, 256 * KiB, 1);
  a->deallocate(p, p_size);
  settle_all(*a);
  // C1 and C2 are a free run; free heads 256K (C3's), free tails 1.5M.
  const Stats before_q = a->stats();
  void* q = a->allocate(3 * MiB);
  EXPECT_EQ(static_cast<char*>(q), static_cast<char*>(p) + 1 * MiB)
      << "the 1 MiB of slack stays free before the block, at the start of C1";
  EXPECT_EQ(a->stats().reserved_bytes.current, before_q.reserved_bytes.current);
  platform_->fill(q, 3 * MiB, 2);
  EXPECT_INVARIANTS(*a);

  // C3's free tail (1.5M) and C1's free head (1M) hold 2.5 MiB.
  StatsDelta d(*a);
  void* across = a->allocate(2560 * KiB);
  EXPECT_EQ(d(&Stats::reserved_bytes), 0) << "no new memory";
  EXPECT_EQ(d(&Stats::rung_borrowed_ends), 1) << d.changed();
  platform_->fill(across, 2560 * KiB, 3);
  EXPECT_TRUE(platform_->check(r, 256 * KiB, 1));
  EXPECT_TRUE(platform_->check(q, 3 * MiB, 2));
  EXPECT_TRUE(platform_->check(across, 2560 * KiB, 3));
  EXPECT_INVARIANTS(*a);
  for (auto [ptr, n] : {std::pair{r, 256 * KiB}, {q, 3 * MiB}, {across, 2560 * KiB}})
    a->deallocate(ptr, n);
  settle_all(*a);
  a->empty_cache();
  EXPECT_EQ(a->stats().reserved_bytes.current, 0);
  EXPECT_INVARIANTS(*a);
}

TEST_F(CoreTest, ReclaimAndRetryThenOomThenRecovery) {
  Config c = base_config();
  c.max_chunk = 2 * MiB;
  c.max_stitch_chunks = 1;  // a stitch may reuse one chunk only
  auto a = make(8 * MiB, c);
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(a->allocate(2 * MiB));
  EXPECT_EQ(a->stats().reserved_bytes.current, static_cast<std::int64_t>(8 * MiB));
  for (void* p : ps) a->deallocate(p, 2 * MiB);
  settle(*a);
  // 8 MiB cannot be stitched from one chunk and the capacity is full: the
  // cache is reclaimed and the retry creates one 8 MiB range.
  StatsDelta d(*a);
  void* big = a->allocate(8 * MiB);
  EXPECT_EQ(d(&Stats::rung_reclaim_retry), 1) << d.changed();
  EXPECT_EQ(d(&Stats::chunks_released), 4);
  platform_->fill(big, 8 * MiB, 3);

  // Now truly full: a clean out_of_memory naming the numbers.
  try {
    a->allocate(2 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), 2 * MiB);
    std::string m = e.what();
    EXPECT_NE(m.find("requested 2097152 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("capacity 8388608 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free block"), std::string::npos) << m;
  }
  EXPECT_EQ(a->stats().ooms.current, 1);
  EXPECT_TRUE(platform_->check(big, 8 * MiB, 3)) << "OOM must not touch live blocks";
  EXPECT_INVARIANTS(*a);
  a->deallocate(big, 8 * MiB);
  void* again = a->allocate(2 * MiB);
  platform_->fill(again, 2 * MiB, 4);
  EXPECT_TRUE(platform_->check(again, 2 * MiB, 4));
  a->deallocate(again, 2 * MiB);
  EXPECT_INVARIANTS(*a);
}

TEST_F(CoreTest, SmallRequestsArePackedNotGivenAGranuleEach) {
  auto a = make(64 * MiB);
  std::vector<void*> ps;
  for (int i = 0; i < 1000; ++i) ps.push_back(a->allocate(1000));
  // 1000 x 1024 B (rounded) fit in one 2 MiB chunk.
  EXPECT_EQ(a->stats().reserved_bytes.current, static_cast<std::int64_t>(2 * MiB));
  std::vector<void*> sorted = ps;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 1; i < sorted.size(); ++i)
    EXPECT_GE(static_cast<char*>(sorted[i]) - static_cast<char*>(sorted[i - 1]), 1024);
  for (void* p : ps) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
  for (void* p : ps) a->deallocate(p, 1000);
  EXPECT_INVARIANTS(*a);
}

TEST_F(CoreTest, BadFreesAreReportedAndChangeNothing) {
  auto a = make(64 * MiB);
  void* p = a->allocate(3 * MiB);
  void* q = a->allocate(4096);
  auto message_of = [&](auto&& op) -> std::string {
    try {
      op();
    } catch (const misuse& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(
      message_of([&] { a->deallocate(static_cast<char*>(p) + 512, 0); }).find("interior pointer"),
      std::string::npos);
  int on_stack = 0;
  EXPECT_NE(message_of([&] { a->deallocate(&on_stack, 0); }).find("unknown pointer"),
            std::string::npos);
  EXPECT_NE(message_of([&] { a->deallocate(p, 5); }).find("size mismatch"), std::string::npos);
  a->deallocate(p, 3 * MiB);
  EXPECT_NE(message_of([&] { a->deallocate(p, 3 * MiB); }).find("double free"), std::string::npos);
  settle(*a);
  EXPECT_NE(message_of([&] { a->deallocate(p, 3 * MiB); }).find("double free"), std::string::npos);
  EXPECT_EQ(a->stats().misuse_errors.current, 5);
  EXPECT_EQ(a->stats().live_bytes.current, 4096);
  a->deallocate(q, 4096);
  EXPECT_INVARIANTS(*a);
}

TEST_F(CoreTest, ZeroAndImpossibleSizes) {
  auto a = make(64 * MiB);
  void* z1 = a->allocate(0);
  void* z2 = a->allocate(0);
  EXPECT_NE(z1, nullptr);
  EXPECT_NE(z1, z2);
  a->deallocate(z1, 0);
  a->deallocate(z2, 0);
  for (std::size_t huge : {std::size_t{65} * MiB, SIZE_MAX, SIZE_MAX - 100, SIZE_MAX / 2}) {
    try {
      a->allocate(huge);
      FAIL() << "expected out_of_memory for " << huge;
    } catch (const out_of_memory& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(huge) + " bytes"), std::string::npos)
          << e.what();
    }
  }
  void* p = a->allocate(64 * MiB);  // exactly the capacity still works
  a->deallocate(p, 64 * MiB);
  EXPECT_INVARIANTS(*a);
}

// Random allocs and frees against a reference model: live blocks never
// overlap, their bytes survive every other operation, and the counters agree.
TEST_F(CoreTest, RandomWorkloadMatchesReferenceModel) {
  Config c = base_config();
  c.max_chunk = 4 * MiB;
  auto a = make(256 * MiB, c);
  std::mt19937_64 rng(12345);
  struct Live {
    std::size_t size;
    std::uint32_t seed;
  };
  std::map<std::uintptr_t, Live> live;
  std::int64_t requested = 0;
  std::size_t most_live = 0;
  std::uint32_t next_seed = 1;
  const int ops = 4000;
  for (int i = 0; i < ops; ++i) {
    bool do_alloc = live.empty() || (rng() % 100) < 55;
    if (do_alloc) {
      std::size_t size;
      switch (rng() % 4) {
        case 0:
          size = 1 + rng() % 4096;
          break;
        case 1:
          size = 4096 + rng() % MiB;
          break;
        case 2:
          size = MiB + rng() % (8 * MiB);
          break;
        default:
          size = 8 * MiB + rng() % (24 * MiB);
          break;
      }
      void* p = nullptr;
      try {
        p = a->allocate(size);
      } catch (const out_of_memory&) {
        continue;  // allowed under pressure; the model is unchanged
      }
      auto addr = reinterpret_cast<std::uintptr_t>(p);
      auto next = live.lower_bound(addr);
      if (next != live.end()) {
        ASSERT_LE(addr + size, next->first) << "overlaps the next live block";
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second.size, addr) << "overlaps the previous live block";
      }
      Live l{size, next_seed++};
      platform_->fill(p, std::min<std::size_t>(size, 64 * 1024), l.seed);
      live.emplace(addr, l);
      requested += static_cast<std::int64_t>(size);
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      void* p = reinterpret_cast<void*>(it->first);
      ASSERT_TRUE(
          platform_->check(p, std::min<std::size_t>(it->second.size, 64 * 1024), it->second.seed))
          << "bytes of a live block changed";
      a->deallocate(p, it->second.size);
      requested -= static_cast<std::int64_t>(it->second.size);
      live.erase(it);
    }
    ASSERT_EQ(a->stats().requested_bytes.current, requested);
    ASSERT_EQ(a->stats().live_blocks.current, static_cast<std::int64_t>(live.size()));
    most_live = std::max(most_live, live.size());
    if (i % 500 == 0) {
      ASSERT_EQ(a->check_invariants(), "") << "after op " << i;
    }
  }
  const Stats s = a->stats();
  EXPECT_GT(s.rung_stitch.current, 0);
  EXPECT_GT(s.rung_fragment.current + s.rung_free_run.current, 0);
  EXPECT_GT(s.rung_idle_segment.current + s.rung_remembered.current, 0);
  EXPECT_LE(s.reserved_bytes.peak, static_cast<std::int64_t>(256 * MiB));
  for (auto& [addr, l] : live) {
    EXPECT_TRUE(platform_->check(reinterpret_cast<void*>(addr),
                                 std::min<std::size_t>(l.size, 64 * 1024), l.seed));
    a->deallocate(reinterpret_cast<void*>(addr), l.size);
  }
  EXPECT_EQ(a->stats().live_bytes.current, 0);
  EXPECT_EQ(a->stats().live_blocks.current, 0);
  EXPECT_EQ(a->stats().live_blocks.peak, static_cast<std::int64_t>(most_live));
  a->empty_cache();
  EXPECT_EQ(a->stats().reserved_bytes.current, 0);
  EXPECT_INVARIANTS(*a);
}

TEST_F(CoreTest, ThreadsShareOneAllocator) {
  auto a = make(512 * MiB);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u);
      std::vector<std::pair<void*, std::pair<std::size_t, std::uint32_t>>> mine;
      for (int i = 0; i < 1500; ++i) {
        if (mine.size() < 16 && (mine.empty() || rng() % 2)) {
          std::size_t size = (rng() % 3 == 0) ? (1 + rng() % (6 * MiB)) : (1 + rng() % 8192);
          void* p = a->allocate(size);
          std::uint32_t seed = static_cast<std::uint32_t>(t * 100000 + i);
          platform_->fill(p, std::min<std::size_t>(size, 4096), seed);
          mine.push_back({p, {size, seed}});
        } else {
          std::size_t k = rng() % mine.size();
          auto [p, info] = mine[k];
          if (!platform_->check(p, std::min<std::size_t>(info.first, 4096), info.second))
            ++failures;
          a->deallocate(p, info.first);
          mine.erase(mine.begin() + static_cast<long>(k));
        }
      }
      for (auto& [p, info] : mine) a->deallocate(p, info.first);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(a->stats().live_bytes.current, 0);
  EXPECT_EQ(a->stats().allocs.current, a->stats().frees.current);
  EXPECT_INVARIANTS(*a);
}

}  // namespace
}  // namespace memlake::test

namespace memlake::test {
namespace {

// small_max above a granule: a "small" request larger than one chunk must
// still get a block that covers it whole (it once got a one-chunk run).
TEST_F(CoreTest, SmallMaxAboveAGranuleStillCoversTheRequest) {
  Config c = base_config();
  c.small_max = 4 * MiB;
  c.max_chunk = 2 * MiB;
  auto a = make(64 * MiB, c);
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(a->allocate(2 * MiB));
  for (int i = 0; i < 4; ++i) platform_->fill(ps[i], 2 * MiB, 40 + i);
  a->deallocate(ps[0], 2 * MiB);
  a->deallocate(ps[2], 2 * MiB);
  settle(*a);
  void* q = a->allocate(3 * MiB);
  platform_->fill(q, 3 * MiB, 50);
  EXPECT_TRUE(platform_->check(q, 3 * MiB, 50));
  EXPECT_TRUE(platform_->check(ps[1], 2 * MiB, 41));
  EXPECT_TRUE(platform_->check(ps[3], 2 * MiB, 43));
  a->deallocate(q, 3 * MiB);
  a->deallocate(ps[1], 2 * MiB);
  a->deallocate(ps[3], 2 * MiB);
  EXPECT_INVARIANTS(*a);
}

}  // namespace
}  // namespace memlake::test
