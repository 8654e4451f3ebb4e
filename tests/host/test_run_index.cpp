// RunIndex against std::set<RunKey> and SlotRuns against std::map on random
// inserts and erases: the same elements in the same order, walked forwards
// and backwards from the same lower bounds, with lengths that empty and
// come back (RunIndex keeps their arrays and must step over them).
#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "lake/run_index.hpp"
#include "lake/slot_runs.hpp"

namespace memlake::lake {
namespace {

std::vector<RunKey> forwards(const RunIndex& s) {
  return {s.begin(), s.end()};
}
std::vector<RunKey> backwards(const RunIndex& s) {
  std::vector<RunKey> out;
  for (auto it = s.end(); it != s.begin();) out.push_back(*--it);
  return out;
}

void matches_an_ordered_set(std::size_t unit) {
  std::mt19937 rng(11);
  const std::size_t lengths[] = {2, 4, 6, 10, 64};  // with unit 4: 4 and 6 share a step
  RunIndex mine(unit);
  std::set<RunKey> ref;
  for (int step = 0; step < 20000; ++step) {
    const RunKey k{lengths[rng() % 5], static_cast<SegmentId>(rng() % 12),
                   static_cast<std::uint32_t>(rng() % 40)};
    if (rng() % 2 == 0) {
      mine.erase(k);
      ref.erase(k);
    } else {
      mine.insert(k);
      ref.insert(k);
    }
    ASSERT_EQ(mine.size(), ref.size());
    ASSERT_EQ(mine.count(k), ref.count(k));
    ASSERT_EQ(mine.largest_bytes(), ref.empty() ? 0 : ref.rbegin()->bytes);
    const RunKey probe{lengths[rng() % 5] + rng() % 3 - 1, static_cast<SegmentId>(rng() % 13),
                       static_cast<std::uint32_t>(rng() % 42)};
    auto lb = mine.lower_bound(probe);
    auto rlb = ref.lower_bound(probe);
    ASSERT_EQ(lb == mine.end(), rlb == ref.end());
    if (rlb != ref.end()) {
      ASSERT_EQ(*lb, *rlb);
      auto next = lb;
      auto rnext = rlb;
      if (++rnext != ref.end()) {
        ASSERT_EQ(*++next, *rnext);
      } else {
        ASSERT_TRUE(++next == mine.end());
      }
    }
    if (rlb != ref.begin()) {
      ASSERT_EQ(*std::prev(lb), *std::prev(rlb));
    } else {
      ASSERT_TRUE(lb == mine.begin());
    }
    if (step % 500 == 0) {
      ASSERT_EQ(forwards(mine), std::vector<RunKey>(ref.begin(), ref.end()));
      ASSERT_EQ(backwards(mine), std::vector<RunKey>(ref.rbegin(), ref.rend()));
    }
  }
  for (const RunKey& k : std::vector<RunKey>(ref.begin(), ref.end())) mine.erase(k);
  EXPECT_TRUE(mine.empty());
  EXPECT_TRUE(mine.begin() == mine.end());
  EXPECT_TRUE(mine.lower_bound({0, 0, 0}) == mine.end());
  EXPECT_EQ(mine.largest_bytes(), 0u);
}

TEST(RunIndex, MatchesAnOrderedSetOfKeys) {
  matches_an_ordered_set(1);
  matches_an_ordered_set(2);
  matches_an_ordered_set(4);
  matches_an_ordered_set(128);  // every length in one array
}

TEST(RunIndex, WalksStepOverLengthsThatEmptied) {
  RunIndex s(2);
  s.insert({2, 0, 0});
  s.insert({4, 1, 3});
  s.insert({8, 2, 5});
  s.erase({4, 1, 3});
  std::vector<RunKey> expect = {{2, 0, 0}, {8, 2, 5}};
  EXPECT_EQ(forwards(s), expect);
  EXPECT_EQ(backwards(s), std::vector<RunKey>(expect.rbegin(), expect.rend()));
  EXPECT_EQ(*s.lower_bound({3, 0, 0}), (RunKey{8, 2, 5}));
  EXPECT_EQ(*s.lower_bound({2, 0, 1}), (RunKey{8, 2, 5}));
  s.erase({8, 2, 5});
  EXPECT_EQ(s.largest_bytes(), 2u);
  EXPECT_TRUE(s.lower_bound({3, 0, 0}) == s.end());
}

TEST(SlotRuns, MatchesAMapOfRuns) {
  std::mt19937 rng(5);
  SlotRuns mine;
  std::map<std::uint32_t, std::uint32_t> ref;
  for (int step = 0; step < 20000; ++step) {
    const auto first = static_cast<std::uint32_t>(rng() % 200);
    if (auto it = mine.find(first); it != mine.end()) {
      ASSERT_EQ(it->second, ref.at(first));
      mine.erase(it);
      ref.erase(first);
    } else {
      ASSERT_EQ(ref.count(first), 0u);
      const auto count = static_cast<std::uint32_t>(1 + rng() % 9);
      mine.emplace(first, count);
      ref.emplace(first, count);
      ASSERT_EQ(mine.at(first), count);
    }
    ASSERT_EQ(mine.size(), ref.size());
    const auto probe = static_cast<std::uint32_t>(rng() % 210);
    auto lb = mine.lower_bound(probe);
    auto rlb = ref.lower_bound(probe);
    ASSERT_EQ(lb == mine.end(), rlb == ref.end());
    if (rlb != ref.end()) {
      ASSERT_EQ(lb->first, rlb->first);
    }
    auto ub = mine.upper_bound(probe);
    auto rub = ref.upper_bound(probe);
    ASSERT_EQ(ub == mine.end(), rub == ref.end());
    if (rub != ref.end()) {
      ASSERT_EQ(ub->first, rub->first);
    }
  }
  EXPECT_TRUE(std::equal(mine.begin(), mine.end(), ref.begin(), ref.end(), [](auto& a, auto& b) {
    return a.first == b.first && a.second == b.second;
  }));
  EXPECT_THROW((void)mine.at(1000), std::out_of_range);
}

}  // namespace
}  // namespace memlake::lake
