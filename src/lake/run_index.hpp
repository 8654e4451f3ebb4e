// The lake's index of free runs (every indexed segment's runs of free
// chunks), ordered by (bytes, segment, start slot) like a std::set of those
// keys, stored as one sorted array per length in units of the granularity,
// with a bitmap of the lengths that hold runs. Runs are whole chunks, so
// their lengths are few (multiples of the granularity) while the runs are
// many, and each take and give-back of a block updates the index once per
// segment mapping its chunks: arrays keep that upkeep to a binary search and
// a short move, where a tree would allocate a node per run. A length's array
// stays when it empties; walks step over empty ones with the bitmap.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

#include "lake/bit_scan.hpp"
#include "lake/types.hpp"

namespace memlake::lake {

struct RunKey {
  std::size_t bytes;
  SegmentId segment;
  std::uint32_t start;
  auto operator<=>(const RunKey&) const = default;
};

class RunIndex {
  static constexpr std::size_t kNoBucket = kNoBit;

 public:
  // `unit`: bytes per length step (the granularity); any run length works,
  // lengths within one step share an array.
  explicit RunIndex(std::size_t unit = 1) : unit_(unit == 0 ? 1 : unit) {}

  class const_iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = RunKey;
    using difference_type = std::ptrdiff_t;
    using pointer = const RunKey*;
    using reference = const RunKey&;

    const_iterator() = default;
    reference operator*() const { return index_->buckets_[bucket_][at_]; }
    pointer operator->() const { return &**this; }
    const_iterator& operator++() {
      if (++at_ == index_->buckets_[bucket_].size()) {
        bucket_ = index_->filled_from(bucket_ + 1);
        at_ = 0;
      }
      return *this;
    }
    // Not past begin(), as for the standard containers.
    const_iterator& operator--() {
      if (bucket_ == kNoBucket || at_ == 0) {
        bucket_ = index_->filled_before(bucket_ == kNoBucket ? index_->buckets_.size() : bucket_);
        at_ = index_->buckets_[bucket_].size();
      }
      --at_;
      return *this;
    }
    bool operator==(const const_iterator& o) const { return bucket_ == o.bucket_ && at_ == o.at_; }

   private:
    friend class RunIndex;
    const_iterator(const RunIndex* index, std::size_t bucket, std::size_t at)
        : index_(index), bucket_(bucket), at_(at) {}
    const RunIndex* index_ = nullptr;
    std::size_t bucket_ = kNoBucket;  // kNoBucket: end()
    std::size_t at_ = 0;
  };

  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }
  const_iterator begin() const { return {this, filled_from(0), 0}; }
  const_iterator end() const { return {this, kNoBucket, 0}; }
  std::size_t largest_bytes() const {
    const std::size_t b = filled_before(buckets_.size());
    return b == kNoBucket ? 0 : buckets_[b].back().bytes;
  }

  void insert(const RunKey& k) {
    const std::size_t b = bucket_of(k.bytes);
    if (b >= buckets_.size()) {
      buckets_.resize(b + 1);
      filled_.resize(b / 64 + 1, 0);
    }
    std::vector<RunKey>& v = buckets_[b];
    auto it = std::lower_bound(v.begin(), v.end(), k);
    if (it != v.end() && *it == k) return;
    v.insert(it, k);
    filled_[b / 64] |= std::uint64_t{1} << (b % 64);
    ++count_;
  }
  void erase(const RunKey& k) {
    const std::size_t b = bucket_of(k.bytes);
    if (b >= buckets_.size()) return;
    std::vector<RunKey>& v = buckets_[b];
    auto it = std::lower_bound(v.begin(), v.end(), k);
    if (it == v.end() || *it != k) return;
    v.erase(it);
    if (v.empty()) filled_[b / 64] &= ~(std::uint64_t{1} << (b % 64));
    --count_;
  }
  std::size_t count(const RunKey& k) const {
    const std::size_t b = bucket_of(k.bytes);
    return b < buckets_.size() && std::binary_search(buckets_[b].begin(), buckets_[b].end(), k);
  }
  // The first run not less than `k`.
  const_iterator lower_bound(const RunKey& k) const {
    std::size_t b = bucket_of(k.bytes);
    if (b >= buckets_.size()) return end();
    const std::vector<RunKey>& v = buckets_[b];
    const auto at = static_cast<std::size_t>(std::lower_bound(v.begin(), v.end(), k) - v.begin());
    if (at < v.size()) return {this, b, at};
    return {this, filled_from(b + 1), 0};
  }

 private:
  std::size_t bucket_of(std::size_t bytes) const { return bytes / unit_; }
  // The first length at or after `b` / the last before `b` that holds runs,
  // or kNoBucket.
  std::size_t filled_from(std::size_t b) const { return first_set_from(filled_, b); }
  std::size_t filled_before(std::size_t b) const { return last_set_before(filled_, b); }

  std::size_t unit_;
  std::vector<std::vector<RunKey>> buckets_;  // by bytes / unit_
  std::vector<std::uint64_t> filled_;         // bit b: buckets_[b] holds runs
  std::size_t count_ = 0;
};

}  // namespace memlake::lake
