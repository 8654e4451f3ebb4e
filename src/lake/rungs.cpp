// The rungs of the ladder (ladder.cpp), one function each. A rung either
// places the block and says which rung it was, or changes nothing (chunks it
// created for a range it then could not map are released again).
#include <algorithm>
#include <cassert>

#include "lake/lake.hpp"

namespace memlake::lake {

namespace {
// Large blocks of up to this many granules may take borrowed ends: for them
// a granule is a third or more of the block. Larger ones continue their
// tails in place instead (the continuation and extend rungs).
constexpr std::size_t kBorrowMaxGranules = 2;

// At most a 32nd larger: a decoder's keys and values some tokens longer.
bool a_little_larger(std::size_t size, std::size_t than) {
  return than < size && size - than <= size / 32;
}
}  // namespace

// Small requests share the free space of chunks already in use: beside
// other small blocks first, else in the tails of large blocks; a large one
// takes such a piece where it fits.
Placed Lake::rung_fragment(const Request& r) {
  Piece* f = small(r) ? fragments_.best_fit_beside_small(r.size) : nullptr;
  if (!f) f = fragments_.best_fit(r.size);
  return f ? place_on_piece(Rung::fragment, f, r.size) : Placed{};
}

// An idle range of the request's size rounded to granules, within the fit
// slack: the whole range, nothing mapped.
Placed Lake::rung_idle_segment(const Request& r) {
  read_segments();
  const std::size_t bytes = round_up(r.size, options_.granularity);
  const SegmentId s = table_.find_idle(bytes, bytes + slack_for(bytes));
  return s == kNone ? Placed{} : place_span(Rung::idle_segment, s, 0, nullptr, r.size);
}

// The smallest run of free chunks inside a mapped range that holds the
// request: the block takes its first chunks in place, the rest stay free.
// Training repeats its order of requests, so the layout of the last step is
// usually right for this one, and nothing needs mapping. A small block keeps
// to its chunk's start: the rest of the chunk stays a tail that runs on into
// the run's free chunks.
Placed Lake::rung_free_run(const Request& r) {
  read_segments();
  SegmentId s;
  std::uint32_t start;
  if (!table_.find_free_run(round_up(r.size, options_.granularity), &s, &start)) return {};
  const std::size_t lead = small(r) ? 0 : lead_for(s, start, r.size);
  return place_span(Rung::free_run, s, start, nullptr, r.size, lead);
}

// A block grows a freed one when it is a little larger, or when it repeats
// the size of one that had grown (the buffer's size moves in steps of its
// rounding, so most versions repeat the last size).
bool Lake::grows_a_freed_block(std::size_t size) const {
  return std::any_of(freed_.begin(), freed_.end(), [&](const Freed& f) {
    return a_little_larger(size, f.size) || (f.size == size && f.grew);
  });
}

// A request keeps growing when it is a little larger than a freed block
// that had grown one: a single growth may be chance.
bool Lake::keeps_growing(std::size_t size) const {
  return std::any_of(freed_.begin(), freed_.end(),
                     [&](const Freed& f) { return f.grew && a_little_larger(size, f.size); });
}

// A block may start in the free tail of a recent block's last chunk and run
// on into the free chunks mapped after it, so no tail is wasted and nothing
// is mapped; with `extend`, chunks are mapped after the range's end (its
// reserved room) when the tail chunk is the last one.
Placed Lake::rung_continuation(const Request& r, bool extend, Budget budget) {
  // A buffer that keeps growing (it grew a block that had grown one) is not
  // laid after another block: in a range of its own it leaves an idle range,
  // or room at the range's end, that its next, slightly larger version takes
  // with little or no mapping, where laid end to end every version maps its
  // whole size again (docs/benchmarks.md, "Blocks laid end to end and
  // requests that grow").
  if (extend && keeps_growing(r.size)) return {};
  read_segments();
  const std::size_t size = r.size;
  for (auto it = recent_tails_.rbegin(); it != recent_tails_.rend(); ++it) {
    const ChunkId c = *it;
    if (!pool_[c].in_use || use_[c].owner == kNone) continue;
    Piece* last = free_tail(c);
    if (!last) continue;
    const SegmentId s = use_[c].owner;
    const Segment& seg = table_[s];
    const auto i = static_cast<std::uint32_t>(
        std::lower_bound(seg.offsets.begin(), seg.offsets.end(), use_[c].owner_offset) -
        seg.offsets.begin());
    std::size_t avail = last->size;
    std::size_t j = i + 1;
    while (avail < size && j < seg.chunks.size() && table_.offers(s, seg.chunks[j]))
      avail += pool_.size(seg.chunks[j++]);
    if (avail >= size) return place_span(Rung::continuation, s, i, last, size);
    if (!extend || i + 1 != seg.chunks.size()) continue;
    const std::size_t need = round_up(size - avail, options_.granularity);
    if (seg.sealed || seg.size + need > seg.va_size) continue;
    if (growth_leaves_out_free_chunks(s, need, 0)) return {};
    if (!extend_by(s, need, budget)) return {};
    return place_span(Rung::extend, s, i, last, size);
  }
  return {};
}

// Maps `need` bytes of free chunks (and, with the create budget, new ones
// for what they lack) after the end of range `s`.
bool Lake::extend_by(SegmentId s, std::size_t need, Budget budget) {
  std::vector<ChunkId> chosen, created;
  if (!gather_chunks(need, budget == Budget::create, &chosen, &created, s)) return false;
  if (!table_.extend(s, chosen)) {
    release_all(created);
    return false;
  }
  return true;
}

// A run of free chunks too short for the block by less than two chunks, with
// free pieces on either side in chunks of the same range that still hold
// small blocks: the run and those pieces together. This is where a large
// block freed while small ones kept its tail chunk busy comes back to, so a
// repeated request maps nothing.
Placed Lake::rung_run_between_pieces(const Request& r) {
  constexpr int kMaxCandidates = 32;  // bounds the scan of near-miss runs
  read_segments();
  const std::size_t size = r.size;
  const std::size_t widest = 2 * std::max(options_.max_chunk, options_.small_max);
  const std::size_t bytes = round_up(size, options_.granularity);
  const RunIndex& runs = table_.free_runs();
  auto it = runs.lower_bound({size > widest ? size - widest : 0, 0, 0});
  for (int n = 0; n < kMaxCandidates && it != runs.end() && it->bytes < bytes; ++it, ++n) {
    const SegmentId s = it->segment;
    const Segment& seg = table_[s];
    if (seg.reserve) continue;
    const std::uint32_t start = it->start;
    const std::uint32_t end = start + seg.runs.at(start);
    Piece* tail = free_tail_before(s, start);
    std::size_t head = 0;
    if (end < seg.chunks.size()) {
      const ChunkUse& after = use_[seg.chunks[end]];
      if (after.owner == s && !after.pieces->allocated) head = after.pieces->size;
    }
    if (it->bytes + head >= size)
      return place_span(Rung::run_between_pieces, s, start, nullptr, size);
    if (tail && tail->size + it->bytes + head >= size)
      return place_span(Rung::run_between_pieces, s, start - 1, tail, size);
  }
  return {};
}

// Where the free space at the end of a mapped range is a little short of the
// request, the range grows by the difference: a request larger than last
// step's (a longer sequence) then maps the difference instead of stitching
// a whole new range. The space is a free run reaching the range's end (after
// the free tail of the chunk before it, if any).
Placed Lake::rung_grow(const Request& r, Budget budget) {
  constexpr int kMaxCandidates = 8;
  read_segments();
  const std::size_t size = r.size;
  const std::size_t bytes = round_up(size, options_.granularity);
  auto grow = [&](SegmentId s, std::uint32_t start, Piece* tail) -> Placed {
    const Segment& seg = table_[s];
    const std::size_t have = (tail ? tail->size : 0) + (seg.size - seg.offsets[start]);
    if (have >= size) return {};  // would fit; not this rung's business
    const std::size_t need = round_up(size - have, options_.granularity);
    if (seg.reserve || seg.sealed || seg.size + need > seg.va_size) return {};
    // The run (free chunks mapped in s) is the block's already.
    if (budget == Budget::create &&
        growth_leaves_out_free_chunks(s, need, seg.size - seg.offsets[start]))
      return {};
    if (!extend_by(s, need, budget)) return {};
    return place_span(Rung::grow, s, tail ? start - 1 : start, tail, size);
  };
  const RunIndex& runs = table_.free_runs();
  int n = 0;
  for (auto it = runs.lower_bound({bytes, 0, 0}); n < kMaxCandidates && it != runs.begin(); ++n) {
    --it;
    if (it->bytes * 2 < bytes) break;  // the rest are smaller still
    const Segment& seg = table_[it->segment];
    if (it->start + seg.runs.at(it->start) != seg.chunks.size()) continue;  // not at the end
    if (Placed p = grow(it->segment, it->start, free_tail_before(it->segment, it->start))) return p;
  }
  return {};
}

// Where new memory would be made for a block that leaves part of its first
// or last granule unused, free pieces at the ends of chunks that hold other
// blocks may take those parts instead: a new range maps the chunk with the
// free tail, chunks for the middle, and the chunk with the free head, and the
// block runs from inside the first to inside the last. One or two granules
// less are made. The tightest pair that saves the most is taken.
Placed Lake::rung_borrowed_ends(const Request& r) {
  const std::size_t g = options_.granularity;
  const std::size_t bytes = round_up(r.size, g);
  if (pool_.free_bytes() >= bytes) return {};  // no new memory would be made
  if (!small(r) && bytes > kBorrowMaxGranules * g) return {};
  Piece* tail = nullptr;
  Piece* head = nullptr;
  std::size_t middle = 0;
  if (!borrowed_ends_for(r.size, &tail, &head, &middle)) return {};
  std::vector<ChunkId> chosen, created;
  if (middle != 0 && !gather_chunks(middle, /*create=*/true, &chosen, &created)) return {};
  if (tail) chosen.insert(chosen.begin(), tail->chunk);
  if (head) chosen.push_back(head->chunk);
  const SegmentId s = table_.map_segment(std::move(chosen), /*stitched=*/true);
  if (s == kNone) {
    release_all(created);
    return {};
  }
  if (!options_.defer_eviction) table_.enforce_budget(s);
  return place_span(Rung::borrowed_ends, s, 0, tail, r.size);
}

// The free tail and the free head (either may be missing) that together
// with `middle` bytes of chunks hold `size` with the fewest new granules.
bool Lake::borrowed_ends_for(std::size_t size, Piece** best_tail, Piece** best_head,
                             std::size_t* best_middle) const {
  constexpr std::size_t kMaxCandidates = 64;  // of each kind, smallest first
  const std::size_t g = options_.granularity;
  const std::size_t bytes = round_up(size, g);
  std::vector<Piece*> tails{nullptr}, heads{nullptr};  // nullptr: without that end
  for (auto it = fragments_.begin();
       it != fragments_.end() && (tails.size() <= kMaxCandidates || heads.size() <= kMaxCandidates);
       ++it) {
    Piece* p = *it;
    if (!p->next && tails.size() <= kMaxCandidates) tails.push_back(p);
    if (!p->prev && heads.size() <= kMaxCandidates) heads.push_back(p);
  }
  auto length = [](const Piece* p) { return p ? p->size : std::size_t{0}; };
  *best_middle = bytes;  // bytes of chunks between the two ends
  std::size_t best_ends = 0;
  for (Piece* t : tails) {
    for (Piece* h : heads) {
      if (!t && !h) continue;
      if (t && h && t->chunk == h->chunk) continue;
      const std::size_t ends = length(t) + length(h);
      const std::size_t middle = ends >= size ? 0 : round_up(size - ends, g);
      if (middle + length(t) >= size && h) continue;  // the head would not be reached
      if (middle + length(h) >= size && t) continue;  // nor the tail needed
      if (middle == bytes) continue;                  // saves nothing
      if (middle > *best_middle || (middle == *best_middle && ends >= best_ends)) continue;
      *best_tail = t;
      *best_head = h;
      *best_middle = middle;
      best_ends = ends;
    }
  }
  return *best_middle < bytes;
}

// Where new memory would be made: the worker's reserve, mapped already.
Placed Lake::rung_reserve(const Request& r) {
  read_segments();
  SegmentId s;
  std::uint32_t start;
  if (!table_.find_reserve_run(round_up(r.size, options_.granularity), &s, &start)) return {};
  ++stats_.reserve_hits.current;
  return place_span(Rung::reserve, s, start, nullptr, r.size);
}

// A new range over free chunks (a stitch) and, with the create budget, new
// chunks for what they do not cover: new memory only for the deficit.
Placed Lake::rung_new_range(const Request& r, Budget budget) {
  bool stitched = false;
  const SegmentId s = build_segment_for(round_up(r.size, options_.granularity),
                                        budget == Budget::create, &stitched);
  if (s == kNone) return {};
  return place_span(stitched ? Rung::stitch : Rung::new_memory, s, 0, nullptr, r.size,
                    lead_for(s, 0, r.size));
}

}  // namespace memlake::lake
