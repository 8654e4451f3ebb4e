// Pieces: byte ranges inside owned chunks. This file places blocks on
// ranges and pieces, carves allocations out of free pieces, merges pieces
// back on free, takes chunks from the pool and gives them back, and records
// allocations.
#include <algorithm>
#include <cassert>
#include <span>

#include "lake/lake.hpp"

namespace memlake::lake {

DevicePtr Lake::piece_address(const Piece* p) const {
  const ChunkUse& u = use_[p->chunk];
  return table_[u.owner].va + u.owner_offset + p->offset;
}

void Lake::claim(ChunkId id, SegmentId s, std::size_t offset_in_segment) {
  ChunkUse& u = use_[id];
  assert(pool_.is_free(id) && u.live == 0 && u.pieces == nullptr);
  pool_.take(id, client_);
  table_.note_chunk_change(id);
  table_.rehome(s, id);
  if (table_[s].reserve) table_.dissolve_reserve(s);
  u.owner = s;
  u.owner_offset = offset_in_segment;
  u.pieces = new_piece({0, pool_.size(id), id, false, nullptr, nullptr});
}

// The chunk's last live piece is gone: it is whole and free again.
SegmentId Lake::unclaim(ChunkId id) {
  ChunkUse& u = use_[id];
  assert(u.live == 0 && u.pieces && u.pieces->next == nullptr);
  delete_piece(u.pieces);
  u.pieces = nullptr;
  const SegmentId owner = u.owner;
  u.owner = kNone;
  pool_.give_back(id);
  table_.note_chunk_change(id);
  return owner;
}

// One pool operation and one note per run instead of one per chunk: a
// block of a few GiB is hundreds of chunks, and a training step takes and
// gives back the same ones every time. A chunk given back whole keeps its
// piece aside (spare_), already describing the whole chunk allocated, so
// that neither the give-back nor the next take of it whole touches it (a
// take of a chunk in pieces gets a node just freed, still in cache).
Piece* Lake::claim_whole(SegmentId s, std::uint32_t first, std::uint32_t count, FenceId* fence) {
  Segment& seg = table_[s];
  const std::span<const ChunkId> ids(seg.chunks.data() + first, count);
  pool_.take_all(ids, client_);
  table_.note_run_change(ids, s);
  if (seg.reserve) table_.dissolve_reserve(s);
  for (std::uint32_t k = 0; k < count; ++k) {
    const ChunkId c = ids[k];
    ChunkUse& u = use_[c];
    assert(u.live == 0 && u.pieces == nullptr);
    u.owner = s;
    u.owner_offset = seg.offsets[first + k];
    u.live = 1;
    *fence = std::max(*fence, u.fence);
    if (Piece* spare = spare_[c]) {
      spare_[c] = nullptr;
      u.pieces = spare;
    } else {
      u.pieces = new_piece({0, pool_.size(c), c, true, nullptr, nullptr});
    }
  }
  return use_[ids[0]].pieces;
}

void Lake::unclaim_whole(SegmentId s, std::uint32_t first, std::uint32_t count, FenceId fence) {
  const ChunkId* chunks = table_[s].chunks.data() + first;
  for (std::uint32_t n = 0; n < count; ++n) {
    const ChunkId c = chunks[n];
    assert(held_whole_by(c, s));
    ChunkUse& u = use_[c];
    u.fence = std::max(u.fence, fence);
    if (spare_[c] == nullptr)
      spare_[c] = u.pieces;
    else
      delete_piece(u.pieces);
    u.pieces = nullptr;
    u.live = 0;
    u.owner = kNone;
  }
  const std::span<const ChunkId> ids(chunks, count);
  pool_.give_back_all(ids);
  table_.note_run_change(ids, kNone);
}

// Splits `size` bytes off the front of a free piece that is not in the
// fragment index; the rest (if any) becomes a fragment. Returns the
// allocated front piece.
Piece* Lake::carve(Piece* free_piece, std::size_t size) {
  assert(!free_piece->allocated && size <= free_piece->size);
  if (size < free_piece->size) {
    Piece* rest = new_piece({free_piece->offset + size, free_piece->size - size, free_piece->chunk,
                             false, free_piece, free_piece->next});
    if (free_piece->next) free_piece->next->prev = rest;
    free_piece->next = rest;
    free_piece->size = size;
    fragments_.insert(rest);
  }
  free_piece->allocated = true;
  ++use_[free_piece->chunk].live;
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
  fragments_.insert(free_piece);
  ++use_[free_piece->chunk].live;
  return back;
}

SegmentId Lake::free_piece(Piece* p) {
  ChunkUse& u = use_[p->chunk];
  assert(p->allocated && u.live > 0);
  p->allocated = false;
  --u.live;
  if (Piece* prev = p->prev; prev && !prev->allocated) {
    fragments_.erase(prev);
    prev->size += p->size;
    prev->next = p->next;
    if (p->next) p->next->prev = prev;
    delete_piece(p);
    p = prev;
  }
  if (Piece* next = p->next; next && !next->allocated) {
    fragments_.erase(next);
    p->size += next->size;
    p->next = next->next;
    if (next->next) next->next->prev = p;
    delete_piece(next);
  }
  if (u.live == 0) {
    assert(p == u.pieces && p->size == pool_.size(p->chunk));
    return unclaim(p->chunk);  // the chunk is whole again: back to the pool
  }
  fragments_.insert(p);
  return kNone;
}

// Enters the allocation; returns the newest fence its chunks were freed under.
FenceId Lake::record(DevicePtr ptr, const Allocation& a, const FenceId* known) {
  FenceId fence = known ? *known : FenceId{};
  const std::vector<ChunkId>& ids = table_[a.segment].chunks;
  const bool small = a.size <= options_.small_max;
  if (small || !known) {
    for (std::uint32_t i = 0; i < a.chunk_count; ++i) {
      const ChunkId c = ids[a.first_chunk + i];
      if (!known) fence = std::max(fence, use_[c].fence);
      if (small) fragments_.small_block_added(c, use_[c].pieces);
    }
  }
  Allocation entry = a;
  entry.grows = a.size > options_.small_max && grows_a_freed_block(a.size);
  // A chunk's owner stays while it holds a live piece: the free reads this
  // instead of the two chunks' entries.
  entry.borrows = borrows(a);
  allocations_.emplace(ptr, entry);
  allocated_bytes_ += a.size;
  count_size(a.size, +1);
  if (entry.borrows) table_.pin(a.segment, &Segment::borrowed, true);
  return fence;
}

bool Lake::borrows(const Allocation& a) const {
  const ChunkId last = table_[a.segment].chunks[a.first_chunk + a.chunk_count - 1];
  return use_[a.piece->chunk].owner != a.segment || use_[last].owner != a.segment;
}

// Places a block on range `s` from chunk slot `first` on. With `tail` (the
// free last piece of that slot's chunk, owned by `s`) the block starts inside
// it, continuing the block before; with `lead`, `lead` bytes into that
// slot's chunk, which must be free and which the block runs to the end of
// (see lead_for); otherwise it starts at the slot's chunk.
// The slots it runs over must hold free chunks, except that the last may be a
// chunk whose leading piece is free and covers the rest (`s` owns it when a
// block freed while small blocks still sit in its tail comes back to its
// place). `tail` and that last chunk may be owned by another range: the
// block borrows them (the borrowed-ends rung).
// The tail of the last chunk becomes a fragment.
Placed Lake::place_span(Rung rung, SegmentId s, std::uint32_t first, Piece* tail, std::size_t size,
                        std::size_t lead) {
  Segment& seg = table_[s];
  Allocation a{.segment = s, .first_chunk = first, .chunk_count = 0, .size = size};
  std::size_t covered = 0;
  std::uint32_t claimed = 0;  // chunks taken from the pool: `s` owns them
  FenceId fence;              // the newest its chunks were freed under
  DevicePtr ptr = seg.va + seg.offsets[first];
  std::size_t i = first;
  if (tail) {
    fence = use_[tail->chunk].fence;
    fragments_.erase(tail);
    ptr = seg.va + seg.offsets[first] + tail->offset;  // `s` may borrow it
    covered = tail->size;
    a.piece = carve(tail, std::min(tail->size, size));
    a.chunk_count = 1;
    ++i;
  } else if (lead != 0) {
    const ChunkId c = seg.chunks[i];
    assert(pool_.is_free(c) && lead < pool_.size(c) && size >= pool_.size(c) - lead);
    claim(c, s, seg.offsets[i]);
    fence = use_[c].fence;
    ++claimed;
    ptr += lead;
    covered = pool_.size(c) - lead;
    a.piece = carve_back(use_[c].pieces, covered);
    a.chunk_count = 1;
    ++i;
  }
  for (; covered < size; ++i) {
    assert(i < seg.chunks.size());
    const ChunkId c = seg.chunks[i];
    const std::size_t take = std::min(pool_.size(c), size - covered);
    if (pool_.is_free(c) && take == pool_.size(c)) {
      // Free chunks the block covers whole, in a row: taken together.
      std::uint32_t n = 1;
      std::size_t bytes = take;
      while (i + n < seg.chunks.size()) {
        const ChunkId next = seg.chunks[i + n];
        if (!pool_.is_free(next) || pool_.size(next) > size - covered - bytes) break;
        bytes += pool_.size(next);
        ++n;
      }
      Piece* p = claim_whole(s, static_cast<std::uint32_t>(i), n, &fence);
      if (a.chunk_count == 0) a.piece = p;
      a.chunk_count += n;
      claimed += n;
      covered += bytes;
      i += n - 1;
      continue;
    }
    if (pool_.is_free(c)) {
      claim(c, s, seg.offsets[i]);
      ++claimed;
    } else {
      assert(use_[c].owner != kNone && !use_[c].pieces->allocated && use_[c].pieces->size >= take);
      fragments_.erase(use_[c].pieces);
    }
    fence = std::max(fence, use_[c].fence);
    Piece* p = carve(use_[c].pieces, take);
    if (a.chunk_count++ == 0) a.piece = p;
    covered += take;
  }
  if (claimed != 0) table_.pin(s, &Segment::owned, true, claimed);
  remember_tail(s, a.first_chunk + a.chunk_count - 1);
  record(ptr, a, &fence);  // pins `s` when it borrows both ends and owns nothing
  table_.touch(s);
  return {ptr, size, rung, fence};
}

// A block placed on free chunks leaves the slack of its last granule free
// at one end: after it, a free tail, where the next block may continue or a
// borrowed-ends range start; before it, a free head, where such a range may
// end. Blocks that all start their chunks leave only tails, and a range
// across a tail then maps a new granule to end in: the slack goes before the
// block while heads hold fewer free bytes than tails.
std::size_t Lake::lead_for(SegmentId s, std::uint32_t first, std::size_t size) const {
  if (fragments_.head_bytes() >= fragments_.tail_bytes()) return 0;
  const Segment& seg = table_[s];
  std::size_t covered = 0;
  for (std::uint32_t i = first; covered < size; ++i) {
    if (i == seg.chunks.size() || !table_.offers(s, seg.chunks[i])) return 0;
    covered += pool_.size(seg.chunks[i]);
  }
  const std::size_t lead = (covered - size) / kAlignment * kAlignment;
  return lead < pool_.size(seg.chunks[first]) ? lead : 0;
}

// A block placed in the free head of a chunk (the piece before its first
// live one) takes the head's end, so what is left still starts the chunk:
// a head that another block can borrow, not a gap between two live pieces
// that only a smaller block fits.
Placed Lake::place_on_piece(Rung rung, Piece* fragment, std::size_t size) {
  fragments_.erase(fragment);
  const bool head = fragment->prev == nullptr && fragment->next != nullptr;
  Piece* p = head && size < fragment->size ? carve_back(fragment, size) : carve(fragment, size);
  const SegmentId s = use_[p->chunk].owner;
  table_.touch(s);
  const Segment& seg = table_[s];
  std::uint32_t index = 0;
  while (seg.chunks[index] != p->chunk) ++index;
  const DevicePtr ptr = piece_address(p);
  const FenceId fence =
      record(ptr, Allocation{.segment = s, .first_chunk = index, .piece = p, .size = size});
  return {ptr, size, rung, fence};
}

Piece* Lake::free_tail(ChunkId c) const {
  Piece* last = use_[c].pieces;
  while (last->next) last = last->next;
  return last->allocated ? nullptr : last;
}

Piece* Lake::free_tail_before(SegmentId s, std::uint32_t slot) const {
  if (slot == 0) return nullptr;
  const ChunkId c = table_[s].chunks[slot - 1];
  return use_[c].owner == s ? free_tail(c) : nullptr;
}

void Lake::remember_tail(SegmentId s, std::size_t last_chunk_index) {
  const ChunkId c = table_[s].chunks[last_chunk_index];
  if (!free_tail(c)) return;
  if (recent_tails_.size() >= 16) recent_tails_.erase(recent_tails_.begin());
  recent_tails_.push_back(c);
}

void Lake::free(DevicePtr ptr, FenceId fence, bool others_wait) {
  auto it = allocations_.find(ptr);
  assert(it != allocations_.end());
  const Allocation a = it->second;
  Segment& seg = table_[a.segment];
  const std::vector<ChunkId>& ids = seg.chunks;
  if (fence > seg.fence) seg.fence = fence;
  // The fence every chunk of the block keeps from now on (none: the
  // streams that could get it have waited).
  const FenceId chunk_fence = others_wait ? fence : FenceId{};
  allocations_.erase(it);
  allocated_bytes_ -= a.size;
  count_size(a.size, -1);
  if (a.size > options_.small_max) freed_[freed_next_++ % freed_.size()] = {a.size, a.grows};
  if (a.borrows) table_.pin(a.segment, &Segment::borrowed, false);
  // Giving chunks back changes who holds them only; the range stays mapped.
  // Its own chunks unpin it once; borrowed ends unpin their owners.
  std::uint32_t given_back = 0;
  auto release = [&](Piece* p) {
    const SegmentId owner = free_piece(p);
    if (owner == a.segment)
      ++given_back;
    else if (owner != kNone)
      table_.pin(owner, &Segment::owned, false);
  };
  auto release_chunk = [&](std::uint32_t i) {
    const ChunkId c = ids[a.first_chunk + i];
    use_[c].fence = std::max(use_[c].fence, chunk_fence);
    release(i == 0 ? a.piece : use_[c].pieces);
    return c;
  };
  if (a.size <= options_.small_max) {
    for (std::uint32_t i = 0; i < a.chunk_count; ++i) {
      const ChunkId c = release_chunk(i);
      fragments_.small_block_removed(c, use_[c].pieces);
    }
  } else {
    // The chunks between the first and the last are the block's whole; the
    // ends are when the block fills them and its range owns them. Told by
    // the block's bounds, not by reading each chunk's pieces.
    const std::uint32_t last = a.chunk_count - 1;
    const ChunkId first_id = ids[a.first_chunk], last_id = ids[a.first_chunk + last];
    const std::size_t start = ptr - seg.va;  // the block's offset in its range
    const std::size_t end = start + a.size;
    const bool first_whole = use_[first_id].owner == a.segment &&
                             start == seg.offsets[a.first_chunk] &&
                             (last > 0 || a.size == pool_.size(first_id));
    const bool last_whole =
        last == 0 ? first_whole
                  : use_[last_id].owner == a.segment &&
                        end == seg.offsets[a.first_chunk + last] + pool_.size(last_id);
    const std::uint32_t from = first_whole ? 0 : 1;
    const std::uint32_t to = last_whole ? a.chunk_count : last;
    if (!first_whole) release_chunk(0);
    if (to > from) {
      unclaim_whole(a.segment, a.first_chunk + from, to - from, chunk_fence);
      given_back += to - from;
    }
    if (last > 0 && !last_whole) release_chunk(last);
  }
  if (given_back != 0) table_.pin(a.segment, &Segment::owned, false, given_back);
  if (!frees_may_lag()) table_.catch_up();
}

}  // namespace memlake::lake
