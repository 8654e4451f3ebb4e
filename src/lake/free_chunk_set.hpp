// The free chunks, ordered by (size, id) like a std::set of pairs, stored as
// one bitset of chunk ids per distinct chunk size. Claiming and freeing a
// chunk, the commonest change in the lake (a large block takes dozens), is
// a bit flip instead of a tree node; walks visit the chunks in (size, id)
// order as a set's would.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "lake/bit_scan.hpp"
#include "lake/types.hpp"

namespace memlake::lake {

class FreeChunkSet {
  struct Bits {
    std::vector<std::uint64_t> words;
    std::size_t count = 0;
  };

 public:
  using value_type = std::pair<std::size_t, ChunkId>;

 private:
  template <typename Category>
  struct IteratorTypes {
    using iterator_category = Category;
    using value_type = FreeChunkSet::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;
  };

 public:
  class const_iterator : public IteratorTypes<std::bidirectional_iterator_tag> {
   public:
    const_iterator() = default;
    reference operator*() const { return value_; }
    pointer operator->() const { return &value_; }
    const_iterator& operator++() {
      *this = set_->next_from(bucket_, value_.second + 1);
      return *this;
    }
    const_iterator& operator--() {
      *this = set_->prev_before(bucket_, value_.second);
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++*this;
      return old;
    }
    const_iterator operator--(int) {
      const_iterator old = *this;
      --*this;
      return old;
    }
    bool operator==(const const_iterator& o) const {
      return bucket_ == o.bucket_ && value_.second == o.value_.second;
    }

   private:
    friend class FreeChunkSet;
    using Bucket = std::map<std::size_t, Bits>::const_iterator;
    const_iterator(const FreeChunkSet* set, Bucket bucket, ChunkId id)
        : set_(set),
          bucket_(bucket),
          value_(bucket == set->buckets_.end() ? 0 : bucket->first, id) {}
    const FreeChunkSet* set_ = nullptr;
    Bucket bucket_;
    value_type value_{0, 0};
  };
  using iterator = const_iterator;
  // Largest first. Not std::reverse_iterator: that one dereferences a
  // temporary copy, and this iterator holds the element it points at.
  class const_reverse_iterator : public IteratorTypes<std::forward_iterator_tag> {
   public:
    const_reverse_iterator() = default;
    reference operator*() const { return *at_; }
    pointer operator->() const { return at_.operator->(); }
    const_reverse_iterator& operator++() {
      if (at_ == first_)
        done_ = true;
      else
        --at_;
      return *this;
    }
    bool operator==(const const_reverse_iterator& o) const {
      return done_ == o.done_ && (done_ || at_ == o.at_);
    }

   private:
    friend class FreeChunkSet;
    const_reverse_iterator(const_iterator at, const_iterator first, bool done)
        : at_(at), first_(first), done_(done) {}
    const_iterator at_, first_;
    bool done_ = true;
  };

  FreeChunkSet() = default;
  // The bucket cache points into this set's own buckets: not copied.
  FreeChunkSet(const FreeChunkSet& o) : buckets_(o.buckets_), count_(o.count_) {}
  FreeChunkSet& operator=(const FreeChunkSet& o) {
    buckets_ = o.buckets_;
    count_ = o.count_;
    last_ = nullptr;
    return *this;
  }

  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }
  const_iterator begin() const { return next_from(buckets_.begin(), 0); }
  const_iterator end() const { return {this, buckets_.end(), 0}; }
  const_reverse_iterator rbegin() const {
    if (empty()) return rend();
    return {std::prev(end()), begin(), false};
  }
  const_reverse_iterator rend() const { return {end(), end(), true}; }

  void emplace(std::size_t size, ChunkId id) {
    Bits& b = bucket(size);
    if (b.words.size() <= id / 64) b.words.resize(id / 64 + 1, 0);
    const std::uint64_t bit = std::uint64_t{1} << (id % 64);
    if ((b.words[id / 64] & bit) != 0) return;
    b.words[id / 64] |= bit;
    ++b.count;
    ++count_;
  }
  void erase(const value_type& v) {
    Bits* b = find_bucket(v.first);
    if (b == nullptr || !test(b->words, v.second)) return;
    b->words[v.second / 64] &= ~(std::uint64_t{1} << (v.second % 64));
    --count_;
    // An emptied bucket stays (walks skip it; there is one per chunk size
    // ever seen): a lake whose chunks are all one size empties and refills
    // it whenever its last free chunk is claimed, and dropping it cost a
    // tree node and a bitset each time.
    --b->count;
  }
  // The ids [lo, hi), all of `size` and all absent / present: a block's
  // chunks, made together, have consecutive ids, and a word of the bitset
  // changes at once.
  void insert_range(std::size_t size, ChunkId lo, ChunkId hi) {
    Bits& b = bucket(size);
    if (b.words.size() <= (hi - 1) / 64) b.words.resize((hi - 1) / 64 + 1, 0);
    const std::size_t added = update_range(b.words, lo, hi, /*set=*/true);
    b.count += added;
    count_ += added;
  }
  void erase_range(std::size_t size, ChunkId lo, ChunkId hi) {
    Bits* b = find_bucket(size);
    if (b == nullptr) return;
    const std::size_t removed =
        update_range(b->words, lo, std::min<std::size_t>(hi, b->words.size() * 64), /*set=*/false);
    b->count -= removed;
    count_ -= removed;
  }
  std::size_t count(const value_type& v) const {
    auto b = buckets_.find(v.first);
    return b != buckets_.end() && test(b->second.words, v.second) ? 1 : 0;
  }
  // First element not less than `v` / greater than `v`, in (size, id) order.
  const_iterator lower_bound(const value_type& v) const {
    auto b = buckets_.lower_bound(v.first);
    if (b != buckets_.end() && b->first == v.first) return next_from(b, v.second);
    return next_from(b, 0);
  }
  const_iterator upper_bound(const value_type& v) const {
    if (v.second == kNone) return next_from(buckets_.upper_bound(v.first), 0);
    return lower_bound({v.first, v.second + 1});
  }

 private:
  using Buckets = std::map<std::size_t, Bits>;

  // Sets or clears bits [lo, hi) of `words` (which holds them); returns how
  // many changed.
  static std::size_t update_range(std::vector<std::uint64_t>& words, std::size_t lo, std::size_t hi,
                                  bool set) {
    std::size_t changed = 0;
    while (lo < hi) {
      const std::size_t w = lo / 64;
      const std::size_t end = std::min(hi, (w + 1) * 64);
      const std::size_t n = end - lo;
      const std::uint64_t mask = (n == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1)
                                 << (lo % 64);
      const std::uint64_t before = words[w];
      words[w] = set ? before | mask : before & ~mask;
      changed += static_cast<std::size_t>(std::popcount(set ? mask & ~before : mask & before));
      lo = end;
    }
    return changed;
  }
  static bool test(const std::vector<std::uint64_t>& bits, ChunkId id) {
    return id / 64 < bits.size() && ((bits[id / 64] >> (id % 64)) & 1) != 0;
  }
  // The first set id >= `from` in bucket `b`, or else in the buckets after it.
  const_iterator next_from(Buckets::const_iterator b, std::size_t from) const {
    for (; b != buckets_.end(); ++b, from = 0) {
      if (b->second.count == 0) continue;
      if (const std::size_t id = first_set_from(b->second.words, from); id != kNoBit)
        return {this, b, static_cast<ChunkId>(id)};
    }
    return end();
  }
  // The last set id < `before` in bucket `b` (b may be end()), or else in the
  // buckets before it.
  const_iterator prev_before(Buckets::const_iterator b, std::size_t before) const {
    if (b == buckets_.end()) {
      if (buckets_.empty()) return end();
      --b;
      before = b->second.words.size() * 64;
    }
    for (;;) {
      if (const std::size_t id =
              b->second.count == 0 ? kNoBit : last_set_before(b->second.words, before);
          id != kNoBit)
        return {this, b, static_cast<ChunkId>(id)};
      if (b == buckets_.begin()) return end();
      --b;
      before = b->second.words.size() * 64;
    }
  }

  // Most chunks have one size: the bucket of the last size asked for is kept
  // (buckets are never erased, so the pointer stays good).
  Bits& bucket(std::size_t size) {
    if (last_ == nullptr || last_size_ != size) {
      last_ = &buckets_[size];
      last_size_ = size;
    }
    return *last_;
  }
  Bits* find_bucket(std::size_t size) {
    if (last_ != nullptr && last_size_ == size) return last_;
    auto it = buckets_.find(size);
    if (it == buckets_.end()) return nullptr;
    last_ = &it->second;
    last_size_ = size;
    return last_;
  }

  Buckets buckets_;
  std::size_t count_ = 0;
  Bits* last_ = nullptr;
  std::size_t last_size_ = 0;
};

}  // namespace memlake::lake
