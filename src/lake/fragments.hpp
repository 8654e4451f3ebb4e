// FragmentIndex: every free piece of every owned chunk, smallest first (by
// size, then chunk, then offset), with their bytes in all, in pieces that
// start their chunk (heads) and in pieces that end it (tails). A free piece
// alone in its chunk is never indexed: the chunk would be free instead.
//
// The pieces of chunks that hold a live small block are also indexed on
// their own: a small block placed there pins no chunk that small blocks did
// not pin already, where one placed in the tail of a large block's chunk
// keeps that chunk out of every stitch once the large block is freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

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
  explicit FragmentIndex(NodePool& nodes)
      : set_(Order{}, PoolAllocator<Piece*>(&nodes)),
        small_set_(Order{}, PoolAllocator<Piece*>(&nodes)) {}

  // A fragment's neighbours do not change while it is indexed (free
  // neighbours merge, and carving takes it out first), so whether it starts
  // or ends its chunk holds until it leaves.
  void insert(Piece* p) {
    set_.insert(p);
    if (small_blocks_in(p->chunk) != 0) small_set_.insert(p);
    bytes_ += p->size;
    if (!p->prev) head_bytes_ += p->size;
    if (!p->next) tail_bytes_ += p->size;
  }
  void erase(Piece* p) {
    set_.erase(p);
    if (small_blocks_in(p->chunk) != 0) small_set_.erase(p);
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
  // The smallest fragment of at least `size` bytes in a chunk that holds a
  // live small block, or nullptr.
  Piece* best_fit_beside_small(std::size_t size) const {
    Piece key{0, size, 0, false, nullptr, nullptr};
    auto it = small_set_.lower_bound(&key);
    return it == small_set_.end() ? nullptr : *it;
  }
  // A piece of a small block was allocated in chunk `c` (whose pieces start
  // at `first`; its free pieces are indexed) or freed from it (`first` is
  // nullptr when the chunk went back to the pool).
  void small_block_added(ChunkId c, Piece* first) {
    if (c >= small_blocks_.size()) small_blocks_.resize(c + 1, 0);
    if (small_blocks_[c]++ != 0) return;
    for (Piece* p = first; p; p = p->next)
      if (!p->allocated) small_set_.insert(p);
  }
  void small_block_removed(ChunkId c, Piece* first) {
    if (--small_blocks_[c] != 0) return;
    for (Piece* p = first; p; p = p->next)
      if (!p->allocated) small_set_.erase(p);
  }
  std::size_t largest() const { return set_.empty() ? 0 : (*set_.rbegin())->size; }
  bool contains(Piece* p) const { return set_.count(p) != 0; }
  Set::const_iterator begin() const { return set_.begin(); }
  Set::const_iterator end() const { return set_.end(); }
  std::size_t bytes() const { return bytes_; }
  std::size_t head_bytes() const { return head_bytes_; }
  std::size_t tail_bytes() const { return tail_bytes_; }
  // Live pieces of small blocks in chunk `c`.
  std::uint32_t small_blocks_in(ChunkId c) const {
    return c < small_blocks_.size() ? small_blocks_[c] : 0;
  }
  // For the invariant check.
  bool beside_small_contains(Piece* p) const { return small_set_.count(p) != 0; }
  std::size_t beside_small_count() const { return small_set_.size(); }

 private:
  Set set_;
  Set small_set_;                            // the fragments of chunks holding small blocks
  std::vector<std::uint32_t> small_blocks_;  // by chunk: live pieces of small blocks
  std::size_t bytes_ = 0;
  std::size_t head_bytes_ = 0;
  std::size_t tail_bytes_ = 0;
};

}  // namespace memlake::lake
