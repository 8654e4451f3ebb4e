// One segment's runs of free chunk slots, first slot -> number of slots, as
// a sorted array: a segment holds a few runs to a few hundred, and every
// take and give-back of a chunk updates the runs of each segment mapping it;
// a binary search and a short move over contiguous memory cost less than a
// tree's rebalancing and pointer chasing.
// The interface is the subset of std::map the lake uses. Inserting or
// erasing invalidates the iterators after the place it happens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

namespace memlake::lake {

class SlotRuns {
 public:
  using value_type = std::pair<std::uint32_t, std::uint32_t>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  iterator begin() { return runs_.begin(); }
  iterator end() { return runs_.end(); }
  const_iterator begin() const { return runs_.begin(); }
  const_iterator end() const { return runs_.end(); }
  bool empty() const { return runs_.empty(); }
  std::size_t size() const { return runs_.size(); }
  void clear() { runs_.clear(); }

  // First run starting at or after `first`, or after it.
  iterator lower_bound(std::uint32_t first) {
    return std::lower_bound(runs_.begin(), runs_.end(), first, starts_before);
  }
  iterator upper_bound(std::uint32_t first) {
    return std::upper_bound(runs_.begin(), runs_.end(), first,
                            [](std::uint32_t k, const value_type& r) { return k < r.first; });
  }
  iterator find(std::uint32_t first) {
    auto it = lower_bound(first);
    return it != runs_.end() && it->first == first ? it : runs_.end();
  }
  std::uint32_t at(std::uint32_t first) const {
    auto it = std::lower_bound(runs_.begin(), runs_.end(), first, starts_before);
    if (it == runs_.end() || it->first != first) throw std::out_of_range("SlotRuns::at");
    return it->second;
  }
  // Runs never start at the same slot: the caller erased any run there.
  iterator emplace(std::uint32_t first, std::uint32_t count) {
    return runs_.insert(lower_bound(first), {first, count});
  }
  iterator erase(iterator it) { return runs_.erase(it); }
  bool operator==(const SlotRuns&) const = default;

 private:
  static bool starts_before(const value_type& run, std::uint32_t slot) { return run.first < slot; }
  std::vector<value_type> runs_;
};

}  // namespace memlake::lake
