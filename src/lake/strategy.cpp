// The allocation ladder: exact -> split -> stitch -> new. Reclaim-and-retry
// and the OOM report belong to the caller, which can also harvest deferred
// frees in between.
#include <algorithm>
#include <cassert>

#include "lake/lake.hpp"

namespace memlake::lake {

namespace {
std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

// Blocks up to this many granules borrow free chunk ends before new memory
// (try_borrowed_ends): for them a granule is a third or more of the block.
// For larger ones it made the recorded traces stitch more for no less
// memory (gpt2_recompute: 13.22 -> 13.28 GiB peak, critical-path VMM calls
// after warm-up 5593 -> 7493 with 4 granules); their tails are continued
// in place (try_continuation) instead.
constexpr std::size_t kBorrowMaxGranules = 2;

// Remembered-place hits in a row before frees leave the segments behind
// (Lake::note_chunk_change). Measured on the GPU (H200, allocate p99 on
// repeated traces): lagging after every hit put a whole run of frees on the
// next request that read the segments (6-9 us on moe, dynamic and the
// recorded GPT-2 / Llama-LoRA steps); 16 hits 2-6 us, 64 1.6-3.7 us
// (dynamic 4.3-7.5); never lagging, moe_large 7-13 us and its third seed
// 34-40 us.
constexpr std::uint32_t kLagAfterHits = 64;
}  // namespace

bool Lake::frees_may_lag() const {
  return hit_streak_ >= kLagAfterHits;
}

LakeResult Lake::allocate(std::size_t requested, bool allow_new, bool allow_map,
                          std::uint64_t history) {
  assert(requested <= options_.capacity);
  allow_new_ = allow_new && allow_map;
  allow_map_ = allow_map;
  const std::size_t size = round_up(std::max<std::size_t>(requested, 1), kAlignment);
  if (size <= options_.small_max) {
    LakeResult r = allocate_small(size, history);
    r.size = size;
    r.fence = r.ptr ? placed_fence_ : FenceId{};
    return r;
  }
  const PlaceKey key = place_key(size, history);
  LakeResult r = try_remembered(key);
  // Once requests keep coming back to their places, frees leave the
  // segments behind: the step claims the same chunks again (note_chunk_change).
  // While some miss, a request that reads the segments would pay for every
  // free since the last one, so frees keep them caught up.
  hit_streak_ = r.ptr != 0 ? hit_streak_ + 1 : 0;
  if (r.ptr == 0) r = allocate_large(size);
  if (r.ptr == 0) return r;
  r.size = size;
  r.fence = placed_fence_;
  remember_place(key, r.ptr);
  return r;
}

std::size_t Lake::slack_for(std::size_t bytes) const {
  const auto slack = static_cast<std::size_t>(static_cast<double>(bytes) * options_.fit_slack);
  return slack / options_.granularity * options_.granularity;
}

SegmentId Lake::find_idle_segment(std::size_t bytes) const {
  for (auto it = idle_by_size_.lower_bound({bytes, 0});
       it != idle_by_size_.end() && it->first <= bytes + slack_for(bytes); ++it)
    if (!segments_[it->second].reserve) return it->second;
  return kNone;
}

Piece* Lake::find_fragment(std::size_t size) const {
  Piece key{0, size, 0, false, nullptr, nullptr};
  auto it = fragments_.lower_bound(&key);
  return it == fragments_.end() ? nullptr : *it;
}

// Small requests share the free space of chunks already in use (tails of
// large blocks, other small blocks) before a whole chunk is taken for them.
LakeResult Lake::allocate_small(std::size_t size, std::uint64_t history) {
  if (Piece* f = find_fragment(size)) {
    return {place_on_piece(f, size, size), Rung::fragment, size};
  }
  // A small request that takes a chunk of its own goes where it went last
  // step, as large ones do: found by its place, it reads no free run, so the
  // segments left behind (note_chunk_change) need not catch up for it.
  const PlaceKey key = place_key(size, history);
  if (LakeResult r = try_remembered(key); r.ptr) return r;
  LakeResult r = allocate_small_ladder(size);
  if (r.ptr) remember_place(key, r.ptr);
  return r;
}

LakeResult Lake::allocate_small_ladder(std::size_t size) {
  // small_max may exceed a granule: cover the whole request.
  const std::size_t bytes = round_up(size, options_.granularity);
  if (!lagging_chunks_.empty()) hit_streak_ = 0;
  catch_up();
  SegmentId run_segment;
  std::uint32_t run_start;
  // At its chunk's start (no lead_for): the rest of the chunk stays a tail
  // that runs on into the run's free chunks. Left as a head instead, it cost
  // the recorded Llama-LoRA replay 171 VMM calls after warm-up (of none).
  if (find_free_run(bytes, &run_segment, &run_start))
    return {place_span(run_segment, run_start, nullptr, size), Rung::free_run, size};
  if (!allow_map_) return {};
  if (LakeResult r = try_borrowed_ends(size); r.ptr) return r;
  if (LakeResult r = take_reserve_run(bytes, size); r.ptr) return r;
  bool stitched = false;
  SegmentId s = build_segment_for(bytes, &stitched);
  if (s == kNone) return {};
  return {place_span(s, 0, nullptr, size, lead_for(s, 0, size)),
          stitched ? Rung::stitch : Rung::new_memory, size};
}

LakeResult Lake::allocate_large(std::size_t size) {
  catch_up();  // the ladder reads the idle index and the free runs
  const std::size_t bytes = round_up(size, options_.granularity);
  demand_target_ = std::max(demand_target_, bytes);
  if (SegmentId s = find_idle_segment(bytes); s != kNone)
    return {place_span(s, 0, nullptr, size), Rung::idle_segment, size};
  if (LakeResult r = try_continuation(size, /*extend=*/false); r.ptr) return r;
  if (Piece* f = find_fragment(size)) return {place_on_piece(f, size, size), Rung::fragment, size};
  if (LakeResult r = try_run_between_pieces(size); r.ptr) return r;
  SegmentId run_segment;
  std::uint32_t run_start;
  if (find_free_run(bytes, &run_segment, &run_start))
    return {
        place_span(run_segment, run_start, nullptr, size, lead_for(run_segment, run_start, size)),
        Rung::free_run, size};
  if (!allow_map_) return {};
  if (bytes <= kBorrowMaxGranules * options_.granularity)
    if (LakeResult r = try_borrowed_ends(size); r.ptr) return r;
  if (LakeResult r = try_continuation(size, /*extend=*/true); r.ptr) return r;
  if (LakeResult r = try_grow_segment(size); r.ptr) return r;
  if (LakeResult r = take_reserve_run(bytes, size); r.ptr) return r;
  bool stitched = false;
  SegmentId s = build_segment_for(bytes, &stitched);
  if (s == kNone) return {};
  return {place_span(s, 0, nullptr, size, lead_for(s, 0, size)),
          stitched ? Rung::stitch : Rung::new_memory, size};
}

// Where the free space at the end of a mapped segment is a little short of
// the request, the segment grows by the difference: a request larger than
// last step's (a longer sequence) then maps the difference instead of
// stitching a whole new range. The space is a free run reaching the
// segment's end (after the free tail of the chunk before it, if any), or a
// whole idle segment that left the run index.
LakeResult Lake::try_grow_segment(std::size_t size) {
  constexpr int kMaxCandidates = 8;
  const std::size_t bytes = round_up(size, options_.granularity);
  auto grow = [&](SegmentId s, std::uint32_t start, Piece* tail) -> LakeResult {
    Segment& seg = segments_[s];
    const std::size_t have = (tail ? tail->size : 0) + (seg.size - seg.offsets[start]);
    if (have >= size) return {};  // would fit; not this step's business
    const std::size_t need = round_up(size - have, options_.granularity);
    if (seg.reserve || seg.sealed || seg.size + need > seg.va_size) return {};
    std::vector<ChunkId> chosen, created;
    if (!gather_chunks(need, &chosen, &created, s)) return {};
    const bool stitched = chosen.size() > created.size();
    if (!extend_segment(s, chosen)) {
      for (ChunkId made : created) release_chunk(made);
      return {};
    }
    if (stitched) ++stats_.prestitch_misses.current;
    return {place_span(s, tail ? start - 1 : start, tail, size), Rung::grow, size};
  };
  int n = 0;
  for (auto it = free_runs_.lower_bound({bytes, 0, 0});
       n < kMaxCandidates && it != free_runs_.begin(); ++n) {
    --it;
    if (it->bytes * 2 < bytes) break;  // the rest are smaller still
    const Segment& seg = segments_[it->segment];
    if (it->start + seg.runs.at(it->start) != seg.chunks.size()) continue;  // not at the end
    if (LakeResult r = grow(it->segment, it->start, free_tail_before(it->segment, it->start));
        r.ptr)
      return r;
  }
  n = 0;
  for (auto it = idle_by_size_.lower_bound({bytes, 0});
       n < kMaxCandidates && it != idle_by_size_.begin(); ++n) {
    --it;
    if (it->first * 2 < bytes) break;
    if (segments_[it->second].indexed) continue;  // seen among the runs
    if (LakeResult r = grow(it->second, 0, nullptr); r.ptr) return r;
  }
  return {};
}

// The smallest run of free chunks inside a mapped segment that holds
// `bytes`: the block takes its first chunks in place, the rest stay free.
// Training repeats its order of requests, so the layout of the last step is
// usually right for this one, and nothing needs mapping.
bool Lake::find_free_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const {
  for (auto it = free_runs_.lower_bound({bytes, 0, 0}); it != free_runs_.end(); ++it) {
    if (segments_[it->segment].reserve) continue;  // the last resort, see find_reserve_run
    *s = it->segment;
    *start = it->start;
    return true;
  }
  return false;
}

// A run of the worker's reserve that holds `bytes`: taken only where the
// lake would otherwise create memory.
bool Lake::find_reserve_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const {
  for (SegmentId r : reserve_segments_) {
    const Segment& seg = segments_[r];
    for (auto [first, count] : seg.runs) {
      if (run_bytes(seg, first, count) < bytes) continue;
      *s = r;
      *start = first;
      return true;
    }
  }
  return false;
}

// A run of free chunks too short for the block by less than two chunks, with
// free pieces on either side in chunks of the same segment that still hold
// small blocks: the run and those pieces together. This is where a large
// block freed while small ones kept its tail chunk busy comes back to, so a
// repeated request maps nothing.
LakeResult Lake::try_run_between_pieces(std::size_t size) {
  constexpr int kMaxCandidates = 32;  // bounds the scan of near-miss runs
  const std::size_t widest = 2 * std::max(options_.max_chunk, options_.small_max);
  const std::size_t bytes = round_up(size, options_.granularity);
  auto it = free_runs_.lower_bound({size > widest ? size - widest : 0, 0, 0});
  for (int n = 0; n < kMaxCandidates && it != free_runs_.end() && it->bytes < bytes; ++it, ++n) {
    const SegmentId s = it->segment;
    const Segment& seg = segments_[s];
    if (seg.reserve) continue;
    const std::uint32_t start = it->start;
    const std::uint32_t end = start + seg.runs.at(start);
    Piece* tail = free_tail_before(s, start);
    std::size_t head = 0;
    if (end < seg.chunks.size() && chunks_[seg.chunks[end]].owner == s &&
        !chunks_[seg.chunks[end]].pieces->allocated)
      head = chunks_[seg.chunks[end]].pieces->size;
    if (it->bytes + head >= size)
      return {place_span(s, start, nullptr, size), Rung::run_between_pieces, size};
    if (tail && tail->size + it->bytes + head >= size)
      return {place_span(s, start - 1, tail, size), Rung::run_between_pieces, size};
  }
  return {};
}

// Where new memory would be made for a block that leaves part of its first
// or last granule unused, free pieces at the ends of chunks that hold other
// blocks may take those parts instead: a new range maps the chunk with the
// free tail, chunks for the middle, and the chunk with the free head, and the
// block runs from inside the first to inside the last. One or two granules
// less are made (blocks of a few granules in irregular sizes leave such
// pieces everywhere). The tightest pair that saves the most is taken.
LakeResult Lake::try_borrowed_ends(std::size_t size) {
  constexpr std::size_t kMaxCandidates = 64;  // of each kind, smallest first
  const std::size_t g = options_.granularity;
  const std::size_t bytes = round_up(size, g);
  if (!allow_new_ || free_chunk_bytes_ >= bytes) return {};
  // Free pieces that end their chunk (tails) and that start it (heads).
  std::vector<Piece*> tails{nullptr}, heads{nullptr};  // nullptr: without that end
  for (auto it = fragments_.begin();
       it != fragments_.end() && (tails.size() <= kMaxCandidates || heads.size() <= kMaxCandidates);
       ++it) {
    Piece* p = *it;
    if (!p->next && tails.size() <= kMaxCandidates) tails.push_back(p);
    if (!p->prev && heads.size() <= kMaxCandidates) heads.push_back(p);
  }
  auto length = [](const Piece* p) { return p ? p->size : std::size_t{0}; };
  Piece* best_tail = nullptr;
  Piece* best_head = nullptr;
  std::size_t best_middle = bytes;  // bytes of chunks between the two ends
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
      if (middle > best_middle || (middle == best_middle && ends >= best_ends)) continue;
      best_tail = t;
      best_head = h;
      best_middle = middle;
      best_ends = ends;
    }
  }
  if (best_middle >= bytes) return {};
  std::vector<ChunkId> chosen, created;
  if (best_middle != 0 && !gather_chunks(best_middle, &chosen, &created)) return {};
  if (best_tail) chosen.insert(chosen.begin(), best_tail->chunk);
  if (best_head) chosen.push_back(best_head->chunk);
  const SegmentId s = map_segment(std::move(chosen), /*stitched=*/true);
  if (s == kNone) {
    for (ChunkId made : created) release_chunk(made);
    return {};
  }
  if (!options_.defer_eviction) enforce_cache_budget(s);
  return {place_span(s, 0, best_tail, size), Rung::borrowed_ends, size};
}

// Where new memory would be made: the worker's reserve, mapped already.
LakeResult Lake::take_reserve_run(std::size_t bytes, std::size_t size) {
  SegmentId s;
  std::uint32_t start;
  if (!allow_new_ || !find_reserve_run(bytes, &s, &start)) return {};
  ++stats_.reserve_hits.current;
  return {place_span(s, start, nullptr, size), Rung::reserve, size};
}

// A large block may start in the free tail of a recent block's last chunk
// and run on into the free chunks mapped after it, so no tail is wasted and
// nothing is mapped; with `extend`, chunks are mapped after the segment's
// end (its reserved room) when the tail chunk is the last one.
LakeResult Lake::try_continuation(std::size_t size, bool extend) {
  for (auto it = recent_tails_.rbegin(); it != recent_tails_.rend(); ++it) {
    const ChunkId c = *it;
    const Chunk& chunk = chunks_[c];
    if (!chunk.in_use || chunk.owner == kNone) continue;
    Piece* last = free_tail(c);
    if (!last) continue;
    const SegmentId s = chunk.owner;
    const Segment& seg = segments_[s];
    const auto i = static_cast<std::uint32_t>(
        std::lower_bound(seg.offsets.begin(), seg.offsets.end(), chunk.owner_offset) -
        seg.offsets.begin());
    std::size_t avail = last->size;
    std::size_t j = i + 1;
    while (avail < size && j < seg.chunks.size() && chunks_[seg.chunks[j]].owner == kNone)
      avail += chunks_[seg.chunks[j++]].size;
    if (avail >= size) return {place_span(s, i, last, size), Rung::continuation, size};
    if (!extend || i + 1 != seg.chunks.size()) continue;
    const std::size_t need = round_up(size - avail, options_.granularity);
    if (seg.sealed || seg.size + need > seg.va_size) continue;
    std::vector<ChunkId> chosen, created;
    // Free chunks already mapped in this segment cannot be mapped again after
    // its end; if they are needed, a new segment over them beats new memory.
    if (!select_free_chunks(need, &chosen, s)) {
      std::size_t have = 0;
      for (ChunkId c : chosen) have += chunks_[c].size;
      if (have < free_chunk_bytes_) return {};
    }
    chosen.clear();
    if (!gather_chunks(need, &chosen, &created, s)) return {};
    const bool stitched = chosen.size() > created.size();
    if (stitched) ++stats_.prestitch_misses.current;
    if (!extend_segment(s, chosen)) {
      for (ChunkId made : created) release_chunk(made);
      return {};
    }
    return {place_span(s, i, last, size), Rung::extend, size};
  }
  return {};
}

// Whether chunk `c` is mapped in segment `s` (kNone: no segment).
bool Lake::excluded_from(ChunkId c, SegmentId s) const {
  const auto& m = chunks_[c].mapped_in;
  return s != kNone && std::any_of(m.begin(), m.end(), [&](Mapping x) { return x.segment == s; });
}

// Picks free chunks for `bytes`, largest that still fits first, so few
// handles are stitched; allows one chunk that overshoots by at most the fit
// slack. Returns true when the chunks cover `bytes` (else the caller creates
// the deficit).
bool Lake::select_free_chunks(std::size_t bytes, std::vector<ChunkId>* chosen,
                              SegmentId exclude) const {
  auto excluded = [&](ChunkId c) { return excluded_from(c, exclude); };
  std::size_t remaining = bytes;
  // Walk down from the largest chunk that fits; everything at or above `it`
  // has been looked at.
  auto it = free_chunks_.upper_bound({remaining, kNone});
  while (remaining > 0 && chosen->size() < options_.max_stitch_chunks &&
         it != free_chunks_.begin()) {
    --it;
    if (it->first > remaining) {
      auto fits = free_chunks_.upper_bound({remaining, kNone});
      if (*fits < *it) it = fits;  // skip the ones now too large
      continue;
    }
    if (excluded(it->second) || chunks_[it->second].reserve) continue;
    chosen->push_back(it->second);
    remaining -= it->first;
  }
  if (remaining == 0) return true;
  if (chosen->size() < options_.max_stitch_chunks) {
    for (auto it = free_chunks_.lower_bound({remaining, 0});
         it != free_chunks_.end() && it->first <= remaining + slack_for(bytes); ++it) {
      if (std::find(chosen->begin(), chosen->end(), it->second) != chosen->end() ||
          excluded(it->second) || chunks_[it->second].reserve)
        continue;
      chosen->push_back(it->second);
      return true;
    }
  }
  return false;
}

// How `bytes` of new memory is cut into chunks: parts of max_chunk (of
// large_chunk for a large request), and the
// last granule on its own, since it usually holds the block's tail, which
// small requests will share: sharing then pins one granule, not the body.
std::vector<std::size_t> Lake::chunk_sizes_for(std::size_t bytes) const {
  const std::size_t g = options_.granularity;
  std::vector<std::size_t> sizes;
  if (bytes <= g) return {bytes};
  std::size_t unit = options_.max_chunk;
  if (options_.large_chunk != 0 && bytes >= options_.large_chunk_from) unit = options_.large_chunk;
  for (std::size_t body = bytes - g; body > 0;) {
    const std::size_t part = std::min(body, std::max(unit / g * g, g));
    sizes.push_back(part);
    body -= part;
  }
  sizes.push_back(g);
  return sizes;
}

// Free chunks for `bytes`, plus new chunks for whatever they do not cover
// (when allow_new_). New memory is created only for the deficit, so reserved
// memory grows only when the free chunks are truly exhausted. Sorted largest
// first: the smallest chunk ends up holding the tail.
bool Lake::gather_chunks(std::size_t bytes, std::vector<ChunkId>* chosen,
                         std::vector<ChunkId>* created, SegmentId exclude) {
  if (!select_free_chunks(bytes, chosen, exclude)) {
    if (!allow_new_) return false;
    std::size_t have = 0;
    for (ChunkId c : *chosen) have += chunks_[c].size;
    // New memory: the worker's reserve first (created already), then the
    // backend for what it does not cover.
    const std::size_t before = chosen->size();
    for (auto it = free_chunks_.rbegin(); it != free_chunks_.rend() && have < bytes; ++it) {
      if (!chunks_[it->second].reserve || excluded_from(it->second, exclude)) continue;
      chosen->push_back(it->second);
      have += it->first;
    }
    if (chosen->size() > before) ++stats_.reserve_hits.current;
    if (have >= bytes) {
      std::stable_sort(chosen->begin(), chosen->end(),
                       [&](ChunkId a, ChunkId b) { return chunks_[a].size > chunks_[b].size; });
      return true;
    }
    ++stats_.reserve_misses.current;
    for (std::size_t sz : chunk_sizes_for(bytes - have)) {
      ChunkId c = create_chunk(sz);
      if (c == kNone) {
        for (ChunkId made : *created) release_chunk(made);
        created->clear();
        return false;
      }
      created->push_back(c);
    }
    chosen->insert(chosen->end(), created->begin(), created->end());
  }
  std::stable_sort(chosen->begin(), chosen->end(),
                   [&](ChunkId a, ChunkId b) { return chunks_[a].size > chunks_[b].size; });
  return true;
}

SegmentId Lake::build_segment_for(std::size_t bytes, bool* stitched) {
  std::vector<ChunkId> chosen, created;
  if (!gather_chunks(bytes, &chosen, &created)) return kNone;
  *stitched = chosen.size() > created.size();
  if (*stitched) {
    stitch_demand_ = true;
    ++stats_.prestitch_misses.current;
  }
  SegmentId s = map_segment(std::move(chosen), *stitched);
  if (s == kNone) {
    for (ChunkId made : created) release_chunk(made);
    return kNone;
  }
  if (!options_.defer_eviction) enforce_cache_budget(s);
  return s;
}

}  // namespace memlake::lake
