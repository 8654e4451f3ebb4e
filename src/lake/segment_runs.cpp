// What the ladder reads about segments: idle segments by size, free runs by
// bytes, and the catch-up that brings them up to date with chunks taken or
// given back since.
//
// A take or give-back only marks its chunk behind (note_chunk_change); the
// segments mapping the chunk catch up (catch_up) when something reads them.
// A repeated training step frees a block and takes the same chunks again
// before any request reads the segments, so the two marks cancel and the
// many stitched ranges over those chunks need no change at all.
#include <algorithm>
#include <cassert>
#include <vector>

#include "common/stat_update.hpp"
#include "lake/segment_table.hpp"

namespace memlake::lake {

SegmentId SegmentTable::find_idle(std::size_t bytes, std::size_t most) const {
  for (auto it = idle_by_size_.lower_bound({bytes, 0});
       it != idle_by_size_.end() && it->first <= most; ++it)
    if (!segments_[it->second].reserve) return it->second;
  return kNone;
}

bool SegmentTable::find_free_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const {
  for (auto it = free_runs_.lower_bound({bytes, 0, 0}); it != free_runs_.end(); ++it) {
    if (segments_[it->segment].reserve) continue;  // the last resort: find_reserve_run
    *s = it->segment;
    *start = it->start;
    return true;
  }
  return false;
}

bool SegmentTable::find_reserve_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const {
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

std::size_t SegmentTable::run_bytes(const Segment& seg, std::uint32_t start,
                                    std::uint32_t count) const {
  const std::size_t end = start + count < seg.chunks.size() ? seg.offsets[start + count] : seg.size;
  return end - seg.offsets[start];
}

void SegmentTable::run_insert(SegmentId s, std::uint32_t start, std::uint32_t count) {
  Segment& seg = segments_[s];
  seg.runs.emplace(start, count);
  free_runs_.insert({run_bytes(seg, start, count), s, start});
}

void SegmentTable::run_erase(SegmentId s, SlotRuns::iterator it) {
  Segment& seg = segments_[s];
  free_runs_.erase({run_bytes(seg, it->first, it->second), s, it->first});
  seg.runs.erase(it);
}

// Slots [index, index + count) of segment `s` now hold free chunks: one run
// with the runs beside them.
void SegmentTable::slots_freed(SegmentId s, std::uint32_t index, std::uint32_t count) {
  Segment& seg = segments_[s];
  std::uint32_t start = index;
  auto right = seg.runs.find(index + count);
  if (right != seg.runs.end()) {
    count += right->second;
    run_erase(s, right);
  }
  auto left = seg.runs.lower_bound(index);
  if (left != seg.runs.begin()) {
    --left;
    if (left->first + left->second == index) {
      start = left->first;
      count += left->second;
      run_erase(s, left);
    }
  }
  run_insert(s, start, count);
}

// Slots [index, index + count) of segment `s` now hold taken chunks: the
// run they were in splits.
void SegmentTable::slots_claimed(SegmentId s, std::uint32_t index, std::uint32_t count) {
  Segment& seg = segments_[s];
  auto it = seg.runs.upper_bound(index);
  assert(it != seg.runs.begin());
  --it;
  const std::uint32_t start = it->first, length = it->second;
  assert(index >= start && index + count <= start + length);
  run_erase(s, it);
  if (index > start) run_insert(s, start, index - start);
  if (index + count < start + length) run_insert(s, index + count, start + length - index - count);
}

void SegmentTable::note_run_change(std::span<const ChunkId> ids, SegmentId s) {
  for (ChunkId id : ids) {
    if (s != kNone) states_[id].home = s;
    note_chunk_change(id);
  }
}

void SegmentTable::rehome(SegmentId s, const std::vector<ChunkId>& ids) {
  for (ChunkId c : ids) rehome(s, c);
}

void SegmentTable::rehome(SegmentId s, ChunkId c) {
  if (states_[c].home == s) return;
  states_[c].home = s;
  note_chunk_change(c);
}

void SegmentTable::unhome(SegmentId s) {
  for (ChunkId c : segments_[s].chunks) {
    ChunkState& m = states_[c];
    if (m.home != s) continue;
    m.home = kNone;
    for (auto it = mapped_in_[c].rbegin(); it != mapped_in_[c].rend() && m.home == kNone; ++it)
      if (it->segment != s) m.home = it->segment;
    note_chunk_change(c);
  }
}

// Each segment mapping a listed chunk compares whether it offered the chunk
// as of the last catch-up with whether it offers it now; only those that
// differ change. A chunk taken and given back (or rehomed and back) in
// between changes nothing. Only its home offers a free chunk: while the
// home is the one seen last, that one mapping is all that can differ, and a
// chunk mapped in dozens of stitched ranges costs no walk over them.
void SegmentTable::catch_up() {
  if (lagging_chunks_.empty()) return;
  for (ChunkId id : lagging_chunks_) {
    ChunkState& m = states_[id];
    m.listed = false;
    const bool free_now = pool_.is_free(id);
    if (free_now == m.seen_free && m.home == m.seen_home) continue;
    if (m.home == m.seen_home) {
      if (m.home != kNone) catch_up_mapping({m.home, m.seen_home_slot}, free_now);
    } else {
      for (Mapping where : mapped_in_[id]) {
        if (where.segment == m.home) m.seen_home_slot = where.index;
        const bool now = free_now && m.home == where.segment;
        if (m.seen_offered(where.segment) != now) catch_up_mapping(where, now);
      }
      m.seen_home = m.home;
    }
    m.seen_free = free_now;
  }
  lagging_chunks_.clear();
  apply_stretches(caught_claimed_, /*freed=*/false);
  apply_stretches(caught_freed_, /*freed=*/true);
  caught_claimed_.clear();
  caught_freed_.clear();
}

void SegmentTable::catch_up_mapping(Mapping where, bool now) {
  Segment& seg = segments_[where.segment];
  if (!now) {
    if (seg.busy++ == 0) idle_erase(where.segment);
  } else if (--seg.busy == 0) {
    idle_insert(where.segment);
  }
  (now ? caught_freed_ : caught_claimed_).push_back(where);
  ++stats_.caught_up_mappings.current;
}

// Runs catch up with the slots taken (or given back) in one pass: a block's
// chunks are mostly neighbouring slots in every segment that maps them (in
// either order: a stitched range may list them backwards), so each
// segment's stretch of neighbouring slots grows while the slots come and
// costs one run split or merge when it ends, instead of one per slot. Any
// order is correct: a stretch that ends early is only one more split or merge.
void SegmentTable::apply_stretches(const std::vector<Mapping>& slots, bool freed) {
  if (open_stretches_.size() < segments_.size()) open_stretches_.resize(segments_.size());
  auto close = [&](SegmentId s, const Stretch& st) {
    if (freed)
      slots_freed(s, st.start, st.count);
    else
      slots_claimed(s, st.start, st.count);
  };
  // The stretch of the segment met last stays in registers while the slots
  // stay in that segment (the common case): growing it in memory would make
  // every slot load what the one before had just stored.
  SegmentId current = kNone;
  Stretch st;
  for (Mapping m : slots) {
    if (m.segment != current) {
      if (current != kNone) open_stretches_[current] = st;
      current = m.segment;
      st = open_stretches_[current];
      if (st.count == 0) {
        st = {m.index, 1};
        touched_segments_.push_back(current);
        continue;
      }
    }
    if (m.index == st.start + st.count) {
      ++st.count;
    } else if (m.index + 1 == st.start) {
      --st.start;
      ++st.count;
    } else {
      close(current, st);
      st = {m.index, 1};
    }
  }
  if (current != kNone) open_stretches_[current] = st;
  for (SegmentId s : touched_segments_) {
    close(s, open_stretches_[s]);
    open_stretches_[s] = {};
  }
  touched_segments_.clear();
}

std::size_t SegmentTable::behind_chunk_count() const {
  std::size_t n = 0;
  for (ChunkId c : lagging_chunks_)
    n += states_[c].seen_free != pool_.is_free(c) || states_[c].seen_home != states_[c].home;
  return n;
}

void SegmentTable::idle_insert(SegmentId s) {
  idle_by_size_.emplace(segments_[s].size, s);
  gauge(stats_.cached_segments, 1);
}

void SegmentTable::idle_erase(SegmentId s) {
  idle_by_size_.erase({segments_[s].size, s});
  gauge(stats_.cached_segments, -1);
}

}  // namespace memlake::lake
