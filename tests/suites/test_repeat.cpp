// Repeated training steps: a step that asks for the same blocks in the same
// order as the last one gets every large block at the place it had then
// (remembered places), so once the layout has settled a step maps nothing.
// Runs on every platform (host streams and the GPU).
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "allocator/allocator_impl.hpp"
#include "suites/core_fixture.hpp"

namespace memlake::test {
namespace {

constexpr std::size_t KiB = 1024;

// A transformer-like step, the same every time it runs: per layer a kept
// activation, three temporaries and a few small buffers; then the backward
// pass recomputes two buffers per layer, makes a gradient and drops the
// activation. Sizes are irregular (not whole granules); every block is
// filled when allocated and checked before it is freed.
class Step {
 public:
  Step(Allocator& a, Platform& p) : a_(a), p_(p) {
    std::mt19937 rng(7);
    for (int l = 0; l < kLayers; ++l) {
      keep_.push_back((l % 4 ? 3 : 9) * MiB + 512 * KiB + 4096 * l);
      for (int t = 0; t < 3; ++t) tmp_.push_back((2 + rng() % 3 * 2) * MiB + 4096 * (rng() % 7));
      for (int s = 0; s < 3; ++s) small_.push_back((1 + rng() % 64) * KiB);
    }
  }

  // The address of every large block, in the order the step asked for them.
  std::vector<void*> run(std::uint32_t seed) {
    std::vector<void*> places;
    std::vector<Block> acts;
    for (int l = 0; l < kLayers; ++l) {
      Block keep = take(keep_[l], seed, &places);
      std::vector<Block> gone;
      for (int t = 0; t < 3; ++t) gone.push_back(take(tmp_[3 * l + t], seed, &places));
      for (int s = 0; s < 3; ++s) gone.push_back(take(small_[3 * l + s], seed, nullptr));
      for (Block& b : gone) give(b);
      acts.push_back(keep);
    }
    std::vector<Block> grads;
    for (int l = kLayers - 1; l >= 0; --l) {
      Block r1 = take(6 * MiB + 8192, seed, &places), r2 = take(6 * MiB + 8192, seed, &places);
      grads.push_back(take(4 * MiB, seed, &places));
      give(r1);
      give(r2);
      give(acts[l]);
    }
    for (Block& g : grads) give(g);
    return places;
  }

  // Called after every allocation and free.
  std::function<void()> after_each = [] {};

 private:
  static constexpr int kLayers = 8;
  struct Block {
    void* p;
    std::size_t n;
    std::uint32_t seed;
  };
  Block take(std::size_t n, std::uint32_t seed, std::vector<void*>* places) {
    Block b{a_.allocate(n), n, seed * 1000 + next_++};
    p_.fill(b.p, b.n, b.seed);
    if (places) places->push_back(b.p);
    after_each();
    return b;
  }
  void give(Block& b) {
    EXPECT_TRUE(p_.check(b.p, b.n, b.seed)) << "a block's bytes changed while it was live";
    a_.deallocate(b.p, b.n);
    after_each();
  }
  Allocator& a_;
  Platform& p_;
  std::vector<std::size_t> keep_, tmp_, small_;
  std::uint32_t next_ = 0;
};

// Chunks as in training (2 MiB, 4 MiB for requests from 64 MiB) and the
// worker running its jobs inline at the same points, so that the run is the
// same on every machine.
Config training_like() {
  Config c;
  c.max_chunk = 2 * MiB;
  c.large_chunk = 4 * MiB;
  c.large_chunk_from = 16 * MiB;
  c.worker = WorkerMode::inline_jobs;
  return c;
}

TEST_F(CoreTest, RepeatedStepsSettleIntoOneLayoutThatMapsNothing) {
  auto a = make(1024 * MiB, training_like());
  Step step(*a, *platform_);
  // On host streams nothing runs behind the caller, so the same requests get
  // the same places. On a GPU a free may still be pending when the next
  // request comes, so a block may take another free place: no mapping either.
  const bool same_places = platform_->name() == "host";
  std::vector<void*> last;
  int settled_at = -1;
  for (int i = 0; i < 8; ++i) {
    const Stats before = a->stats();
    std::vector<void*> places = step.run(static_cast<std::uint32_t>(i));
    settle_all(*a);
    const Stats after = a->stats();
    const auto vmm = after.vmm_calls.current - before.vmm_calls.current;
    if (settled_at < 0 && vmm == 0 && (!same_places || places == last)) settled_at = i;
    if (settled_at >= 0) {
      EXPECT_EQ(vmm, 0) << "step " << i << " mapped again after step " << settled_at;
      if (same_places) {
        EXPECT_EQ(places, last) << "step " << i << " moved blocks";
      }
      EXPECT_EQ(after.reserved_bytes.current, before.reserved_bytes.current);
    }
    last = std::move(places);
  }
  EXPECT_GE(settled_at, 0) << "the layout never settled";
  EXPECT_LE(settled_at, 3) << "it took too long to settle";
  EXPECT_GT(a->stats().rung_remembered.current, 0);
  EXPECT_INVARIANTS(*a);
}

// A deep model's layers can make the same requests for longer than the
// request history's window (a layer's backward under recomputation): then
// the history no longer tells two of them apart, and the places kept for
// one request are every layer's. What still differs is the bytes allocated
// when each comes (a layer frees its saved activation). Here one request
// comes twice a step after the same requests, first with nothing else
// allocated, then beside a block that took the first one's chunks; a step
// that repeats the last one must get each at the place it had then.
TEST_F(CoreTest, ARequestTheHistoryCannotTellApartComesBackToItsPlaceAtTheSameBytesAllocated) {
  auto a = make(1024 * MiB, training_like());
  constexpr std::size_t kRequest = 20 * MiB + 4096, kBeside = 12 * MiB + 8192;
  auto same_requests = [&] {  // more than RequestHistory::kWindow
    for (std::size_t i = 0; i < 80; ++i) {
      const std::size_t n = (1 + i % 61) * 1024;
      void* p = a->allocate(n);
      a->deallocate(p, n);
    }
  };
  auto step = [&](std::uint32_t seed) {
    same_requests();
    void* first = a->allocate(kRequest);
    platform_->fill(first, kRequest, seed);
    EXPECT_TRUE(platform_->check(first, kRequest, seed));
    a->deallocate(first, kRequest);
    void* beside = a->allocate(kBeside);  // takes the first one's chunks
    platform_->fill(beside, kBeside, seed + 1);
    same_requests();
    void* second = a->allocate(kRequest);
    platform_->fill(second, kRequest, seed + 2);
    EXPECT_TRUE(platform_->check(beside, kBeside, seed + 1));
    EXPECT_TRUE(platform_->check(second, kRequest, seed + 2));
    a->deallocate(second, kRequest);
    a->deallocate(beside, kBeside);
    return std::vector<void*>{first, beside, second};
  };
  const std::vector<void*> first_step = step(1);
  settle_all(*a);
  for (std::uint32_t i = 2; i < 5; ++i) {
    const Stats before = a->stats();
    EXPECT_EQ(step(10 * i), first_step) << "step " << i << " moved blocks";
    settle_all(*a);
    EXPECT_EQ(a->stats().vmm_calls.current, before.vmm_calls.current) << "step " << i << " mapped";
  }
  EXPECT_INVARIANTS(*a);
}

// A step that comes back to its places claims and frees the same chunks
// again: the segments mapping them (busy counts, idle index, free runs) are
// left behind meanwhile (Lake::note_chunk_change) and catch up only where
// something reads them. What they say is checked after every call against
// the chunks' state and what changed since, and every block's bytes are
// checked before it is freed.
TEST_F(CoreTest, RunsLeftBehindByARepeatedStepCatchUpWhenRead) {
  auto a = make(1024 * MiB, training_like());
  Step step(*a, *platform_);
  for (int i = 0; i < 4; ++i) {
    step.run(static_cast<std::uint32_t>(i));
    settle_all(*a);
  }
  lake::Lake& lake = a->impl().lake();
  std::size_t most_behind = 0;
  step.after_each = [&] {
    most_behind = std::max(most_behind, lake.segments().behind_chunk_count());
    EXPECT_INVARIANTS(*a);
  };
  const Stats before = a->stats();
  step.run(4);
  settle_all(*a);
  EXPECT_GT(a->stats().rung_remembered.current, before.rung_remembered.current);
  EXPECT_GT(most_behind, 0u) << "every claim and free updated the runs at once";
  const std::size_t runs = lake.free_run_count();  // reads them: they catch up
  EXPECT_GT(runs, 0u);
  EXPECT_EQ(lake.segments().behind_chunk_count(), 0u);
  EXPECT_INVARIANTS(*a);
}

// A remembered place keeps the range and chunk slot it was last found in,
// and is checked there before the address map is searched. Here the range
// is unmapped between two steps, and new ranges, which take the freed range
// ids with other addresses and chunk layouts, are made and left free before
// the request comes back: it may be served by its remembered place only at
// the remembered address, and every block's bytes stay intact.
TEST_F(CoreTest, ARememberedPlaceIsFoundByItsAddressAfterItsRangeWasUnmapped) {
  auto a = make(1024 * MiB, training_like());
  constexpr std::size_t kRequest = 20 * MiB + 4096;
  auto same_requests = [&] {  // more than RequestHistory::kWindow
    for (std::size_t i = 0; i < 80; ++i) {
      const std::size_t n = (1 + i % 61) * 1024;
      void* p = a->allocate(n);
      a->deallocate(p, n);
    }
  };
  // The request, after the same requests every time; whether the
  // remembered rung served it.
  auto request = [&](std::uint32_t seed, bool* remembered) {
    same_requests();
    const auto before = a->stats().rung_remembered.current;
    void* p = a->allocate(kRequest);
    *remembered = a->stats().rung_remembered.current > before;
    platform_->fill(p, kRequest, seed);
    EXPECT_TRUE(platform_->check(p, kRequest, seed));
    a->deallocate(p, kRequest);
    return p;
  };
  bool remembered = false;
  void* first = request(1, &remembered);
  void* again = request(2, &remembered);
  ASSERT_EQ(again, first);
  ASSERT_TRUE(remembered);  // the place was looked up: it holds its range and slot
  a->empty_cache();
  ASSERT_EQ(a->stats().segments.current, 0);
  // New ranges over new chunks, left mapped and free: blocks of other
  // sizes, each filled and checked, then freed.
  for (std::size_t i = 0; i < 6; ++i) {
    const std::size_t n = (3 + 5 * i) * MiB + 12288;
    void* p = a->allocate(n);
    platform_->fill(p, n, static_cast<std::uint32_t>(100 + i));
    EXPECT_TRUE(platform_->check(p, n, static_cast<std::uint32_t>(100 + i)));
    a->deallocate(p, n);
  }
  ASSERT_GT(a->stats().segments.current, 0);
  void* later = request(3, &remembered);
  if (remembered) {
    EXPECT_EQ(later, first) << "served by a remembered place at another address";
  }
  EXPECT_INVARIANTS(*a);
}

// A remembered place in the middle of a run of free chunks is not taken:
// that would leave free chunks before the block, which the ladder's choice
// (the run's first chunks) does not.
TEST_F(CoreTest, ARememberedPlaceInsideAFreeRunIsLeftForTheRunsStart) {
  auto a = make_granule_chunks(256 * MiB);
  void* whole = a->allocate(12 * MiB);
  a->deallocate(whole, 12 * MiB);
  settle_all(*a);
  std::vector<void*> fours;  // the 1st, 2nd and 3rd 4 MiB blocks fill the run
  for (int i = 0; i < 3; ++i) fours.push_back(a->allocate(4 * MiB));
  ASSERT_EQ(fours[0], whole);
  ASSERT_EQ(static_cast<char*>(fours[1]), static_cast<char*>(whole) + 4 * MiB);
  void* elsewhere = a->allocate(4 * MiB);  // the 4th, in new memory
  for (void* p : fours) a->deallocate(p, 4 * MiB);
  settle_all(*a);
  // One 4 MiB block is allocated, so this is a 2nd again, whose place was
  // 4 MiB into what is now one free run of 12 MiB.
  const Stats before = a->stats();
  void* second = a->allocate(4 * MiB);
  EXPECT_EQ(second, whole);
  EXPECT_EQ(a->stats().rung_remembered.current, before.rung_remembered.current);
  EXPECT_EQ(a->stats().vmm_calls.current, before.vmm_calls.current);
  platform_->fill(second, 4 * MiB, 9);
  platform_->fill(elsewhere, 4 * MiB, 10);
  EXPECT_TRUE(platform_->check(second, 4 * MiB, 9));
  EXPECT_TRUE(platform_->check(elsewhere, 4 * MiB, 10));
  a->deallocate(second, 4 * MiB);
  a->deallocate(elsewhere, 4 * MiB);
  EXPECT_INVARIANTS(*a);
}

}  // namespace
}  // namespace memlake::test
