// Chunks and segments: creating and releasing physical chunks, mapping them
// into virtual ranges (one SetAccess per range), chunk ownership, the idle
// segment cache and its budget.
#include <algorithm>
#include <cassert>
#include <string>

#include "lake/lake.hpp"
#include "memlake/errors.hpp"

namespace memlake::lake {

void Lake::backend_failure(const char* what, Status s) const {
  backend_failure(what, s, backend_.last_error());
}

void Lake::backend_failure(const char* what, Status s, const std::string& cause) const {
  throw backend_error(std::string("memlake: ") + what + " failed (" + status_name(s) +
                      "): " + cause);
}

ChunkId Lake::create_chunk(std::size_t size) {
  if (reserved_bytes() + creating_bytes_ + size > options_.capacity) return kNone;
  ChunkHandle handle = 0;
  Status s = backend_.create_chunk(size, &handle);
  if (s == Status::out_of_memory) return kNone;
  if (s != Status::ok) backend_failure("create_chunk", s);
  return adopt_chunk(handle, size);
}

// Enters a handle the backend created into the lake as a free chunk.
ChunkId Lake::adopt_chunk(ChunkHandle handle, std::size_t size) {
  ChunkId id;
  if (!free_chunk_slots_.empty()) {
    id = free_chunk_slots_.back();
    free_chunk_slots_.pop_back();
  } else {
    id = static_cast<ChunkId>(chunks_.size());
    chunks_.emplace_back();
  }
  Chunk& c = chunks_[id];
  c = Chunk{};
  c.handle = handle;
  c.size = size;
  c.in_use = true;
  free_chunks_.emplace(size, id);
  free_chunk_bytes_ += size;
  gauge(stats_.reserved_bytes, static_cast<std::int64_t>(size));
  gauge(stats_.chunks, 1);
  ++stats_.chunks_created.current;
  return id;
}

// The chunk must be free and mapped nowhere.
void Lake::release_chunk(ChunkId id) {
  Chunk& c = chunks_[id];
  assert(c.owner == kNone && c.mapped_in.empty() && c.pins == 0);
  Status s = backend_.release_chunk(c.handle);
  if (s != Status::ok) backend_failure("release_chunk", s);
  if (c.reserve) gauge(stats_.reserve_bytes, -static_cast<std::int64_t>(c.size));
  free_chunks_.erase({c.size, id});
  free_chunk_bytes_ -= c.size;
  gauge(stats_.reserved_bytes, -static_cast<std::int64_t>(c.size));
  gauge(stats_.chunks, -1);
  ++stats_.chunks_released.current;
  c = Chunk{};
  free_chunk_slots_.push_back(id);
}

// Reserves a range for `chunks` (handle, size), maps each and grants access
// once over the whole range. Touches no lake state, so the worker runs it
// without the lock (on chunks it has pinned). On failure everything done is
// undone; the status says why.
Status Lake::map_range(const std::vector<std::pair<ChunkHandle, std::size_t>>& chunks,
                       MappedRange* out) const {
  std::size_t total = 0;
  for (auto [handle, size] : chunks) total += size;
  // Virtual space is cheap: reserve room for later blocks to continue this
  // one in place (see try_continuation).
  const std::size_t g = options_.granularity;
  const std::size_t va_size = (std::max(4 * total, total + (std::size_t{1} << 30)) + g - 1) / g * g;
  DevicePtr va = 0;
  Status s = backend_.reserve(va_size, &va);
  if (s != Status::ok) {
    out->error = backend_.last_error();
    return s;
  }
  std::vector<std::size_t> offsets;
  offsets.reserve(chunks.size());
  std::size_t offset = 0;
  // On failure, keep the cause, undo what was done, and hand back whatever
  // the backend refused to undo for the retry list.
  auto fail = [&](Status st, std::size_t mapped) {
    out->error = backend_.last_error();
    Zombie z{va, va_size, {}};
    for (std::size_t j = 0; j < mapped; ++j)
      z.mapped.emplace_back(va + offsets[j], chunks[j].second);
    if (!retire(z, true)) out->leftover.push_back(std::move(z));
    return st;
  };
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    s = backend_.map(va + offset, chunks[i].second, chunks[i].first);
    if (s != Status::ok) return fail(s, i);
    offsets.push_back(offset);
    offset += chunks[i].second;
  }
  s = backend_.set_access(va, total);
  if (s != Status::ok) return fail(s, chunks.size());
  out->va = va;
  out->va_size = va_size;
  out->total = total;
  out->offsets = std::move(offsets);
  return Status::ok;
}

// Maps `ids` into a new segment. kNone when virtual or physical memory runs
// out; other backend failures throw.
SegmentId Lake::map_segment(std::vector<ChunkId> ids, bool stitched) {
  std::vector<std::pair<ChunkHandle, std::size_t>> handles;
  handles.reserve(ids.size());
  for (ChunkId c : ids) handles.emplace_back(chunks_[c].handle, chunks_[c].size);
  MappedRange range;
  Status s = map_range(handles, &range);
  for (Zombie& z : range.leftover) zombies_.push_back(std::move(z));
  if (s == Status::out_of_va || s == Status::out_of_memory) return kNone;
  if (s != Status::ok) backend_failure("mapping a segment", s, range.error);
  return register_segment(std::move(ids), std::move(range), stitched);
}

// Enters a mapped range into the lake's tables.
SegmentId Lake::register_segment(std::vector<ChunkId> ids, MappedRange range, bool stitched) {
  catch_up();  // the new segment starts from the chunks' state, as the others
  const DevicePtr va = range.va;
  const std::size_t total = range.total;
  const std::size_t va_size = range.va_size;
  std::vector<std::size_t> offsets = std::move(range.offsets);
  SegmentId id;
  if (!free_segment_slots_.empty()) {
    id = free_segment_slots_.back();
    free_segment_slots_.pop_back();
  } else {
    id = static_cast<SegmentId>(segments_.size());
    segments_.emplace_back();
  }
  Segment& seg = segments_[id];
  seg = Segment{};
  seg.va = va;
  seg.size = total;
  seg.va_size = va_size;
  seg.stitched = stitched;
  seg.in_use = true;
  seg.offsets = std::move(offsets);
  for (std::uint32_t i = 0; i < ids.size(); ++i) {
    chunks_[ids[i]].mapped_in.push_back({id, i});
    if (chunks_[ids[i]].owner != kNone) ++seg.busy;
  }
  seg.chunks = std::move(ids);
  for (std::uint32_t i = 0; i < seg.chunks.size(); ++i) {
    if (chunks_[seg.chunks[i]].owner == kNone) slots_freed(id, i, 1);
  }
  segment_at_.emplace(va, id);
  gauge(stats_.mapped_bytes, static_cast<std::int64_t>(total));
  gauge(stats_.segments, 1);
  if (stitched) {
    gauge(stats_.stitched_bytes, static_cast<std::int64_t>(total));
    ++stats_.stitches.current;
  }
  seg.last_used = ++clock_;
  unpinned_by_age_.emplace(seg.last_used, id);
  if (seg.busy == 0) idle_insert(id);
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_map(va, total, stitched); });
  return id;
}

// Maps free chunks at the end of segment `s`; an idle one moves in the idle
// index, which is keyed by size. False when the backend refuses.
bool Lake::extend_segment(SegmentId s, std::vector<ChunkId> ids) {
  catch_up();  // the new slots join as the chunks are now
  Segment& seg = segments_[s];
  std::size_t total = 0;
  for (ChunkId c : ids) total += chunks_[c].size;
  if (seg.sealed || seg.size + total > seg.va_size) return false;
  const DevicePtr base = seg.va + seg.size;
  // On failure: keep the cause, undo, and if the backend refuses to undo,
  // stop extending this segment (its room is not clean) and retry later.
  auto fail = [&](const char* what, Status st, std::size_t mapped) {
    const std::string cause = backend_.last_error();
    Zombie z{0, 0, {}};  // no reservation of its own: the segment's
    for (std::size_t j = 0, o = 0; j < mapped; o += chunks_[ids[j]].size, ++j)
      z.mapped.emplace_back(base + o, chunks_[ids[j]].size);
    if (!retire(z, true)) {
      zombies_.push_back(std::move(z));
      seg.sealed = true;
    }
    if (st == Status::out_of_memory) return false;
    backend_failure(what, st, cause);
  };
  std::size_t offset = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Status st = backend_.map(base + offset, chunks_[ids[i]].size, chunks_[ids[i]].handle);
    if (st != Status::ok) return fail("map", st, i);
    offset += chunks_[ids[i]].size;
  }
  if (Status st = backend_.set_access(base, total); st != Status::ok)
    return fail("set_access", st, ids.size());
  // A run reaching the old end changes its byte length: take it out while
  // the segment grows, then let the new slots join it.
  std::uint32_t tail_start = 0, tail_count = 0;
  if (!seg.runs.empty()) {
    auto last = std::prev(seg.runs.end());
    if (last->first + last->second == seg.chunks.size()) {
      tail_start = last->first;
      tail_count = last->second;
      run_erase(s, last);
    }
  }
  offset = seg.size;
  if (!seg.stitched) gauge(stats_.stitched_bytes, static_cast<std::int64_t>(seg.size));
  const bool idle = seg.busy == 0;  // the new chunks are free: it stays idle
  if (idle) idle_erase(s);
  seg.size += total;
  if (idle) idle_insert(s);
  const auto first_new = static_cast<std::uint32_t>(seg.chunks.size());
  for (ChunkId c : ids) {
    chunks_[c].mapped_in.push_back({s, static_cast<std::uint32_t>(seg.chunks.size())});
    seg.chunks.push_back(c);
    seg.offsets.push_back(offset);
    offset += chunks_[c].size;
  }
  if (tail_count) run_insert(s, tail_start, tail_count);
  if (seg.indexed)
    for (std::uint32_t i = first_new; i < seg.chunks.size(); ++i) slots_freed(s, i, 1);
  seg.stitched = true;
  gauge(stats_.mapped_bytes, static_cast<std::int64_t>(total));
  gauge(stats_.stitched_bytes, static_cast<std::int64_t>(total));
  ++stats_.stitches.current;
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_map(base, total, true); });
  return true;
}

// The segment must own no chunk. Its entries leave the lake's tables first,
// so a failing unmap cannot leave them half-updated; whatever the backend
// refused stays on the retry list (retire_zombies). False when something was
// refused.
bool Lake::unmap_segment(SegmentId id) {
  Zombie z = detach_segment(id);
  if (retire(z, !mapped_inside(z.va, z.va_size))) return true;
  if (last_failure_.empty()) last_failure_ = z.error;  // the first cause, not its consequences
  zombies_.push_back(std::move(z));
  return false;
}

// Takes a segment that owns no chunk out of every table; returns what is
// left to unmap and unreserve.
Lake::Zombie Lake::detach_segment(SegmentId id) {
  catch_up();
  Segment& seg = segments_[id];
  assert(!seg.pinned());
  unpinned_by_age_.erase({seg.last_used, id});
  if (seg.busy == 0) idle_erase(id);
  while (!seg.runs.empty()) run_erase(id, std::prev(seg.runs.end()));
  Zombie z{seg.va, seg.va_size, {}};
  for (std::uint32_t i = 0; i < seg.chunks.size(); ++i) {
    z.mapped.emplace_back(seg.va + seg.offsets[i], chunks_[seg.chunks[i]].size);
    std::erase(chunks_[seg.chunks[i]].mapped_in, Mapping{id, i});
  }
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_unmap(seg.va, seg.size); });
  if (seg.prepared) stats_.prestitch_wasted_bytes.current += static_cast<std::int64_t>(seg.size);
  if (seg.reserve) std::erase(reserve_segments_, id);
  std::erase(consolidated_, id);
  segment_at_.erase(seg.va);
  gauge(stats_.mapped_bytes, -static_cast<std::int64_t>(seg.size));
  gauge(stats_.segments, -1);
  if (seg.stitched) gauge(stats_.stitched_bytes, -static_cast<std::int64_t>(seg.size));
  seg = Segment{};
  free_segment_slots_.push_back(id);
  return z;
}

// Unmaps what is left of a dropped range, then frees its addresses (if it
// has a reservation of its own). Const: the worker calls it without the lock.
bool Lake::retire(Zombie& z, bool may_unreserve) const {
  std::erase_if(z.mapped, [&](const std::pair<DevicePtr, std::size_t>& m) {
    Status s = backend_.unmap(m.first, m.second);
    if (s != Status::ok) z.error = std::string("unmap failed: ") + backend_.last_error();
    return s == Status::ok;
  });
  if (!z.mapped.empty()) return false;
  if (z.va_size == 0) return true;
  if (!may_unreserve) {
    if (z.error.empty()) z.error = "unreserve deferred: a refused unmap lies inside the range";
    return false;
  }
  Status s = backend_.unreserve(z.va, z.va_size);
  if (s != Status::ok) z.error = std::string("unreserve failed: ") + backend_.last_error();
  return s == Status::ok;
}

// A range is never unreserved while a mapping the backend refused to remove
// lies inside it (an extension's undo lies inside its segment's room).
bool Lake::mapped_inside(DevicePtr va, std::size_t size) const {
  for (const Zombie& z : zombies_) {
    for (const auto& [at, len] : z.mapped)
      if (at >= va && at < va + size) return true;
  }
  return false;
}

bool Lake::retire_zombies() {
  // Unmap whatever the backend now allows, then free the ranges with nothing
  // mapped inside them any more.
  for (Zombie& z : zombies_) retire(z, /*may_unreserve=*/false);
  std::vector<bool> done(zombies_.size());
  for (std::size_t i = 0; i < zombies_.size(); ++i) {
    Zombie& z = zombies_[i];
    done[i] = z.mapped.empty() &&
              (z.va_size == 0 || (!mapped_inside(z.va, z.va_size) && retire(z, true)));
  }
  std::vector<Zombie> left;
  for (std::size_t i = 0; i < zombies_.size(); ++i) {
    if (!done[i]) left.push_back(std::move(zombies_[i]));
  }
  zombies_ = std::move(left);
  if (!zombies_.empty() && last_failure_.empty()) last_failure_ = zombies_.front().error;
  return zombies_.empty();
}

// Mapped ranges cost VA and, on the GPU, unmap time later: keep segments
// that own nothing while the mapped total stays within the budget, dropping
// the least recently used first.
bool Lake::over_budget() const {
  return mapped_bytes() > mapping_budget() && !unpinned_by_age_.empty();
}

std::size_t Lake::mapping_budget() const {
  return static_cast<std::size_t>((1.0 + options_.stitch_cache_ratio) *
                                  static_cast<double>(reserved_bytes()));
}

// Detaches least recently used segments that own nothing until the mapped
// total is within the budget; the unmapping is left to the caller.
void Lake::plan_evictions(std::vector<Zombie>* out, SegmentId keep) {
  const std::size_t budget = mapping_budget();
  auto it = unpinned_by_age_.begin();
  while (mapped_bytes() > budget && it != unpinned_by_age_.end()) {
    SegmentId victim = it->second;
    ++it;
    const Segment& seg = segments_[victim];
    if (victim == keep || mapped_inside(seg.va, seg.va_size) || !unmappable(seg)) continue;
    out->push_back(detach_segment(victim));
    ++stats_.evictions.current;
  }
}

void Lake::enforce_cache_budget(SegmentId keep) {
  std::vector<Zombie> victims;
  plan_evictions(&victims, keep);
  for (Zombie& z : victims) {
    if (!retire(z, true)) zombies_.push_back(std::move(z));
  }
}

void Lake::claim(ChunkId id, SegmentId s, std::size_t offset_in_segment) {
  Chunk& c = chunks_[id];
  assert(c.owner == kNone && c.live == 0 && c.pieces == nullptr);
  free_chunks_.erase({c.size, id});
  free_chunk_bytes_ -= c.size;
  if (c.reserve) {
    c.reserve = false;
    gauge(stats_.reserve_bytes, -static_cast<std::int64_t>(c.size));
  }
  if (segments_[s].reserve) dissolve_reserve(s);
  c.owner = s;
  c.owner_offset = offset_in_segment;
  c.pieces = new_piece({0, c.size, id, false, nullptr, nullptr});
  pin(s, &Segment::owned, true);
  note_chunk_change(id);
}

// The chunk's last live piece is gone: it is whole and free again.
void Lake::unclaim(ChunkId id) {
  Chunk& c = chunks_[id];
  assert(c.live == 0 && c.pieces && c.pieces->next == nullptr);
  delete_piece(c.pieces);
  c.pieces = nullptr;
  pin(c.owner, &Segment::owned, false);
  c.owner = kNone;
  free_chunks_.emplace(c.size, id);
  free_chunk_bytes_ += c.size;
  note_chunk_change(id);
}

std::size_t Lake::run_bytes(const Segment& seg, std::uint32_t start, std::uint32_t count) const {
  const std::size_t end = start + count < seg.chunks.size() ? seg.offsets[start + count] : seg.size;
  return end - seg.offsets[start];
}

void Lake::run_insert(SegmentId s, std::uint32_t start, std::uint32_t count) {
  Segment& seg = segments_[s];
  seg.runs.emplace(start, count);
  free_runs_.insert({run_bytes(seg, start, count), s, start});
}

void Lake::run_erase(SegmentId s, SlotRuns::iterator it) {
  Segment& seg = segments_[s];
  free_runs_.erase({run_bytes(seg, it->first, it->second), s, it->first});
  seg.runs.erase(it);
}

void Lake::unindex(SegmentId s) {
  Segment& seg = segments_[s];
  while (!seg.runs.empty()) run_erase(s, std::prev(seg.runs.end()));
  seg.indexed = false;
}

// Slots [index, index + count) of segment `s` now hold free chunks: one run
// with the runs beside them.
void Lake::slots_freed(SegmentId s, std::uint32_t index, std::uint32_t count) {
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

// Slots [index, index + count) of segment `s` now hold owned chunks: split
// the run they were in.
void Lake::slots_claimed(SegmentId s, std::uint32_t index, std::uint32_t count) {
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

// A request took new memory from a reserve range: the range is ordinary
// memory from now on, and the worker makes another reserve.
void Lake::dissolve_reserve(SegmentId s) {
  Segment& seg = segments_[s];
  seg.reserve = false;
  std::erase(reserve_segments_, s);
  for (ChunkId id : seg.chunks) {
    Chunk& c = chunks_[id];
    if (!c.reserve) continue;
    c.reserve = false;
    gauge(stats_.reserve_bytes, -static_cast<std::int64_t>(c.size));
  }
}

// A claim or free of chunk `id` flips whether the segments mapping it are
// behind: their busy counts, the idle index and their free runs. They are
// left as they are until something reads them: training frees a block and
// claims the same chunks again before any request looks for an idle segment
// or a free run, and then the ~20 segments that map a chunk (stitched ranges
// over it) need no change at all. Kept up to date on every claim and free,
// that upkeep was 60% of the allocation path's instructions on a repeated
// MoE trace, and the slowest calls touched every one of those segments for
// each chunk of a block.
void Lake::note_chunk_change(ChunkId id) {
  std::uint8_t& lag = chunks_[id].run_lag;
  lag ^= kRunBehind;
  if (!(lag & kRunBehind) || (lag & kRunListed)) return;
  lag |= kRunListed;
  lagging_chunks_.push_back(id);
}

void Lake::catch_up() {
  if (lagging_chunks_.empty()) return;
  for (ChunkId id : lagging_chunks_) {
    Chunk& c = chunks_[id];
    if (c.run_lag & kRunBehind) {
      const bool owned = c.owner != kNone;
      std::vector<Mapping>& to = owned ? caught_claimed_ : caught_freed_;
      for (Mapping m : c.mapped_in) {
        Segment& seg = segments_[m.segment];
        if (owned) {
          if (seg.busy++ == 0) idle_erase(m.segment);
        } else if (--seg.busy == 0) {
          idle_insert(m.segment);
        }
        if (seg.indexed) to.push_back(m);
        ++stats_.caught_up_mappings.current;
      }
    }
    c.run_lag = 0;
  }
  lagging_chunks_.clear();
  apply_stretches(caught_claimed_, /*freed=*/false);
  apply_stretches(caught_freed_, /*freed=*/true);
  caught_claimed_.clear();
  caught_freed_.clear();
}

// Runs catch up with claimed (or freed) slots in one pass: a block's chunks
// are mostly neighbouring slots in every segment that maps them (in either
// order: a consolidated range may list them backwards), so each segment's
// stretch of neighbouring slots grows while the slots come and costs one run
// split or merge when it ends, instead of one per slot. Any order is
// correct: a stretch that ends early is only one more split or merge.
void Lake::apply_stretches(const std::vector<Mapping>& slots, bool freed) {
  if (open_stretches_.size() < segments_.size()) open_stretches_.resize(segments_.size());
  auto close = [&](SegmentId s, const Stretch& st) {
    if (freed)
      slots_freed(s, st.start, st.count);
    else
      slots_claimed(s, st.start, st.count);
  };
  for (Mapping m : slots) {
    Stretch& st = open_stretches_[m.segment];
    if (st.count == 0) {
      st = {m.index, 1};
      touched_segments_.push_back(m.segment);
    } else if (m.index == st.start + st.count) {
      ++st.count;
    } else if (m.index + 1 == st.start) {
      --st.start;
      ++st.count;
    } else {
      close(m.segment, st);
      st = {m.index, 1};
    }
  }
  for (SegmentId s : touched_segments_) {
    close(s, open_stretches_[s]);
    open_stretches_[s] = {};
  }
  touched_segments_.clear();
}

// Called on placement, while the segment is pinned (so it is in no LRU set).
void Lake::touch(SegmentId s) {
  assert(segments_[s].pinned());
  segments_[s].last_used = ++clock_;
}

// One more or one less of a segment's pins (owned chunks or borrowing
// allocations): it is in the LRU index of evictable segments while it has none.
void Lake::pin(SegmentId s, std::uint32_t Segment::*count, bool add) {
  Segment& seg = segments_[s];
  const bool was = seg.pinned();
  assert(add || seg.*count > 0);
  if (add)
    ++(seg.*count);
  else
    --(seg.*count);
  if (was == seg.pinned()) return;
  if (was)
    unpinned_by_age_.emplace(seg.last_used, s);
  else
    unpinned_by_age_.erase({seg.last_used, s});
}

void Lake::idle_insert(SegmentId s) {
  idle_by_size_.emplace(segments_[s].size, s);
  gauge(stats_.cached_segments, 1);
}

void Lake::idle_erase(SegmentId s) {
  idle_by_size_.erase({segments_[s].size, s});
  gauge(stats_.cached_segments, -1);
}

}  // namespace memlake::lake
