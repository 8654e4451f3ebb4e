// Remembered places: training repeats its requests step after step, so a
// large request is first offered the places that the same request had
// before. When a step repeats the last one, each request finds its place
// free again (the blocks before it in the step are where they were then),
// and the lake settles into a layout that maps nothing. Without this,
// best-fit choices over ranges that alias the same chunks drifted from step
// to step and stitched anew every time (tests/suites/test_repeat.cpp).
#include <algorithm>

#include "lake/lake.hpp"

namespace memlake::lake {

// A request is known by its size, by how many blocks of that size are
// allocated when it comes, and by the requests before it: in a repeated step
// all three are what they were at the same request last step. Size and count
// alone confused requests of one size in different places of a step: on a
// recorded fixed-shape GPT-2 step, the second logits buffer took the place
// of the third and the third stitched anew, every step.
Lake::PlaceKey Lake::place_key(std::size_t size, std::uint64_t history) const {
  auto it = allocated_by_size_.find(size);
  return {size, it == allocated_by_size_.end() ? 0 : it->second, history};
}

void Lake::remember_place(PlaceKey key, DevicePtr ptr) {
  // Shapes that never repeat (a new size every step) must not grow it
  // without bound; a repeating step refills it within one step.
  if (remembered_.size() >= kRememberedKeys && remembered_.count(key) == 0) remembered_.clear();
  std::vector<DevicePtr>& places = remembered_[key];
  if (auto it = std::find(places.begin(), places.end(), ptr); it != places.end())
    places.erase(it);
  else if (places.size() >= kRememberedPlaces)
    places.erase(places.begin());
  places.push_back(ptr);  // newest last
}

// Whether a block of `size` bytes can start at `ptr` without mapping: the
// chunk there is free (and `ptr` starts it, or the block runs from `ptr` to
// its end or beyond: `lead` bytes in, see lead_for), or a free piece of it
// starts at `ptr` (and ends the chunk, if the block goes on); the chunks
// after it are free, and the last may hold small blocks behind a free head
// that covers the rest. The first and the last chunk may be owned by another segment:
// the block borrows them as it did before. Returns the segment,
// the chunk slot and the free piece to start in (nullptr: a free chunk).
bool Lake::free_at(DevicePtr ptr, std::size_t size, SegmentId* s_out, std::uint32_t* slot_out,
                   Piece** piece_out, std::size_t* lead_out) const {
  auto it = segment_at_.upper_bound(ptr);
  if (it == segment_at_.begin()) return false;
  const SegmentId s = std::prev(it)->second;
  const Segment& seg = segments_[s];
  if (!seg.in_use || seg.reserve || ptr >= seg.va + seg.size) return false;
  const std::size_t at = ptr - seg.va;
  const auto slot = static_cast<std::uint32_t>(
      std::upper_bound(seg.offsets.begin(), seg.offsets.end(), at) - seg.offsets.begin() - 1);
  const std::size_t offset = at - seg.offsets[slot];
  const Chunk& first = chunks_[seg.chunks[slot]];
  std::size_t covered = 0;
  Piece* piece = nullptr;
  if (first.owner == kNone) {
    if (first.reserve || (offset != 0 && size < first.size - offset)) return false;
    // Not in the middle of a free run: that would cut it where the ladder
    // would not, and leave free chunks before the block that fit less.
    if (slot != 0 && chunks_[seg.chunks[slot - 1]].owner == kNone) return false;
    covered = first.size - offset;
  } else {
    // Owned by this segment, or by another one whose free tail the block
    // borrowed last time (try_borrowed_ends).
    Piece* p = first.pieces;
    while (p && p->offset < offset) p = p->next;
    if (!p || p->offset != offset || p->allocated) return false;
    if (p->size < size && p->next) return false;  // would not reach the next chunk
    piece = p;
    covered = p->size;
  }
  for (std::uint32_t i = slot + 1; covered < size; ++i) {
    if (i == seg.chunks.size()) return false;
    const Chunk& c = chunks_[seg.chunks[i]];
    if (c.reserve) return false;
    if (c.owner == kNone) {
      covered += c.size;
      continue;
    }
    // Only the last chunk may be in use, by small blocks after a free head
    // (in this segment's chunk, or one borrowed).
    if (c.pieces->allocated || c.pieces->size < size - covered) return false;
    covered = size;
  }
  *s_out = s;
  *slot_out = slot;
  *piece_out = piece;
  *lead_out = piece ? 0 : offset;
  return true;
}

LakeResult Lake::try_remembered(PlaceKey key) {
  auto it = remembered_.find(key);
  if (it == remembered_.end()) return {};
  const std::size_t size = key.size;
  for (auto p = it->second.rbegin(); p != it->second.rend(); ++p) {
    SegmentId s;
    std::uint32_t slot;
    Piece* piece;
    std::size_t lead;
    if (!free_at(*p, size, &s, &slot, &piece, &lead)) continue;
    return {place_span(s, slot, piece, size, lead), Rung::remembered, size};
  }
  return {};
}

}  // namespace memlake::lake
