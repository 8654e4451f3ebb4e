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
}  // namespace

LakeResult Lake::allocate(std::size_t requested, bool allow_new) {
  assert(requested <= options_.capacity);
  allow_new_ = allow_new;
  const std::size_t size = round_up(std::max<std::size_t>(requested, 1), kAlignment);
  LakeResult r = size <= options_.small_max ? allocate_small(size) : allocate_large(size);
  if (r.ptr == 0) return r;
  r.size = size;
  return r;
}

std::size_t Lake::slack_for(std::size_t bytes) const {
  const auto slack = static_cast<std::size_t>(static_cast<double>(bytes) * options_.fit_slack);
  return slack / options_.granularity * options_.granularity;
}

SegmentId Lake::find_idle_segment(std::size_t bytes) const {
  auto it = idle_by_size_.lower_bound({bytes, 0});
  if (it == idle_by_size_.end() || it->first > bytes + slack_for(bytes)) return kNone;
  return it->second;
}

Piece* Lake::find_fragment(std::size_t size) const {
  Piece key{0, size, 0, false, nullptr, nullptr};
  auto it = fragments_.lower_bound(&key);
  return it == fragments_.end() ? nullptr : *it;
}

// Small requests share the free space of chunks already in use (tails of
// large blocks, other small blocks) before a whole chunk is taken for them.
LakeResult Lake::allocate_small(std::size_t size) {
  if (Piece* f = find_fragment(size)) {
    AllocPath path = f->size == size ? AllocPath::exact : AllocPath::split;
    return {place_on_piece(f, size, size), path, size};
  }
  // small_max may exceed a granule: cover the whole request.
  const std::size_t bytes = round_up(size, options_.granularity);
  SegmentId run_segment;
  std::uint32_t run_start;
  if (find_free_run(bytes, &run_segment, &run_start))
    return {place_on_segment(run_segment, size, size, run_start), AllocPath::split, size};
  bool stitched = false;
  SegmentId s = build_segment_for(bytes, &stitched);
  if (s == kNone) return {};
  return {place_on_segment(s, size, size), stitched ? AllocPath::stitch : AllocPath::fresh, size};
}

LakeResult Lake::allocate_large(std::size_t size) {
  const std::size_t bytes = round_up(size, options_.granularity);
  if (SegmentId s = find_idle_segment(bytes); s != kNone)
    return {place_on_segment(s, size, size), AllocPath::exact, size};
  if (LakeResult r = try_continuation(size, /*extend=*/false); r.ptr) return r;
  if (Piece* f = find_fragment(size))
    return {place_on_piece(f, size, size), f->size == size ? AllocPath::exact : AllocPath::split,
            size};
  SegmentId run_segment;
  std::uint32_t run_start;
  if (find_free_run(bytes, &run_segment, &run_start))
    return {place_on_segment(run_segment, size, size, run_start), AllocPath::split, size};
  if (LakeResult r = try_continuation(size, /*extend=*/true); r.ptr) return r;
  bool stitched = false;
  SegmentId s = build_segment_for(bytes, &stitched);
  if (s == kNone) return {};
  return {place_on_segment(s, size, size), stitched ? AllocPath::stitch : AllocPath::fresh, size};
}

// The smallest run of free chunks inside a mapped segment that holds
// `bytes`: the block takes its first chunks in place, the rest stay free.
// Training repeats its order of requests, so the layout of the last step is
// usually right for this one, and nothing needs mapping.
bool Lake::find_free_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const {
  auto it = free_runs_.lower_bound({bytes, 0, 0});
  if (it == free_runs_.end()) return false;
  *s = it->segment;
  *start = it->start;
  return true;
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
    Piece* last = chunk.pieces;
    while (last->next) last = last->next;
    if (last->allocated) continue;
    const SegmentId s = chunk.owner;
    const Segment& seg = segments_[s];
    const auto i = static_cast<std::uint32_t>(
        std::lower_bound(seg.offsets.begin(), seg.offsets.end(), chunk.owner_offset) -
        seg.offsets.begin());
    std::size_t avail = last->size;
    std::size_t j = i + 1;
    while (avail < size && j < seg.chunks.size() && chunks_[seg.chunks[j]].owner == kNone)
      avail += chunks_[seg.chunks[j++]].size;
    if (avail >= size) return {place_continuation(s, i, last, size), AllocPath::split, size};
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
    if (!extend_segment(s, chosen)) {
      for (ChunkId made : created) release_chunk(made);
      return {};
    }
    return {place_continuation(s, i, last, size), stitched ? AllocPath::stitch : AllocPath::fresh,
            size};
  }
  return {};
}

// Picks free chunks for `bytes`, largest that still fits first, so few
// handles are stitched; allows one chunk that overshoots by at most the fit
// slack. Returns true when the chunks cover `bytes` (else the caller creates
// the deficit).
bool Lake::select_free_chunks(std::size_t bytes, std::vector<ChunkId>* chosen,
                              SegmentId exclude) const {
  auto excluded = [&](ChunkId c) {
    const auto& m = chunks_[c].mapped_in;
    return exclude != kNone &&
           std::any_of(m.begin(), m.end(), [&](Mapping x) { return x.segment == exclude; });
  };
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
    if (excluded(it->second)) continue;
    chosen->push_back(it->second);
    remaining -= it->first;
  }
  if (remaining == 0) return true;
  if (chosen->size() < options_.max_stitch_chunks) {
    for (auto it = free_chunks_.lower_bound({remaining, 0});
         it != free_chunks_.end() && it->first <= remaining + slack_for(bytes); ++it) {
      if (std::find(chosen->begin(), chosen->end(), it->second) != chosen->end() ||
          excluded(it->second))
        continue;
      chosen->push_back(it->second);
      return true;
    }
  }
  return false;
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
    std::size_t deficit = bytes - have;
    // The last granule usually holds the block's tail, which small requests
    // will share: give it its own chunk so that sharing pins one granule, not
    // the whole body.
    const std::size_t g = options_.granularity;
    std::vector<std::size_t> sizes;
    if (deficit > g) {
      for (std::size_t body = deficit - g; body > 0;) {
        std::size_t part = std::min(body, std::max(options_.max_chunk / g * g, g));
        sizes.push_back(part);
        body -= part;
      }
      sizes.push_back(g);
    } else {
      sizes.push_back(deficit);
    }
    for (std::size_t sz : sizes) {
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
  if (*stitched) stitch_demand_ = true;
  SegmentId s = map_segment(std::move(chosen), *stitched);
  if (s == kNone) {
    for (ChunkId made : created) release_chunk(made);
    return kNone;
  }
  if (!options_.defer_eviction) enforce_cache_budget(s);
  return s;
}

}  // namespace memlake::lake
