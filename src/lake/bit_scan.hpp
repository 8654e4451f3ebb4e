// Scans of a bitset held as 64-bit words, bit i in word i / 64: the first set
// bit at or after a position and the last one before it, a word at a time.
// FreeChunkSet (chunk ids per size) and RunIndex (run lengths that hold runs)
// walk their bitsets with these.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace memlake::lake {

inline constexpr std::size_t kNoBit = SIZE_MAX;

// The first set bit at or after `from`, or kNoBit.
inline std::size_t first_set_from(const std::vector<std::uint64_t>& words, std::size_t from) {
  for (std::size_t w = from / 64; w < words.size(); ++w) {
    std::uint64_t word = words[w];
    if (w == from / 64) word &= ~std::uint64_t{0} << (from % 64);
    if (word != 0) return w * 64 + static_cast<std::size_t>(std::countr_zero(word));
  }
  return kNoBit;
}

// The last set bit before `before`, or kNoBit.
inline std::size_t last_set_before(const std::vector<std::uint64_t>& words, std::size_t before) {
  if (before == 0) return kNoBit;
  const std::size_t last = before - 1;
  for (std::size_t w = std::min(last / 64 + 1, words.size()); w-- > 0;) {
    std::uint64_t word = words[w];
    if (w == last / 64 && last % 64 != 63) word &= (std::uint64_t{1} << (last % 64 + 1)) - 1;
    if (word != 0) return w * 64 + 63 - static_cast<std::size_t>(std::countl_zero(word));
  }
  return kNoBit;
}

}  // namespace memlake::lake
