// Placing a block at a given address. A graph pool put back to a checkpoint
// (PyTorch's CUDA graph trees) takes its blocks again where they were: the
// pool's ranges stay mapped for its life, so each address still lies in the
// range the block was placed through, and what must hold is that the bytes
// under it are free again. The block takes them through that range whoever
// owns their chunks now, as a borrowed end does.
#include <algorithm>
#include <cassert>

#include "lake/lake.hpp"

namespace memlake::lake {

Piece* Lake::free_piece_over(ChunkId c, std::size_t from, std::size_t to) const {
  for (Piece* p = use_[c].pieces; p; p = p->next)
    if (p->offset <= from && to <= p->offset + p->size) return p->allocated ? nullptr : p;
  return nullptr;
}

// Splits [offset, offset + size) of its chunk out of a free piece that is not
// in the fragment index and allocates it; what lies before and after stays
// free, as fragments.
Piece* Lake::carve_at(Piece* free_piece, std::size_t offset, std::size_t size) {
  assert(!free_piece->allocated && free_piece->offset <= offset &&
         offset + size <= free_piece->offset + free_piece->size);
  if (offset > free_piece->offset) {
    Piece* rest = new_piece({offset, free_piece->offset + free_piece->size - offset,
                             free_piece->chunk, false, free_piece, free_piece->next});
    if (free_piece->next) free_piece->next->prev = rest;
    free_piece->next = rest;
    free_piece->size = offset - free_piece->offset;
    fragments_.insert(free_piece);
    free_piece = rest;
  }
  return carve(free_piece, size);
}

// Calls `each(slot, chunk, from, take)` for the chunks under a block of
// `size` bytes starting `offset` bytes into slot `first` of `s`, while it
// returns true; false when the range ends first or `each` refuses.
template <class F>
static bool for_each_chunk_under(const SegmentTable& table, SegmentId s, std::uint32_t first,
                                 std::size_t offset, std::size_t size, const ChunkPool& pool,
                                 F&& each) {
  std::size_t covered = 0;
  for (std::uint32_t i = first; covered < size; ++i) {
    if (i >= table[s].chunks.size()) return false;
    const ChunkId c = table[s].chunks[i];
    const std::size_t from = i == first ? offset : 0;
    const std::size_t take = std::min(pool.size(c) - from, size - covered);
    if (!each(i, c, from, take)) return false;
    covered += take;
  }
  return true;
}

Placed Lake::place_at(DevicePtr ptr, std::size_t size) {
  SegmentId s;
  std::uint32_t first;
  std::size_t offset;
  if (size == 0 || !locate(ptr, &s, &first, &offset)) return {};
  // Every byte under the block must be free: in a free chunk, or in a free
  // piece of a chunk this lake owns through any range.
  const bool free = for_each_chunk_under(
      table_, s, first, offset, size, pool_,
      [&](std::uint32_t, ChunkId c, std::size_t from, std::size_t take) {
        if (pool_[c].reserve) return false;
        if (pool_.is_free(c)) return true;
        return use_[c].owner != kNone && free_piece_over(c, from, from + take) != nullptr;
      });
  if (!free) return {};
  Allocation a{.segment = s, .first_chunk = first, .chunk_count = 0, .size = size};
  std::uint32_t claimed = 0;
  for_each_chunk_under(table_, s, first, offset, size, pool_,
                       [&](std::uint32_t i, ChunkId c, std::size_t from, std::size_t take) {
                         Piece* piece;
                         if (pool_.is_free(c)) {
                           claim(c, s, table_[s].offsets[i]);
                           ++claimed;
                           piece = use_[c].pieces;
                         } else {
                           piece = free_piece_over(c, from, from + take);
                           fragments_.erase(piece);
                         }
                         Piece* p = carve_at(piece, from, take);
                         if (a.chunk_count++ == 0) a.piece = p;
                         return true;
                       });
  if (claimed != 0) table_.pin(s, &Segment::owned, true, claimed);
  const FenceId fence = record(ptr, a);  // pins `s` when it borrows an end
  table_.touch(s);
  return {ptr, size, Rung::remembered, fence};
}

}  // namespace memlake::lake
