// The GMLake policy simulation of memlake-replay (tools/replay/): reserved
// bytes and driver calls on tiny sequences, computed by hand from GMLake's
// rules, plus a randomized run that checks the internal invariants.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "memlake/errors.hpp"
#include "replay/gmlake_policy.hpp"

namespace memlake {
namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;

void ok(GmlakePolicy& g) {
  ASSERT_EQ(g.check_invariants(), "");
}

TEST(GmlakePolicy, SizeClasses) {
  EXPECT_EQ(GmlakePolicy::round_size(0), 512u);
  EXPECT_EQ(GmlakePolicy::round_size(513), 1024u);
  EXPECT_EQ(GmlakePolicy::round_size(1 * MiB), 1 * MiB);  // still the small pool
  EXPECT_EQ(GmlakePolicy::round_size(1 * MiB + 1), 2 * MiB);
  EXPECT_EQ(GmlakePolicy::round_size(3 * MiB), 4 * MiB);
  EXPECT_EQ(GmlakePolicy::allocation_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(GmlakePolicy::allocation_size(4 * MiB), 20 * MiB);
  EXPECT_EQ(GmlakePolicy::allocation_size(10 * MiB), 10 * MiB);
}

// Two 3 MiB requests, both freed, then one of 6 MiB.
//  - 3 MiB rounds to 4 MiB (large pool, whole chunks); below 10 MiB a new
//    segment is 20 MiB: 10 chunks. a = [0,4), free rest [4,20).
//  - b: best fit is the free 16 MiB piece: b = [4,8), free [8,20).
//  - free a, free b: b merges with both neighbours: one free 20 MiB piece.
//  - 6 MiB: best fit on that piece, split: [0,6) used, [6,20) free.
// No stitch (6 MiB < fragLimit 512 MiB) and no new memory: 20 MiB.
TEST(GmlakePolicy, SmallLargeRequestsShareOneSegment) {
  GmlakePolicy g;
  ASSERT_TRUE(g.allocate(1, 3 * MiB, 0));
  ASSERT_TRUE(g.allocate(2, 3 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.reserved(), 20 * MiB);
  g.free(1);
  g.free(2);
  ok(g);
  ASSERT_TRUE(g.allocate(3, 6 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.reserved(), 20 * MiB);
  EXPECT_EQ(g.peak_reserved(), 20 * MiB);
  EXPECT_EQ(g.peak_requested(), 6 * MiB);
  const GmlakeCounters& c = g.counters();
  EXPECT_EQ(c.path_new, 1u);
  EXPECT_EQ(c.path_block, 2u);
  EXPECT_EQ(c.path_stitch, 0u);
  // One segment of 10 chunks: 10 cuMemCreate, 1 reserve, 10 maps, 10 SetAccess.
  EXPECT_EQ(c.mem_create, 10u);
  EXPECT_EQ(c.vmm_calls(), 31u);
}

// Stitching, with GMLake's defaults (fragLimit 512 MiB, reuseLimit 10).
TEST(GmlakePolicy, StitchThenReuseTheStitchedBlock) {
  GmlakePolicy g;
  // A and B: one segment each of 300 chunks: 901 VMM calls each.
  ASSERT_TRUE(g.allocate(1, 600 * MiB, 0));
  ASSERT_TRUE(g.allocate(2, 600 * MiB, 0));
  g.free(1);
  g.free(2);
  ok(g);
  EXPECT_EQ(g.reserved(), 1200 * MiB);
  EXPECT_EQ(g.counters().vmm_calls(), 1802u);
  // C = 1000 MiB: no free piece is large enough and no sBlock exists, so the
  // free pieces are stitched, largest first (equal sizes: higher address
  // first): B (600), then A (600) = 1200. A, the last, gives only 400 MiB;
  // its other 200 MiB stay free. sBlock = 500 chunks: 1 reserve, 500 maps,
  // 500 SetAccess. No new memory.
  ASSERT_TRUE(g.allocate(3, 1000 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.reserved(), 1200 * MiB);
  EXPECT_EQ(g.counters().path_stitch, 1u);
  EXPECT_EQ(g.counters().stitched_chunks, 500u);
  EXPECT_EQ(g.counters().vmm_calls(), 1802u + 1001u);
  // Freeing C caches the sBlock; A's two parts merge back to 600 MiB.
  g.free(3);
  ok(g);
  // D = 900 MiB: no free piece fits (600, 600); the cached sBlock (1000 MiB
  // <= 10 x 900) does: its first 450 chunks are used (all of B, 150 of A;
  // A splits into a used and a free 300 MiB part).
  ASSERT_TRUE(g.allocate(4, 900 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.counters().path_sblock, 1u);
  EXPECT_EQ(g.counters().vmm_calls(), 2803u);  // reuse maps nothing
  // E = 300 MiB: exact fit on A's free part (it includes the sBlock's
  // unused tail). F = 100 MiB: nothing free is left: a new 100 MiB segment.
  ASSERT_TRUE(g.allocate(5, 300 * MiB, 0));
  EXPECT_EQ(g.counters().path_block, 1u);
  EXPECT_EQ(g.reserved(), 1200 * MiB);
  ASSERT_TRUE(g.allocate(6, 100 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.reserved(), 1300 * MiB);
  EXPECT_EQ(g.counters().vmm_calls(), 2803u + 151u);
  // Freeing D leaves the sBlock fragmented (E holds 50 of its chunks);
  // freeing E makes it whole again, so G = 1000 MiB reuses it.
  g.free(4);
  ok(g);
  g.free(5);
  ok(g);
  ASSERT_TRUE(g.allocate(7, 1000 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.counters().path_sblock, 2u);
  EXPECT_EQ(g.counters().path_stitch, 1u);
  EXPECT_EQ(g.peak_reserved(), 1300 * MiB);
  EXPECT_EQ(g.peak_requested(), 1300 * MiB);  // D + E + F
}

// The reuse limit: a cached sBlock more than reuse_limit times the request
// is not handed out; GMLake stitches a new one instead.
TEST(GmlakePolicy, ReuseLimit) {
  GmlakeOptions o;
  o.reuse_limit = 1.5;
  GmlakePolicy g(o);
  ASSERT_TRUE(g.allocate(1, 600 * MiB, 0));
  ASSERT_TRUE(g.allocate(2, 600 * MiB, 0));
  g.free(1);
  g.free(2);
  ASSERT_TRUE(g.allocate(3, 1000 * MiB, 0));  // stitched, as above
  g.free(3);
  // 620 MiB: the 1000 MiB sBlock is > 1.5 x 620 = 930: a new stitch of B
  // (300 chunks) and 10 chunks of A; the old sBlock turns fragmented.
  ASSERT_TRUE(g.allocate(4, 620 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.counters().path_sblock, 0u);
  EXPECT_EQ(g.counters().path_stitch, 2u);
  EXPECT_EQ(g.counters().stitched_chunks, 500u + 310u);
  EXPECT_EQ(g.reserved(), 1200 * MiB);
  // 700 MiB: 1000 <= 1.5 x 700, but the cached sBlock is fragmented now; no
  // free piece fits (A's free 580 MiB): stitching needs two free pieces and
  // only one exists, so a new segment.
  ASSERT_TRUE(g.allocate(5, 700 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.reserved(), 1900 * MiB);
  EXPECT_EQ(g.counters().path_new, 3u);
}

// Requests up to 1 MiB use the stock small pool: 2 MiB cudaMalloc segments
// split at 512 B, apart from the chunks of the large pool.
TEST(GmlakePolicy, SmallPool) {
  GmlakePolicy g;
  ASSERT_TRUE(g.allocate(1, 1000, 0));     // 1024 B; new 2 MiB segment S1
  ASSERT_TRUE(g.allocate(2, 1 * MiB, 0));  // best fit in S1's rest (2 MiB - 1 KiB)
  EXPECT_EQ(g.reserved(), 2 * MiB);
  ASSERT_TRUE(g.allocate(3, 1 * MiB, 0));  // S1 has 1 MiB - 1 KiB left: new S2
  EXPECT_EQ(g.reserved(), 4 * MiB);
  ASSERT_TRUE(g.allocate(4, 1 * MiB + 1, 0));  // 2 MiB, large pool: a 20 MiB segment
  EXPECT_EQ(g.reserved(), 24 * MiB);
  ok(g);
  g.free(2);  // merges with S1's free tail: 2 MiB - 1 KiB free
  ok(g);
  ASSERT_TRUE(g.allocate(5, 1 * MiB, 0));            // best fit: S2's free 1 MiB, exact
  ASSERT_TRUE(g.allocate(6, 2 * MiB - 2 * KiB, 0));  // over 1 MiB: 2 MiB of the free 18 MiB
  ok(g);
  EXPECT_EQ(g.reserved(), 24 * MiB);
  const GmlakeCounters& c = g.counters();
  EXPECT_EQ(c.cuda_malloc, 2u);
  EXPECT_EQ(c.path_small_new, 2u);
  EXPECT_EQ(c.path_small_cached, 2u);
  EXPECT_EQ(c.path_new, 1u);
  EXPECT_EQ(c.path_block, 1u);
  EXPECT_EQ(c.mem_create, 10u);
}

// Blocks are reused, and stitched, only within their stream.
TEST(GmlakePolicy, StreamsAreSeparate) {
  GmlakePolicy g;
  ASSERT_TRUE(g.allocate(1, 4 * MiB, 1));  // 20 MiB segment on stream 1
  g.free(1);
  ASSERT_TRUE(g.allocate(2, 4 * MiB, 2));  // stream 2 cannot use it
  EXPECT_EQ(g.reserved(), 40 * MiB);
  ASSERT_TRUE(g.allocate(3, 4 * MiB, 1));  // stream 1 can
  EXPECT_EQ(g.reserved(), 40 * MiB);
  ASSERT_TRUE(g.allocate(4, 1000, 1));  // small pool, stream 1: 2 MiB
  g.free(4);
  ASSERT_TRUE(g.allocate(5, 1000, 2));  // small pool, stream 2: another 2 MiB
  EXPECT_EQ(g.reserved(), 44 * MiB);
  // Two free 600 MiB pieces on stream 1 are not stitched for stream 2.
  ASSERT_TRUE(g.allocate(6, 600 * MiB, 1));
  ASSERT_TRUE(g.allocate(7, 600 * MiB, 1));
  g.free(6);
  g.free(7);
  ASSERT_TRUE(g.allocate(8, 1000 * MiB, 2));
  ok(g);
  EXPECT_EQ(g.counters().path_stitch, 0u);
  EXPECT_EQ(g.reserved(), 44 * MiB + 2200 * MiB);
}

// With a capacity: out of memory releases whole free segments and retries;
// if that is not enough the request fails.
TEST(GmlakePolicy, CapacityReleaseAndOom) {
  GmlakeOptions o;
  o.capacity = 1300 * MiB;
  GmlakePolicy g(o);
  ASSERT_TRUE(g.allocate(1, 600 * MiB, 0));
  g.free(1);
  // 800 MiB: 600 + 800 > 1300, one free piece cannot be stitched; release
  // the free 600 MiB segment and retry.
  ASSERT_TRUE(g.allocate(2, 800 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.reserved(), 800 * MiB);
  EXPECT_EQ(g.peak_reserved(), 800 * MiB);
  EXPECT_EQ(g.counters().path_after_release, 1u);
  EXPECT_EQ(g.counters().segments_released, 1u);
  EXPECT_EQ(g.counters().mem_release, 300u);
  // 600 MiB more does not fit and nothing is free.
  EXPECT_FALSE(g.allocate(3, 600 * MiB, 0));
  EXPECT_EQ(g.counters().ooms, 1u);
  EXPECT_EQ(g.reserved(), 800 * MiB);
  ok(g);
  EXPECT_THROW(g.free(3), misuse);
}

// Releasing a segment whose chunks a cached sBlock maps unmaps that sBlock.
TEST(GmlakePolicy, ReleaseDropsStitchedBlocks) {
  GmlakeOptions o;
  o.capacity = 1900 * MiB;
  GmlakePolicy g(o);
  ASSERT_TRUE(g.allocate(1, 600 * MiB, 0));
  ASSERT_TRUE(g.allocate(2, 600 * MiB, 0));
  g.free(1);
  g.free(2);
  ASSERT_TRUE(g.allocate(3, 1000 * MiB, 0));  // stitched
  g.free(3);
  // 1400 MiB: pieces 600 + 600 are too few, the sBlock too small; new needs
  // 1200 + 1400 > 1900: release both segments (and the sBlock), then fits.
  ASSERT_TRUE(g.allocate(4, 1400 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.reserved(), 1400 * MiB);
  EXPECT_EQ(g.counters().sblocks_collected, 1u);
  EXPECT_EQ(g.counters().segments_released, 2u);
}

// GMLake unmaps idle sBlocks once all stitched bytes pass autoGC.
TEST(GmlakePolicy, AutoGcCollectsIdleStitchedBlocks) {
  GmlakeOptions o;
  o.auto_gc_bytes = 1500 * MiB;
  GmlakePolicy g(o);
  ASSERT_TRUE(g.allocate(1, 600 * MiB, 0));
  ASSERT_TRUE(g.allocate(2, 600 * MiB, 0));
  g.free(1);
  g.free(2);
  ASSERT_TRUE(g.allocate(3, 1000 * MiB, 0));  // 1000 MiB stitched so far
  g.free(3);
  // 1100 MiB: the cached 1000 MiB sBlock is too small, so stitch again; the
  // old one turns fragmented; 2100 MiB > 1500: it is collected.
  ASSERT_TRUE(g.allocate(4, 1100 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.counters().path_stitch, 2u);
  EXPECT_EQ(g.counters().sblocks_collected, 1u);
  EXPECT_EQ(g.reserved(), 1200 * MiB);
}

// vmmDefragment=0: the stock caching allocator (with 2 MiB rounding).
TEST(GmlakePolicy, WithoutDefragmentNothingIsStitched) {
  GmlakeOptions o;
  o.defragment = false;
  GmlakePolicy g(o);
  ASSERT_TRUE(g.allocate(1, 600 * MiB, 0));
  ASSERT_TRUE(g.allocate(2, 600 * MiB, 0));
  g.free(1);
  g.free(2);
  ASSERT_TRUE(g.allocate(3, 1000 * MiB, 0));
  ok(g);
  EXPECT_EQ(g.reserved(), 2200 * MiB);
  EXPECT_EQ(g.counters().vmm_calls(), 0u);
  EXPECT_EQ(g.counters().cuda_malloc, 3u);
}

TEST(GmlakePolicy, Misuse) {
  GmlakePolicy g;
  ASSERT_TRUE(g.allocate(1, 10, 0));
  EXPECT_THROW(g.allocate(1, 10, 0), misuse);
  EXPECT_THROW(g.free(2), misuse);
  g.free(1);
  EXPECT_THROW(g.free(1), misuse);
}

// Random traffic on three streams with a low fragment limit (so stitching
// and sBlock reuse happen all the time) and a capacity (so releases and
// OOMs happen too); the invariants must hold after every step.
TEST(GmlakePolicy, RandomTrafficKeepsInvariants) {
  for (std::uint64_t capacity : {std::uint64_t{0}, 300 * MiB}) {
    GmlakeOptions o;
    o.frag_limit = 8 * MiB;
    o.capacity = capacity;
    o.auto_gc_bytes = 2048 * MiB;
    GmlakePolicy g(o);
    std::mt19937_64 rng(42 + capacity);
    std::vector<std::uint64_t> live;
    std::unordered_map<std::uint64_t, std::uint64_t> bytes_of;
    std::uint64_t requested = 0;
    std::uint64_t peak = 0;
    std::uint64_t next_id = 0;
    for (int step = 0; step < 6000; ++step) {
      const bool alloc = live.empty() || rng() % 100 < 55;
      if (alloc) {
        std::uint64_t size;
        switch (rng() % 4) {
          case 0:
            size = 1 + rng() % (1 * MiB);
            break;
          case 1:
            size = 1 * MiB + rng() % (9 * MiB);
            break;
          case 2:
            size = 10 * MiB + rng() % (40 * MiB);
            break;
          default:
            size = rng() % 3 == 0 ? 64 * MiB + rng() % (64 * MiB) : 2 * MiB;
            break;
        }
        const std::uint64_t id = next_id++;
        if (g.allocate(id, size, rng() % 3)) {
          live.push_back(id);
          bytes_of[id] = size;
          requested += size;
          peak = std::max(peak, requested);
        } else {
          ASSERT_NE(capacity, 0u);
        }
      } else {
        const std::size_t i = rng() % live.size();
        g.free(live[i]);
        requested -= bytes_of[live[i]];
        live[i] = live.back();
        live.pop_back();
      }
      ASSERT_EQ(g.check_invariants(), "") << "step " << step;
      if (capacity) {
        ASSERT_LE(g.reserved(), capacity);
      }
    }
    EXPECT_EQ(g.live_requested(), requested);
    EXPECT_EQ(g.peak_requested(), peak);
    EXPECT_GT(g.counters().path_stitch, 0u);
    EXPECT_GT(g.counters().path_sblock, 0u);
    if (capacity) {
      EXPECT_GT(g.counters().ooms, 0u);
      EXPECT_GT(g.counters().segments_released, 0u);
    }
    for (std::uint64_t id : live) g.free(id);
    ASSERT_EQ(g.check_invariants(), "");
    EXPECT_EQ(g.live_requested(), 0u);
  }
}

}  // namespace
}  // namespace memlake
