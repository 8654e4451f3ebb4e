// FragmentIndex: every free piece of every owned chunk, smallest first (by
// size, then chunk, then offset), with their bytes in all, in pieces that
// start their chunk (heads) and in pieces that end it (tails). A free piece
// alone in its chunk is never indexed: the chunk would be free instead.
#pragma once

#include <cstddef>
#include <set>

#include "common/node_pool.hpp"
#include "lake/types.hpp"

namespace memlake::lake {

class FragmentIndex {
  struct Order {
    bool operator()(const Piece* a, const Piece* b) const {
      if (a->size != b->size) return a->size < b->size;
      if (a->chunk != b->chunk) return a->chunk < b->chunk;
      return a->offset < b->offset;
    }
  };
  using Set = std::set<Piece*, Order, PoolAllocator<Piece*>>;

 public:
  explicit FragmentIndex(NodePool& nodes) : set_(Order{}, PoolAllocator<Piece*>(&nodes)) {}

  // A fragment's neighbours do not change while it is indexed (free
  // neighbours merge, and carving takes it out first), so whether it starts
  // or ends its chunk holds until it leaves.
  void insert(Piece* p) {
    set_.insert(p);
    bytes_ += p->size;
    if (!p->prev) head_bytes_ += p->size;
    if (!p->next) tail_bytes_ += p->size;
  }
  void erase(Piece* p) {
    set_.erase(p);
    bytes_ -= p->size;
    if (!p->prev) head_bytes_ -= p->size;
    if (!p->next) tail_bytes_ -= p->size;
  }
  // The smallest fragment of at least `size` bytes, or nullptr.
  Piece* best_fit(std::size_t size) const {
    Piece key{0, size, 0, false, nullptr, nullptr};
    auto it = set_.lower_bound(&key);
    return it == set_.end() ? nullptr : *it;
  }
  std::size_t largest() const { return set_.empty() ? 0 : (*set_.rbegin())->size; }
  bool contains(Piece* p) const { return set_.count(p) != 0; }
  Set::const_iterator begin() const { return set_.begin(); }
  Set::const_iterator end() const { return set_.end(); }
  std::size_t bytes() const { return bytes_; }
  std::size_t head_bytes() const { return head_bytes_; }
  std::size_t tail_bytes() const { return tail_bytes_; }

 private:
  Set set_;
  std::size_t bytes_ = 0;
  std::size_t head_bytes_ = 0;
  std::size_t tail_bytes_ = 0;
};

}  // namespace memlake::lake
