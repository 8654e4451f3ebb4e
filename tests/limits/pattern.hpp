// The pattern a soak block carries while it is live: 8-byte words that
// depend on the block's seed and their offset, every word for blocks up to
// 64 KiB, one per 4 KiB page up to 8 MiB, one per 64 KiB up to 128 MiB and
// one per 512 KiB beyond (every chunk of a block holds several), and the
// block's last 8 bytes. A block
// mapped to the wrong chunk, or written by someone else, reads back wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace memlake::test {

inline std::uint64_t pattern_word(std::uint64_t seed, std::size_t offset) {
  std::uint64_t x = seed ^ (offset * 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline std::size_t pattern_stride(std::size_t size) {
  if (size <= (std::size_t{64} << 10)) return 8;
  if (size <= (std::size_t{8} << 20)) return 4096;
  return size <= (std::size_t{128} << 20) ? std::size_t{64} << 10 : std::size_t{512} << 10;
}

// Calls visit(offset, length, expected) for every piece of the pattern.
template <typename Visit>
bool each_pattern_piece(std::size_t size, std::uint64_t seed, Visit visit) {
  if (size < 8) {
    const std::uint64_t w = pattern_word(seed, 0);
    return visit(0, size, w);
  }
  const std::size_t stride = pattern_stride(size);
  for (std::size_t off = 0; off + 16 <= size; off += stride) {
    if (!visit(off, 8, pattern_word(seed, off))) return false;
  }
  return visit(size - 8, 8, pattern_word(seed, size - 8));
}

inline void fill_pattern(void* p, std::size_t size, std::uint64_t seed) {
  auto* bytes = static_cast<unsigned char*>(p);
  each_pattern_piece(size, seed, [&](std::size_t off, std::size_t len, std::uint64_t w) {
    std::memcpy(bytes + off, &w, len);
    return true;
  });
}

inline bool check_pattern(const void* p, std::size_t size, std::uint64_t seed) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  return each_pattern_piece(size, seed, [&](std::size_t off, std::size_t len, std::uint64_t w) {
    return std::memcmp(bytes + off, &w, len) == 0;
  });
}

}  // namespace memlake::test
