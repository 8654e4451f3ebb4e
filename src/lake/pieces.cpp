// Pieces: byte ranges inside owned chunks. This file carves allocations out
// of free pieces, merges pieces back on free, keeps the fragment index (all
// free pieces of owned chunks, by size) and records allocations.
#include <algorithm>
#include <cassert>

#include "lake/lake.hpp"

namespace memlake::lake {

// A fragment's neighbours do not change while it is indexed (free
// neighbours merge, and carving takes it out first), so whether it starts
// or ends its chunk holds until it leaves.
void Lake::fragment_insert(Piece* p) {
  fragments_.insert(p);
  fragment_bytes_ += p->size;
  if (!p->prev) head_fragment_bytes_ += p->size;
  if (!p->next) tail_fragment_bytes_ += p->size;
}

void Lake::fragment_erase(Piece* p) {
  fragments_.erase(p);
  fragment_bytes_ -= p->size;
  if (!p->prev) head_fragment_bytes_ -= p->size;
  if (!p->next) tail_fragment_bytes_ -= p->size;
}

DevicePtr Lake::piece_address(const Piece* p) const {
  const Chunk& c = chunks_[p->chunk];
  return segments_[c.owner].va + c.owner_offset + p->offset;
}

// Splits `size` bytes off the front of a free piece that is not in the
// fragment index; the rest (if any) becomes a fragment. Returns the
// allocated front piece.
Piece* Lake::carve(Piece* free_piece, std::size_t size) {
  assert(!free_piece->allocated && size <= free_piece->size);
  Chunk& c = chunks_[free_piece->chunk];
  if (size < free_piece->size) {
    Piece* rest = new_piece({free_piece->offset + size, free_piece->size - size, free_piece->chunk,
                             false, free_piece, free_piece->next});
    if (free_piece->next) free_piece->next->prev = rest;
    free_piece->next = rest;
    free_piece->size = size;
    fragment_insert(rest);
  }
  free_piece->allocated = true;
  ++c.live;
  return free_piece;
}

// Like carve(), from the back: the front stays a fragment.
Piece* Lake::carve_back(Piece* free_piece, std::size_t size) {
  assert(!free_piece->allocated && size < free_piece->size);
  Piece* back = new_piece({free_piece->offset + free_piece->size - size, size, free_piece->chunk,
                           true, free_piece, free_piece->next});
  if (free_piece->next) free_piece->next->prev = back;
  free_piece->next = back;
  free_piece->size -= size;
  fragment_insert(free_piece);
  ++chunks_[free_piece->chunk].live;
  return back;
}

// Cuts an allocated piece at byte `at`: two allocated pieces; returns the second.
Piece* Lake::split_piece(Piece* p, std::size_t at) {
  assert(p->allocated && at > 0 && at < p->size);
  Piece* second = new_piece({p->offset + at, p->size - at, p->chunk, true, p, p->next});
  if (p->next) p->next->prev = second;
  p->next = second;
  p->size = at;
  ++chunks_[p->chunk].live;
  return second;
}

void Lake::free_piece(Piece* p) {
  Chunk& c = chunks_[p->chunk];
  assert(p->allocated && c.live > 0);
  p->allocated = false;
  --c.live;
  if (Piece* prev = p->prev; prev && !prev->allocated) {
    fragment_erase(prev);
    prev->size += p->size;
    prev->next = p->next;
    if (p->next) p->next->prev = prev;
    delete_piece(p);
    p = prev;
  }
  if (Piece* next = p->next; next && !next->allocated) {
    fragment_erase(next);
    p->size += next->size;
    p->next = next->next;
    if (next->next) next->next->prev = p;
    delete_piece(next);
  }
  if (c.live == 0) {
    assert(p == c.pieces && p->size == c.size);
    unclaim(p->chunk);  // the chunk is whole again: back to the free pool
  } else {
    fragment_insert(p);
  }
}

void Lake::count_size(std::size_t size, int delta) {
  if (size <= options_.small_max) return;
  std::size_t& n = allocated_by_size_[size];
  n += static_cast<std::size_t>(delta);
  if (n == 0) allocated_by_size_.erase(size);
}

void Lake::record(DevicePtr ptr, const Allocation& a) {
  placed_fence_ = {};
  const std::vector<ChunkId>& ids = segments_[a.segment].chunks;
  for (std::uint32_t i = 0; i < a.chunk_count; ++i)
    placed_fence_ = std::max(placed_fence_, chunks_[ids[a.first_chunk + i]].fence);
  allocations_.emplace(ptr, a);
  allocated_bytes_ += a.size;
  count_size(a.size, +1);
  if (borrows(a)) pin(a.segment, &Segment::borrowed, true);
}

bool Lake::borrows(const Allocation& a) const {
  const ChunkId last = segments_[a.segment].chunks[a.first_chunk + a.chunk_count - 1];
  return chunks_[a.piece->chunk].owner != a.segment || chunks_[last].owner != a.segment;
}

// Places a block on segment `s` from chunk slot `first` on. With `tail` (the
// free last piece of that slot's chunk, owned by `s`) the block starts inside
// it, continuing the block before; with `lead`, `lead` bytes into that
// slot's chunk, which must be free and which the block runs to the end of
// (see lead_for); otherwise it starts at the slot's chunk.
// The slots it runs over must hold free chunks, except that the last may be a
// chunk whose leading piece is free and covers the rest (`s` owns it when a
// block freed while small blocks still sit in its tail comes back to its
// place). `tail` and that last chunk may be owned by another segment: the
// block borrows them (try_borrowed_ends).
// The tail of the last chunk becomes a fragment.
DevicePtr Lake::place_span(SegmentId s, std::uint32_t first, Piece* tail, std::size_t size,
                           std::size_t lead) {
  Segment& seg = segments_[s];
  if (seg.prepared) {
    seg.prepared = false;
    ++stats_.prestitch_hits.current;
  }
  Allocation a{s, first, 0, nullptr, size, size};
  std::size_t covered = 0;
  DevicePtr ptr = seg.va + seg.offsets[first];
  std::size_t i = first;
  if (tail) {
    fragment_erase(tail);
    ptr = seg.va + seg.offsets[first] + tail->offset;  // `s` may borrow it
    covered = tail->size;
    a.piece = carve(tail, std::min(tail->size, size));
    a.chunk_count = 1;
    ++i;
  } else if (lead != 0) {
    const ChunkId c = seg.chunks[i];
    Chunk& chunk = chunks_[c];
    assert(chunk.owner == kNone && lead < chunk.size && size >= chunk.size - lead);
    claim(c, s, seg.offsets[i]);
    ptr += lead;
    covered = chunk.size - lead;
    a.piece = carve_back(chunk.pieces, covered);
    a.chunk_count = 1;
    ++i;
  }
  for (; covered < size; ++i) {
    assert(i < seg.chunks.size());
    const ChunkId c = seg.chunks[i];
    Chunk& chunk = chunks_[c];
    const std::size_t take = std::min(chunk.size, size - covered);
    if (chunk.owner == kNone) {
      claim(c, s, seg.offsets[i]);
    } else {
      assert(!chunk.pieces->allocated && chunk.pieces->size >= take);
      fragment_erase(chunk.pieces);
    }
    Piece* p = carve(chunk.pieces, take);
    if (a.chunk_count++ == 0) a.piece = p;
    covered += take;
  }
  remember_tail(s, a.first_chunk + a.chunk_count - 1);
  record(ptr, a);  // pins `s` when it borrows both ends and owns nothing
  touch(s);
  return ptr;
}

// A block placed on free chunks leaves the slack of its last granule free
// at one end: after it, a free tail, where the next block may continue
// (try_continuation) or a stitched range start (try_borrowed_ends); before
// it, a free head, where a range that starts in a tail may end
// (try_borrowed_ends, try_run_between_pieces). Blocks that all start their
// chunks leave only tails, and a range across a tail then mapped a new
// granule to end in. The slack goes before the block while heads hold fewer
// free bytes than tails (pipeline sample, host backend, seeds 1-20:
// utilization mean 0.9836 -> 0.9868, seeds below 0.98 4 -> 1).
std::size_t Lake::lead_for(SegmentId s, std::uint32_t first, std::size_t size) const {
  if (head_fragment_bytes_ >= tail_fragment_bytes_) return 0;
  const Segment& seg = segments_[s];
  std::size_t covered = 0;
  for (std::uint32_t i = first; covered < size; ++i) {
    if (i == seg.chunks.size() || chunks_[seg.chunks[i]].owner != kNone) return 0;
    covered += chunks_[seg.chunks[i]].size;
  }
  const std::size_t lead = (covered - size) / kAlignment * kAlignment;
  return lead < chunks_[seg.chunks[first]].size ? lead : 0;
}

// A block placed in the free head of a chunk (the piece before its first
// live one) takes the head's end, so what is left still starts the chunk:
// a head that another block can borrow (try_borrowed_ends), not a gap
// between two live pieces that only a smaller block fits.
DevicePtr Lake::place_on_piece(Piece* fragment, std::size_t size, std::size_t requested) {
  fragment_erase(fragment);
  const bool head = fragment->prev == nullptr && fragment->next != nullptr;
  Piece* p = head && size < fragment->size ? carve_back(fragment, size) : carve(fragment, size);
  SegmentId s = chunks_[p->chunk].owner;
  touch(s);
  const Segment& seg = segments_[s];
  std::uint32_t index = 0;
  while (seg.chunks[index] != p->chunk) ++index;
  DevicePtr ptr = piece_address(p);
  record(ptr, Allocation{s, index, 1, p, size, requested});
  return ptr;
}

Piece* Lake::free_tail(ChunkId c) const {
  Piece* last = chunks_[c].pieces;
  while (last->next) last = last->next;
  return last->allocated ? nullptr : last;
}

Piece* Lake::free_tail_before(SegmentId s, std::uint32_t slot) const {
  if (slot == 0) return nullptr;
  const ChunkId c = segments_[s].chunks[slot - 1];
  return chunks_[c].owner == s ? free_tail(c) : nullptr;
}

void Lake::remember_tail(SegmentId s, std::size_t last_chunk_index) {
  ChunkId c = segments_[s].chunks[last_chunk_index];
  if (!free_tail(c)) return;
  if (recent_tails_.size() >= 16) recent_tails_.erase(recent_tails_.begin());
  recent_tails_.push_back(c);
}

DevicePtr Lake::split(DevicePtr ptr, std::size_t keep) {
  auto it = allocations_.find(ptr);
  assert(it != allocations_.end() && keep > 0 && keep < it->second.size && keep % kAlignment == 0);
  const Allocation a = it->second;
  if (borrows(a)) pin(a.segment, &Segment::borrowed, false);
  const std::vector<ChunkId>& ids = segments_[a.segment].chunks;
  // The piece holding byte `keep`, and where in it.
  std::uint32_t j = 0;
  std::size_t covered = 0;
  Piece* p = a.piece;
  while (covered + p->size <= keep) {
    covered += p->size;
    p = chunks_[ids[a.first_chunk + ++j]].pieces;
  }
  const std::size_t at = keep - covered;
  Allocation kept = a, rest = a;
  kept.chunk_count = at == 0 ? j : j + 1;
  kept.size = kept.requested = keep;
  rest.first_chunk = a.first_chunk + j;
  rest.chunk_count = a.chunk_count - j;
  rest.piece = at == 0 ? p : split_piece(p, at);
  rest.size = rest.requested = a.size - keep;
  it->second = kept;
  allocations_.emplace(ptr + keep, rest);
  count_size(a.size, -1);
  count_size(kept.size, +1);
  count_size(rest.size, +1);
  if (borrows(kept)) pin(kept.segment, &Segment::borrowed, true);
  if (borrows(rest)) pin(rest.segment, &Segment::borrowed, true);
  return ptr + keep;
}

void Lake::free(DevicePtr ptr, FenceId fence, bool others_wait) {
  auto it = allocations_.find(ptr);
  assert(it != allocations_.end());
  Allocation a = it->second;
  const std::vector<ChunkId>& ids = segments_[a.segment].chunks;
  if (fence > segments_[a.segment].fence) segments_[a.segment].fence = fence;
  if (fence && others_wait) {
    for (std::uint32_t i = 0; i < a.chunk_count; ++i) {
      FenceId& f = chunks_[ids[a.first_chunk + i]].fence;
      f = std::max(f, fence);
    }
  }
  allocations_.erase(it);
  allocated_bytes_ -= a.size;
  count_size(a.size, -1);
  if (borrows(a)) pin(a.segment, &Segment::borrowed, false);
  // Unclaiming chunks changes ownership only; the segment stays mapped.
  free_piece(a.piece);
  for (std::uint32_t i = 1; i < a.chunk_count; ++i)
    free_piece(chunks_[ids[a.first_chunk + i]].pieces);
  if (!frees_may_lag()) catch_up();
}

}  // namespace memlake::lake
