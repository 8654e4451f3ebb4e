// BlockTable: the live blocks an observer keeps, by address. Open addressing
// with linear probing in one array (no allocation per block, a few dozen
// instructions per insert or erase): observers see every allocation and
// free, and a node-based map would cost more than everything else they do.
// Erasing shifts the entries after it back, so there are no tombstones.
// Addresses are never 0 (0 marks an empty slot).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace memlake {

template <class V>
class BlockTable {
 public:
  std::size_t size() const { return count_; }

  // Inserts or overwrites.
  void put(std::uint64_t key, const V& value) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    std::size_t i = home(key);
    while (slots_[i].first != 0 && slots_[i].first != key) i = (i + 1) & mask_;
    if (slots_[i].first == 0) ++count_;
    slots_[i] = {key, value};
  }

  // nullptr when absent.
  const V* find(std::uint64_t key) const {
    if (count_ == 0) return nullptr;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].first == key) return &slots_[i].second;
      if (slots_[i].first == 0) return nullptr;
    }
  }

  // Whether it was there.
  bool erase(std::uint64_t key) {
    if (count_ == 0) return false;
    std::size_t i = home(key);
    while (slots_[i].first != key) {
      if (slots_[i].first == 0) return false;
      i = (i + 1) & mask_;
    }
    // Backward shift: move later entries of the cluster into the hole when
    // their home does not lie between the hole and them.
    for (std::size_t j = (i + 1) & mask_; slots_[j].first != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].first);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --count_;
    return true;
  }

  template <class F>
  void each(F&& f) const {
    for (const auto& [key, value] : slots_)
      if (key != 0) f(key, value);
  }

 private:
  std::size_t home(std::uint64_t key) const {
    // Blocks are 512-byte aligned: drop those bits, then Fibonacci hashing.
    return static_cast<std::size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }

  void grow() {
    std::vector<std::pair<std::uint64_t, V>> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 1024 : old.size() * 2;
    slots_.assign(capacity, {});
    mask_ = capacity - 1;
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    count_ = 0;
    for (const auto& [key, value] : old)
      if (key != 0) put(key, value);
  }

  std::vector<std::pair<std::uint64_t, V>> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t count_ = 0;
};

}  // namespace memlake
