// The ladder: the rungs a request may be served by, cheapest first. Each
// step names a rung and the most it may do (its budget): reuse what is mapped
// and free, map chunks that exist, or create chunks. The allocator climbs it
// in budget order (src/allocator/ladder.cpp) and reclaims before the last
// climb; docs/architecture.md describes each rung.
#include <span>

#include "lake/lake.hpp"

namespace memlake::lake {

namespace {

struct Step {
  Rung rung;
  Budget needs;
};

// Requests up to small_max: the free space of chunks in use first.
constexpr Step kSmallLadder[] = {
    {Rung::fragment, Budget::reuse},        // best fit among free pieces
    {Rung::remembered, Budget::reuse},      // its place last step, if free
    {Rung::free_run, Budget::reuse},        // a free chunk mapped in a range
    {Rung::stitch, Budget::map},            // a range over a free chunk
    {Rung::borrowed_ends, Budget::create},  // across a free tail and a free head
    {Rung::reserve, Budget::create},        // the worker's reserve
    {Rung::new_memory, Budget::create},     // a new chunk
};

// Larger requests: where they were last step, then mapped free space, then
// mapping, then new memory for the deficit only.
constexpr Step kLargeLadder[] = {
    {Rung::remembered, Budget::reuse},
    {Rung::idle_segment, Budget::reuse},
    {Rung::continuation, Budget::reuse},
    {Rung::fragment, Budget::reuse},
    {Rung::run_between_pieces, Budget::reuse},
    {Rung::free_run, Budget::reuse},
    {Rung::extend, Budget::map},
    {Rung::grow, Budget::map},
    {Rung::stitch, Budget::map},
    {Rung::borrowed_ends, Budget::create},  // blocks of up to two granules
    {Rung::extend, Budget::create},
    {Rung::grow, Budget::create},
    {Rung::reserve, Budget::create},
    {Rung::new_memory, Budget::create},
};

// Remembered-place hits in a row before frees leave the segments behind
// (SegmentTable::note_chunk_change): while some requests miss, a request
// that reads the segments would pay for every free since the last one.
constexpr std::uint32_t kLagAfterHits = 64;

}  // namespace

Placed Lake::place(const Request& r, Budget budget, Budget from) {
  const PlaceKey key = place_key(r);
  places_at_allocated_ = nullptr;  // until rung_remembered finds them
  for (const Step& step :
       small(r) ? std::span<const Step>(kSmallLadder) : std::span<const Step>(kLargeLadder)) {
    if (step.needs < from) continue;  // tried by an earlier climb
    if (step.needs > budget) break;
    const Placed p = climb(step.rung, r, key, step.needs);
    if (!p) continue;
    // A small block found in a fragment or at its place is not remembered
    // again: only where it took a chunk of its own.
    if (!small(r) || (p.rung != Rung::fragment && p.rung != Rung::remembered))
      remember_place(key, p.ptr);
    return p;
  }
  return {};
}

Placed Lake::climb(Rung rung, const Request& r, const PlaceKey& key, Budget budget) {
  switch (rung) {
    case Rung::remembered:
      return rung_remembered(r, key);
    case Rung::fragment:
      return rung_fragment(r);
    case Rung::idle_segment:
      return rung_idle_segment(r);
    case Rung::continuation:
      return rung_continuation(r, /*extend=*/false, budget);
    case Rung::run_between_pieces:
      return rung_run_between_pieces(r);
    case Rung::free_run:
      return rung_free_run(r);
    case Rung::extend:
      return rung_continuation(r, /*extend=*/true, budget);
    case Rung::grow:
      return rung_grow(r, budget);
    case Rung::borrowed_ends:
      return rung_borrowed_ends(r);
    case Rung::reserve:
      return rung_reserve(r);
    case Rung::stitch:
    case Rung::new_memory:
      return rung_new_range(r, budget);
    case Rung::reclaim_retry:
      break;  // the allocator's: reclaim, then the ladder again
  }
  return {};
}

void Lake::read_segments() {
  if (!table_.behind()) return;
  hit_streak_ = 0;
  table_.catch_up();
}

bool Lake::frees_may_lag() const {
  return hit_streak_ >= kLagAfterHits;
}

}  // namespace memlake::lake
