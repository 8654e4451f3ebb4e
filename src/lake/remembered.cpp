// Remembered places: training repeats its requests step after step, so a
// request is first offered the places the same request had before. When a
// step repeats the last one, each request finds its place free again (the
// blocks before it in the step are where they were then), and the lake
// settles into a layout that maps nothing. Without this, best-fit choices
// over ranges that alias the same chunks drift from step to step and stitch
// anew every time (tests/suites/test_repeat.cpp).
//
// A request is known by its size, by how many blocks of that size are
// allocated when it comes, and by the requests before it (RequestHistory):
// in a repeated step all three are what they were at the same request last
// step, while two requests of one size in different places of a step differ.
// The history is a window, and a deep model's layers can make the same
// requests for longer than it (a layer's backward under recomputation):
// then every layer shares one key, whose few places are the last layers',
// taken still, and the layer stitches anew every step. A large request is
// therefore first known also by the bytes allocated when it comes, which
// tell layers apart (each holds one activation fewer) and are the same at
// the same request of a repeated step; where they are new (a new shape),
// the places of the key without them come next.
#include <algorithm>

#include "lake/lake.hpp"

namespace memlake::lake {

void Lake::count_size(std::size_t size, int delta) {
  if (size <= options_.small_max) return;
  std::size_t& n = allocated_by_size_[size];
  n += static_cast<std::size_t>(delta);
  if (n == 0) allocated_by_size_.erase(size);
}

// Small requests are never counted by size (count_size).
Lake::PlaceKey Lake::place_key(const Request& r) const {
  if (small(r)) return {r.size, 0, r.history, 0};
  auto it = allocated_by_size_.find(r.size);
  return {r.size, it == allocated_by_size_.end() ? 0 : it->second, r.history, allocated_bytes_};
}

void Lake::remember_place(const PlaceKey& key, DevicePtr ptr) {
  if (key.size > options_.small_max)
    remember_in(remembered_at_allocated_, key, places_at_allocated_, ptr);
  remember_in(remembered_, key.without_allocated(), nullptr, ptr);
}

void Lake::remember_in(PlaceMap& map, const PlaceKey& key, Places* known, DevicePtr ptr) {
  Places* places = known;
  if (places == nullptr) {
    // Shapes that never repeat (a new size every step) must not grow it
    // without bound; a repeating step refills it within one step.
    if (map.size() >= kRememberedKeys && map.count(key) == 0) map.clear();
    places = &map[key];
  }
  // A request back at its newest place (every request of a repeated step)
  // leaves the list as it is.
  if (!places->empty() && places->back().ptr == ptr) return;
  Place place{ptr};
  if (auto it = std::find_if(places->begin(), places->end(),
                             [&](const Place& p) { return p.ptr == ptr; });
      it != places->end()) {
    place = *it;
    places->erase(it);
  } else if (places->size() >= kRememberedPlaces) {
    places->erase(places->begin());
  }
  places->push_back(place);  // newest last
}

// Whether a block of `size` bytes can start at `ptr`, the place's address,
// without mapping: the chunk there is free (and `ptr` starts it, or the
// block runs from `ptr` to its end or beyond: `lead` bytes in, see
// lead_for), or a free piece of it starts at `ptr` (and ends the chunk, if
// the block goes on); the chunks after it are free, and the last may hold
// small blocks behind a free head that covers the rest. The first and the
// last chunk may be owned by another range: the block borrows them as it
// did before. Returns the range, the chunk slot and the free piece to start
// in (nullptr: a free chunk).
bool Lake::free_at(Place& place, std::size_t size, SegmentId* s_out, std::uint32_t* slot_out,
                   Piece** piece_out, std::size_t* lead_out) const {
  SegmentId s;
  std::uint32_t slot;
  std::size_t offset;
  if (!locate(place, &s, &slot, &offset)) return false;
  const Segment& seg = table_[s];
  const ChunkId first = seg.chunks[slot];
  std::size_t covered = 0;
  Piece* piece = nullptr;
  if (pool_.is_free(first)) {
    const std::size_t chunk = pool_.size(first);
    if (pool_[first].reserve || (offset != 0 && size < chunk - offset)) return false;
    // Not in the middle of a free run: that would cut it where the ladder
    // would not, and leave free chunks before the block that fit less.
    if (slot != 0 && table_.offers(s, seg.chunks[slot - 1])) return false;
    covered = chunk - offset;
  } else {
    // Owned by this range, or by another one whose free tail the block
    // borrowed last time.
    if (use_[first].owner == kNone) return false;  // held by another client
    Piece* p = use_[first].pieces;
    while (p && p->offset < offset) p = p->next;
    if (!p || p->offset != offset || p->allocated) return false;
    if (p->size < size && p->next) return false;  // would not reach the next chunk
    piece = p;
    covered = p->size;
  }
  for (std::uint32_t i = slot + 1; covered < size; ++i) {
    if (i == seg.chunks.size()) return false;
    const ChunkId c = seg.chunks[i];
    if (pool_[c].reserve) return false;
    if (pool_.is_free(c)) {
      covered += pool_.size(c);
      continue;
    }
    // Only the last chunk may be in use, by small blocks after a free head
    // (in this range's chunk, or one borrowed).
    const Piece* head = use_[c].pieces;
    if (head == nullptr || head->allocated || head->size < size - covered) return false;
    covered = size;
  }
  *s_out = s;
  *slot_out = slot;
  *piece_out = piece;
  *lead_out = piece ? 0 : offset;
  return true;
}

// The places the same request had, newest first: those it had with the
// same bytes allocated, then the others. Once large requests keep coming
// back to their places, frees leave the segments behind (the step takes the
// same chunks again).
Placed Lake::rung_remembered(const Request& r, const PlaceKey& key) {
  Placed p;
  if (!small(r))
    if (auto it = remembered_at_allocated_.find(key); it != remembered_at_allocated_.end()) {
      places_at_allocated_ = &it->second;
      p = place_at_one_of(r, it->second);
    }
  if (!p)
    if (auto it = remembered_.find(key.without_allocated()); it != remembered_.end())
      p = place_at_one_of(r, it->second);
  if (!small(r)) {
    hit_streak_ = p ? hit_streak_ + 1 : 0;
  }
  return p;
}

Placed Lake::place_at_one_of(const Request& r, Places& places) {
  for (auto place = places.rbegin(); place != places.rend(); ++place) {
    SegmentId s;
    std::uint32_t slot;
    Piece* piece;
    std::size_t lead;
    if (free_at(*place, r.size, &s, &slot, &piece, &lead))
      return place_span(Rung::remembered, s, slot, piece, r.size, lead);
  }
  return {};
}

}  // namespace memlake::lake
