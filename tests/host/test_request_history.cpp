// RequestHistory: the hash of the last kWindow request sizes.
#include <gtest/gtest.h>

#include <vector>

#include "allocator/request_history.hpp"

namespace memlake {
namespace {

std::vector<std::uint64_t> run(RequestHistory& h, const std::vector<std::size_t>& sizes) {
  std::vector<std::uint64_t> out;
  for (std::size_t s : sizes) out.push_back(h.push(s));
  return out;
}

TEST(RequestHistory, ARepeatedSequenceGivesTheSameHistoriesOnceTheWindowIsFull) {
  std::vector<std::size_t> step;
  for (std::size_t i = 0; i < 3 * RequestHistory::kWindow; ++i) step.push_back(4096 * (i % 7 + 1));
  RequestHistory h;
  const auto first = run(h, step);
  const auto second = run(h, step);
  const auto third = run(h, step);
  EXPECT_EQ(second, third);
  // The first step began from an empty history: only its first kWindow differ.
  for (std::size_t i = 0; i < step.size(); ++i)
    EXPECT_EQ(first[i] == second[i], i >= RequestHistory::kWindow) << i;
}

TEST(RequestHistory, TheSameSizeAtTwoPlacesOfAStepHasTwoHistories) {
  RequestHistory h;
  std::vector<std::uint64_t> at_big;
  for (int round = 0; round < 4; ++round) {
    for (std::size_t i = 0; i < 100; ++i) {
      const std::size_t size = i == 10 || i == 60 ? (std::size_t{785} << 20) : 1000 + i;
      const std::uint64_t history = h.push(size);
      if (round == 3 && (i == 10 || i == 60)) at_big.push_back(history);
    }
  }
  ASSERT_EQ(at_big.size(), 2u);
  EXPECT_NE(at_big[0], at_big[1]);
}

TEST(RequestHistory, ASizeOutsideTheWindowIsForgotten) {
  RequestHistory a, b;
  a.push(1);
  b.push(2);
  for (std::size_t i = 0; i < RequestHistory::kWindow; ++i) {
    a.push(100 + i);
    b.push(100 + i);
  }
  EXPECT_EQ(a.push(7), b.push(7));
}

}  // namespace
}  // namespace memlake
