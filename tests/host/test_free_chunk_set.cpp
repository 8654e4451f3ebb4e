// FreeChunkSet against std::set<std::pair<size, id>> on random inserts and
// erases: the same elements in the same order, forwards and backwards, and
// the same lower and upper bounds.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "lake/free_chunk_set.hpp"

namespace memlake::lake {
namespace {

using Value = std::pair<std::size_t, ChunkId>;

std::vector<Value> forwards(const FreeChunkSet& s) {
  return {s.begin(), s.end()};
}
std::vector<Value> backwards(const FreeChunkSet& s) {
  std::vector<Value> out;
  for (auto it = s.rbegin(); it != s.rend(); ++it) out.push_back(*it);
  return out;
}

TEST(FreeChunkSet, MatchesAnOrderedSetOfPairs) {
  std::mt19937 rng(7);
  const std::size_t sizes[] = {2, 4, 6, 64};
  FreeChunkSet mine;
  std::set<Value> ref;
  for (int step = 0; step < 20000; ++step) {
    const Value v{sizes[rng() % 4], static_cast<ChunkId>(rng() % 300)};
    if (rng() % 3 == 0) {
      mine.erase(v);
      ref.erase(v);
    } else {
      mine.emplace(v.first, v.second);
      ref.insert(v);
    }
    ASSERT_EQ(mine.size(), ref.size());
    ASSERT_EQ(mine.count(v), ref.count(v));
    const Value probe{sizes[rng() % 4] + rng() % 3 - 1, static_cast<ChunkId>(rng() % 320)};
    auto lb = mine.lower_bound(probe);
    auto rlb = ref.lower_bound(probe);
    ASSERT_EQ(lb == mine.end(), rlb == ref.end());
    if (rlb != ref.end()) {
      ASSERT_EQ(*lb, *rlb);
    }
    const Value whole{probe.first, kNone};  // past every id of that size
    auto ub = mine.upper_bound(whole);
    auto rub = ref.upper_bound(whole);
    ASSERT_EQ(ub == mine.end(), rub == ref.end());
    if (rub != ref.end()) {
      ASSERT_EQ(*ub, *rub);
    }
    if (ub != mine.begin()) {
      ASSERT_EQ(*std::prev(ub), *std::prev(rub));
    }
    if (step % 500 == 0) {
      ASSERT_EQ(forwards(mine), std::vector<Value>(ref.begin(), ref.end()));
      ASSERT_EQ(backwards(mine), std::vector<Value>(ref.rbegin(), ref.rend()));
    }
  }
  for (const Value& v : std::vector<Value>(ref.begin(), ref.end())) mine.erase(v);
  EXPECT_TRUE(mine.empty());
  EXPECT_EQ(mine.begin(), mine.end());
}

TEST(FreeChunkSet, IdsAcrossWordBoundariesWalkBothWays) {
  FreeChunkSet s;
  const std::vector<ChunkId> ids = {0, 63, 64, 127, 128, 1000};
  for (ChunkId id : ids) s.emplace(2, id);
  s.emplace(4, 5);
  std::vector<Value> expect;
  for (ChunkId id : ids) expect.push_back({2, id});
  expect.push_back({4, 5});
  EXPECT_EQ(forwards(s), expect);
  EXPECT_EQ(backwards(s), std::vector<Value>(expect.rbegin(), expect.rend()));
  EXPECT_EQ(*s.lower_bound({2, 65}), (Value{2, 127}));
  EXPECT_EQ(*s.upper_bound({2, 1000}), (Value{4, 5}));
  EXPECT_EQ(s.upper_bound({4, 5}), s.end());
}

TEST(FreeChunkSet, EmptiedSizesAreSkippedBothWays) {
  FreeChunkSet s;
  s.emplace(2, 1);
  s.emplace(4, 2);
  s.emplace(6, 3);
  s.erase({4, 2});  // a size in the middle with nothing left
  EXPECT_EQ(forwards(s), (std::vector<Value>{{2, 1}, {6, 3}}));
  EXPECT_EQ(backwards(s), (std::vector<Value>{{6, 3}, {2, 1}}));
  EXPECT_EQ(*s.lower_bound({3, 0}), (Value{6, 3}));
  EXPECT_EQ(*s.lower_bound({4, 0}), (Value{6, 3}));
  EXPECT_EQ(s.count({4, 2}), 0u);
  s.erase({6, 3});  // and the largest size
  EXPECT_EQ(*s.rbegin(), (Value{2, 1}));
  EXPECT_EQ(s.lower_bound({4, 0}), s.end());
  s.erase({2, 1});
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.begin(), s.end());
  EXPECT_EQ(s.rbegin(), s.rend());
  s.emplace(4, 9);  // a size comes back
  EXPECT_EQ(forwards(s), (std::vector<Value>{{4, 9}}));
  EXPECT_EQ(backwards(s), (std::vector<Value>{{4, 9}}));
}

TEST(FreeChunkSet, ACopyChangesApartFromTheOriginal) {
  FreeChunkSet a;
  a.emplace(2, 1);
  a.emplace(2, 2);
  FreeChunkSet b = a;  // after `a` has looked up size 2 (its bucket cache)
  b.erase({2, 1});
  a.emplace(2, 3);
  EXPECT_EQ(forwards(a), (std::vector<Value>{{2, 1}, {2, 2}, {2, 3}}));
  EXPECT_EQ(forwards(b), (std::vector<Value>{{2, 2}}));
  b = a;
  a.erase({2, 2});
  EXPECT_EQ(forwards(b), (std::vector<Value>{{2, 1}, {2, 2}, {2, 3}}));
  EXPECT_EQ(a.size(), 2u);
}

}  // namespace
}  // namespace memlake::lake
