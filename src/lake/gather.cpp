// Chunks for a new range: free chunks first (few, large ones), then the
// worker's reserve, then new chunks for the deficit only, so reserved memory
// grows only when the free chunks are truly exhausted.
#include <algorithm>

#include "lake/lake.hpp"

namespace memlake::lake {

// New memory of `bytes` is cut into parts of max_chunk (of large_chunk for a
// large request), and the last granule goes on its own, since it usually
// holds the block's tail, which small requests will share: sharing then
// pins one granule, not the body.
std::vector<std::size_t> chunk_sizes_for(std::size_t bytes, const LakeOptions& o) {
  const std::size_t g = o.granularity;
  if (bytes <= g) return {bytes};
  std::size_t unit = o.max_chunk;
  if (o.large_chunk != 0 && bytes >= o.large_chunk_from) unit = o.large_chunk;
  std::vector<std::size_t> sizes;
  for (std::size_t body = bytes - g; body > 0;) {
    const std::size_t part = std::min(body, std::max(unit / g * g, g));
    sizes.push_back(part);
    body -= part;
  }
  sizes.push_back(g);
  return sizes;
}

std::size_t Lake::slack_for(std::size_t bytes) const {
  const auto slack = static_cast<std::size_t>(static_cast<double>(bytes) * options_.fit_slack);
  return slack / options_.granularity * options_.granularity;
}

// Chunks made for a range that could not be mapped go back; one the backend
// will not take back stays in the pool as a free chunk.
void Lake::release_all(const std::vector<ChunkId>& created) {
  for (ChunkId c : created) pool_.release(c);
}

// Picks free chunks for `bytes`, largest that still fits first, so few
// handles are stitched; allows one chunk that overshoots by at most the fit
// slack. True when the chunks cover `bytes` (else the caller creates the
// deficit). Chunks of the worker's reserve and chunks mapped in `exclude`
// are skipped.
bool Lake::select_free_chunks(std::size_t bytes, std::vector<ChunkId>* chosen,
                              SegmentId exclude) const {
  auto skipped = [&](ChunkId c) { return pool_[c].reserve || table_.maps_chunk(exclude, c); };
  const FreeChunkSet& free = pool_.free_set();
  std::size_t remaining = bytes;
  // Walk down from the largest chunk that fits; everything at or above `it`
  // has been looked at.
  auto it = free.upper_bound({remaining, kNone});
  while (remaining > 0 && chosen->size() < options_.max_stitch_chunks && it != free.begin()) {
    --it;
    if (it->first > remaining) {
      auto fits = free.upper_bound({remaining, kNone});
      if (*fits < *it) it = fits;  // skip the ones now too large
      continue;
    }
    if (skipped(it->second)) continue;
    chosen->push_back(it->second);
    remaining -= it->first;
  }
  if (remaining == 0) return true;
  if (chosen->size() < options_.max_stitch_chunks) {
    for (auto fit = free.lower_bound({remaining, 0});
         fit != free.end() && fit->first <= remaining + slack_for(bytes); ++fit) {
      if (std::find(chosen->begin(), chosen->end(), fit->second) != chosen->end() ||
          skipped(fit->second))
        continue;
      chosen->push_back(fit->second);
      return true;
    }
  }
  return false;
}

bool Lake::growth_leaves_out_free_chunks(SegmentId s, std::size_t need, std::size_t counted) const {
  std::vector<ChunkId> chosen;
  if (select_free_chunks(need, &chosen, s)) return false;
  for (ChunkId k : chosen) counted += pool_.size(k);
  return counted < pool_.free_bytes();
}

bool Lake::gather_chunks(std::size_t bytes, bool create, std::vector<ChunkId>* chosen,
                         std::vector<ChunkId>* created, SegmentId exclude) {
  auto largest_first = [&] {
    std::stable_sort(chosen->begin(), chosen->end(),
                     [&](ChunkId a, ChunkId b) { return pool_.size(a) > pool_.size(b); });
  };
  if (select_free_chunks(bytes, chosen, exclude)) {
    largest_first();
    return true;
  }
  if (!create) return false;
  std::size_t have = 0;
  for (ChunkId c : *chosen) have += pool_.size(c);
  // New memory: the worker's reserve first (created already), then the
  // backend for what it does not cover.
  const std::size_t before = chosen->size();
  const FreeChunkSet& free = pool_.free_set();
  for (auto it = free.rbegin(); it != free.rend() && have < bytes; ++it) {
    if (!pool_[it->second].reserve || table_.maps_chunk(exclude, it->second)) continue;
    chosen->push_back(it->second);
    have += it->first;
  }
  if (chosen->size() > before) ++stats_.reserve_hits.current;
  if (have >= bytes) {
    largest_first();
    return true;
  }
  ++stats_.reserve_misses.current;
  for (std::size_t size : chunk_sizes_for(bytes - have, options_)) {
    const ChunkId c = pool_.create(size);
    if (c == kNone) {
      release_all(*created);
      created->clear();
      return false;
    }
    created->push_back(c);
  }
  chosen->insert(chosen->end(), created->begin(), created->end());
  largest_first();
  return true;
}

SegmentId Lake::build_segment_for(std::size_t bytes, bool create, bool* stitched) {
  std::vector<ChunkId> chosen, created;
  if (!gather_chunks(bytes, create, &chosen, &created)) return kNone;
  *stitched = chosen.size() > created.size();
  const SegmentId s = table_.map_segment(std::move(chosen), *stitched);
  if (s == kNone) {
    release_all(created);
    return kNone;
  }
  if (!options_.defer_eviction) table_.enforce_budget(s);
  return s;
}

}  // namespace memlake::lake
