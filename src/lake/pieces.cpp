// Pieces: byte ranges inside owned chunks. This file carves allocations out
// of free pieces, merges pieces back on free, keeps the fragment index (all
// free pieces of owned chunks, by size) and records allocations.
#include <cassert>

#include "lake/lake.hpp"

namespace memlake::lake {

void Lake::fragment_insert(Piece* p) {
  fragments_.insert(p);
  fragment_bytes_ += p->size;
}

void Lake::fragment_erase(Piece* p) {
  fragments_.erase(p);
  fragment_bytes_ -= p->size;
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
    auto* rest = new Piece{
        free_piece->offset + size, free_piece->size - size, free_piece->chunk, false, free_piece,
        free_piece->next};
    if (free_piece->next) free_piece->next->prev = rest;
    free_piece->next = rest;
    free_piece->size = size;
    fragment_insert(rest);
  }
  free_piece->allocated = true;
  ++c.live;
  return free_piece;
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
    delete p;
    p = prev;
  }
  if (Piece* next = p->next; next && !next->allocated) {
    fragment_erase(next);
    p->size += next->size;
    p->next = next->next;
    if (next->next) next->next->prev = p;
    delete next;
  }
  if (c.live == 0) {
    assert(p == c.pieces && p->size == c.size);
    unclaim(p->chunk);  // the chunk is whole again: back to the free pool
  } else {
    fragment_insert(p);
  }
}

void Lake::record(DevicePtr ptr, const Allocation& a) {
  allocations_.emplace(ptr, a);
  allocated_bytes_ += a.size;
}

// Places an allocation at the base of segment `s`, whose chunks covering
// [0, size) must all be free: it claims them and carves the leading piece of
// each. The tail of the last chunk becomes a fragment.
DevicePtr Lake::place_on_segment(SegmentId s, std::size_t size, std::size_t requested,
                                 std::uint32_t start) {
  Segment& seg = segments_[s];
  Allocation a{s, start, 0, nullptr, size, requested};
  std::size_t covered = 0;
  for (std::size_t i = start; i < seg.chunks.size() && covered < size; ++i) {
    ChunkId c = seg.chunks[i];
    claim(c, s, seg.offsets[i]);
    Chunk& chunk = chunks_[c];
    Piece* p = carve(chunk.pieces, std::min(chunk.size, size - covered));
    if (a.chunk_count++ == 0) a.piece = p;
    covered += chunk.size;
  }
  assert(covered >= size);
  remember_tail(s, start + a.chunk_count - 1);
  touch(s);
  const DevicePtr ptr = seg.va + seg.offsets[start];
  record(ptr, a);
  return ptr;
}

DevicePtr Lake::place_on_piece(Piece* fragment, std::size_t size, std::size_t requested) {
  fragment_erase(fragment);
  Piece* p = carve(fragment, size);
  SegmentId s = chunks_[p->chunk].owner;
  touch(s);
  const Segment& seg = segments_[s];
  std::uint32_t index = 0;
  while (seg.chunks[index] != p->chunk) ++index;
  DevicePtr ptr = piece_address(p);
  record(ptr, Allocation{s, index, 1, p, size, requested});
  return ptr;
}

// Places a block that starts in `tail` (the free last piece of chunk
// `chunk_index` of segment `s`, owned by `s`) and runs on into the following
// chunks, which must be free.
DevicePtr Lake::place_continuation(SegmentId s, std::uint32_t chunk_index, Piece* tail,
                                   std::size_t size) {
  fragment_erase(tail);
  const DevicePtr ptr = piece_address(tail);
  Allocation a{s, chunk_index, 1, nullptr, size, size};
  std::size_t covered = tail->size;
  a.piece = carve(tail, tail->size);
  const Segment& seg = segments_[s];
  for (std::size_t i = chunk_index + 1; covered < size; ++i) {
    ChunkId c = seg.chunks[i];
    claim(c, s, seg.offsets[i]);
    carve(chunks_[c].pieces, std::min(chunks_[c].size, size - covered));
    covered += chunks_[c].size;
    ++a.chunk_count;
  }
  remember_tail(s, a.first_chunk + a.chunk_count - 1);
  touch(s);
  record(ptr, a);
  return ptr;
}

void Lake::remember_tail(SegmentId s, std::size_t last_chunk_index) {
  ChunkId c = segments_[s].chunks[last_chunk_index];
  Piece* last = chunks_[c].pieces;
  while (last->next) last = last->next;
  if (last->allocated) return;
  if (recent_tails_.size() >= 16) recent_tails_.erase(recent_tails_.begin());
  recent_tails_.push_back(c);
}

void Lake::free(DevicePtr ptr) {
  auto it = allocations_.find(ptr);
  assert(it != allocations_.end());
  Allocation a = it->second;
  allocations_.erase(it);
  allocated_bytes_ -= a.size;
  if (a.chunk_count == 1) {
    free_piece(a.piece);
    return;
  }
  // Unclaiming chunks changes ownership only; the segment stays mapped.
  const std::vector<ChunkId>& ids = segments_[a.segment].chunks;
  free_piece(a.piece);
  for (std::uint32_t i = 1; i < a.chunk_count; ++i)
    free_piece(chunks_[ids[a.first_chunk + i]].pieces);
}

}  // namespace memlake::lake
