// The lake's index of free runs (every indexed segment's runs of free
// chunks), ordered by (bytes, segment, start slot) like a std::set of those
// keys, stored as one sorted array of (segment, start) per distinct length.
// Runs are whole chunks, so their lengths are few (multiples of the
// granularity) while the runs are many; each claim and free of a block
// updates the index once per segment mapping its chunks, and a tree node per
// run made that a fifth of the allocation path's instructions. Lookups and
// walks see the same runs in the same order as the set did. A length's
// array stays when it empties (lengths come back, and reallocating it was a
// tenth of the index's cost); walks step over empty ones.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "lake/types.hpp"

namespace memlake::lake {

struct RunKey {
  std::size_t bytes;
  SegmentId segment;
  std::uint32_t start;
  auto operator<=>(const RunKey&) const = default;
};

class RunIndex {
  using Place = std::pair<SegmentId, std::uint32_t>;  // (segment, start), sorted
  using Buckets = std::map<std::size_t, std::vector<Place>>;

 public:
  class const_iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = RunKey;
    using difference_type = std::ptrdiff_t;
    using pointer = const RunKey*;
    using reference = const RunKey&;

    const_iterator() = default;
    reference operator*() const { return key_; }
    pointer operator->() const { return &key_; }
    const_iterator& operator++() {
      if (++at_ == bucket_->second.size()) {
        bucket_ = RunIndex::first_filled(std::next(bucket_), end_);
        at_ = 0;
      }
      load();
      return *this;
    }
    // Not past begin(), as for the standard containers.
    const_iterator& operator--() {
      if (at_ == 0) {
        do --bucket_;
        while (bucket_->second.empty());
        at_ = bucket_->second.size();
      }
      --at_;
      load();
      return *this;
    }
    bool operator==(const const_iterator& o) const { return bucket_ == o.bucket_ && at_ == o.at_; }

   private:
    friend class RunIndex;
    const_iterator(Buckets::const_iterator bucket, Buckets::const_iterator end, std::size_t at)
        : bucket_(bucket), end_(end), at_(at) {
      load();
    }
    void load() {
      if (bucket_ == end_) return;
      const Place& p = bucket_->second[at_];
      key_ = {bucket_->first, p.first, p.second};
    }
    Buckets::const_iterator bucket_, end_;
    std::size_t at_ = 0;
    RunKey key_{0, 0, 0};
  };

  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }
  const_iterator begin() const {
    return {first_filled(buckets_.begin(), buckets_.end()), buckets_.end(), 0};
  }
  const_iterator end() const { return {buckets_.end(), buckets_.end(), 0}; }
  std::size_t largest_bytes() const {
    for (auto b = buckets_.rbegin(); b != buckets_.rend(); ++b)
      if (!b->second.empty()) return b->first;
    return 0;
  }

  void insert(const RunKey& k) {
    std::vector<Place>& v = buckets_[k.bytes];
    const Place p{k.segment, k.start};
    auto it = std::lower_bound(v.begin(), v.end(), p);
    if (it != v.end() && *it == p) return;
    v.insert(it, p);
    ++count_;
  }
  void erase(const RunKey& k) {
    auto b = buckets_.find(k.bytes);
    if (b == buckets_.end()) return;
    std::vector<Place>& v = b->second;
    const Place p{k.segment, k.start};
    auto it = std::lower_bound(v.begin(), v.end(), p);
    if (it == v.end() || *it != p) return;
    v.erase(it);
    --count_;
  }
  std::size_t count(const RunKey& k) const {
    auto b = buckets_.find(k.bytes);
    if (b == buckets_.end()) return 0;
    return std::binary_search(b->second.begin(), b->second.end(), Place{k.segment, k.start});
  }
  // The first run not less than `k`.
  const_iterator lower_bound(const RunKey& k) const {
    auto b = buckets_.lower_bound(k.bytes);
    std::size_t at = 0;
    if (b != buckets_.end() && b->first == k.bytes) {
      const std::vector<Place>& v = b->second;
      at = static_cast<std::size_t>(
          std::lower_bound(v.begin(), v.end(), Place{k.segment, k.start}) - v.begin());
      if (at == v.size()) {
        ++b;
        at = 0;
      }
    }
    if (at == 0) b = first_filled(b, buckets_.end());
    return {b, buckets_.end(), at};
  }

 private:
  static Buckets::const_iterator first_filled(Buckets::const_iterator b,
                                              Buckets::const_iterator end) {
    while (b != end && b->second.empty()) ++b;
    return b;
  }

  Buckets buckets_;
  std::size_t count_ = 0;
};

}  // namespace memlake::lake
