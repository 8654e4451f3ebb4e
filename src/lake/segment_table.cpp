// Segments: mapping chunks into virtual ranges (one SetAccess per range),
// unmapping them, the budget of mapped bytes, and ranges the backend refused
// to unmap.
#include "lake/segment_table.hpp"

#include <algorithm>
#include <cassert>
#include <string>

#include "common/stat_update.hpp"
#include "memlake/errors.hpp"

namespace memlake::lake {

SegmentTable::SegmentTable(Backend& backend, ChunkPool& pool, const SegmentTableOptions& options,
                           Stats& stats, ObserverList& observers, NodePool& nodes, Refusal& refusal)
    : backend_(backend),
      pool_(pool),
      options_(options),
      stats_(stats),
      observers_(observers),
      idle_by_size_(PoolAllocator<SizeKey>(&nodes)),
      unpinned_by_age_(PoolAllocator<AgeKey>(&nodes)),
      segment_at_(PoolAllocator<BaseEntry>(&nodes)),
      free_runs_(options.granularity),
      refusal_(refusal),
      limits_(backend.limits()) {
  const std::size_t budget = units_budget();
  stats_.mapping_units_budget.current =
      budget == BackendLimits::kUnbounded ? 0 : static_cast<std::int64_t>(budget);
}

SegmentTable::~SegmentTable() {
  retire_zombies();
  for (Segment& seg : segments_) {
    if (!seg.in_use) continue;
    for (std::size_t i = 0; i < seg.chunks.size(); ++i)
      backend_.unmap(seg.va + seg.offsets[i], pool_.size(seg.chunks[i]));
    backend_.unreserve(seg.va, seg.va_size);
  }
}

void SegmentTable::chunk_added(ChunkId c) {
  if (states_.size() <= c) {
    states_.resize(c + 1);
    mapped_in_.resize(c + 1);
  }
  states_[c] = ChunkState{};
  mapped_in_[c].clear();
}

SegmentId SegmentTable::containing(DevicePtr ptr) const {
  auto it = segment_at_.upper_bound(ptr);
  if (it == segment_at_.begin()) return kNone;
  const SegmentId s = std::prev(it)->second;
  return ptr < segments_[s].va + segments_[s].size ? s : kNone;
}

bool SegmentTable::maps_chunk(SegmentId s, ChunkId c) const {
  const auto& m = mapped_in_[c];
  return s != kNone && std::any_of(m.begin(), m.end(), [&](Mapping x) { return x.segment == s; });
}

void SegmentTable::backend_failure(const char* what, Status s, const std::string& cause) const {
  throw backend_error(std::string("memlake: ") + what + " failed (" + status_name(s) +
                      "): " + cause);
}

Status SegmentTable::map_range(const std::vector<std::pair<ChunkHandle, std::size_t>>& chunks,
                               MappedRange* out, std::size_t chunks_per_access) const {
  std::size_t total = 0;
  for (auto [handle, size] : chunks) total += size;
  // Virtual space is cheap: room for later blocks to continue this one in
  // place (the continuation and extend rungs).
  const std::size_t g = options_.granularity;
  const std::size_t va_size = (std::max(4 * total, total + (std::size_t{1} << 30)) + g - 1) / g * g;
  // What needs the heap comes before the backend is asked, so that nothing
  // it gives can be lost when the heap runs out.
  std::vector<std::size_t> offsets;
  offsets.reserve(chunks.size());
  Zombie undo{0, va_size, {}, {}};
  undo.mapped.reserve(chunks.size());
  out->leftover.reserve(1);
  Status s = backend_.reserve(va_size, &undo.va);
  if (s != Status::ok) {
    out->error = backend_.last_error();
    return s;
  }
  const DevicePtr va = undo.va;
  // On failure, keep the cause, undo what was done, and hand back whatever
  // the backend refused to undo for the retry list.
  auto fail = [&](Status st) {
    try {
      out->error = backend_.last_error();
    } catch (const std::bad_alloc&) {  // the undo below matters more than the message
    }
    if (!retire(undo, true)) out->leftover.push_back(std::move(undo));
    return st;
  };
  std::size_t offset = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    s = backend_.map(va + offset, chunks[i].second, chunks[i].first);
    if (s != Status::ok) return fail(s);
    offsets.push_back(offset);
    undo.mapped.emplace_back(va + offset, chunks[i].second);
    offset += chunks[i].second;
  }
  for (std::size_t i = 0; i < chunks.size();) {
    const std::size_t first = i;
    const std::size_t end =
        chunks.size() - i <= chunks_per_access ? chunks.size() : i + chunks_per_access;
    std::size_t bytes = 0;
    for (; i < end; ++i) bytes += chunks[i].second;
    s = backend_.set_access(va + offsets[first], bytes);
    if (s != Status::ok) return fail(s);
  }
  out->va = va;
  out->va_size = va_size;
  out->total = total;
  out->offsets = std::move(offsets);
  out->undo = std::move(undo);
  return Status::ok;
}

SegmentId SegmentTable::map_segment(std::vector<ChunkId> ids, bool stitched) {
  make_room(ids.size() + 1);
  std::vector<std::pair<ChunkHandle, std::size_t>> handles;
  handles.reserve(ids.size());
  for (ChunkId c : ids) handles.emplace_back(pool_[c].handle, pool_.size(c));
  MappedRange range;
  const Status s = map_range(handles, &range);
  for (Zombie& z : range.leftover) zombies_.push_back(std::move(z));
  if (is_exhaustion(s)) {
    refusal_.note(s, "mapping a range", range.error);
    return kNone;
  }
  if (s != Status::ok) backend_failure("mapping a segment", s, range.error);
  Zombie undo = std::move(range.undo);
  try {
    return register_segment(std::move(ids), std::move(range), stitched);
  } catch (...) {  // the host's heap ran out: the range goes back
    retire(undo, true);
    throw;
  }
}

SegmentId SegmentTable::new_slot() {
  if (!free_slots_.empty()) {
    const SegmentId id = free_slots_.back();
    free_slots_.pop_back();
    return id;
  }
  segments_.emplace_back();
  return static_cast<SegmentId>(segments_.size() - 1);
}

SegmentId SegmentTable::register_segment(std::vector<ChunkId> ids, MappedRange range,
                                         bool stitched) {
  catch_up();  // the new segment starts from the chunks' state, as the others
  // Room in each chunk's mappings and in the free slots (for an undo) first.
  for (ChunkId c : ids) mapped_in_[c].reserve(mapped_in_[c].size() + 1);
  free_slots_.reserve(free_slots_.size() + 1);
  const SegmentId id = new_slot();
  Segment& seg = segments_[id];
  seg = Segment{};
  seg.va = range.va;
  seg.size = range.total;
  seg.va_size = range.va_size;
  seg.stitched = stitched;
  seg.in_use = true;
  seg.offsets = std::move(range.offsets);
  // The segment starts from what the others saw of its chunks; becoming
  // their home is a change it catches up with like them.
  for (std::uint32_t i = 0; i < ids.size(); ++i) {
    mapped_in_[ids[i]].push_back({id, i});
    if (!states_[ids[i]].seen_offered(id)) ++seg.busy;
  }
  seg.chunks = std::move(ids);
  seg.last_used = ++clock_;
  try {  // the indexes' inserts may need the heap
    for (std::uint32_t i = 0; i < seg.chunks.size(); ++i)
      if (states_[seg.chunks[i]].seen_offered(id)) slots_freed(id, i, 1);
    segment_at_.emplace(seg.va, id);
    unpinned_by_age_.emplace(seg.last_used, id);
    if (seg.busy == 0) idle_insert(id);
    lagging_chunks_.reserve(lagging_chunks_.size() + seg.chunks.size());
    rehome(id, seg.chunks);
  } catch (...) {
    unregister(id);
    throw;
  }
  units_ += seg.chunks.size() + 1;
  gauge(stats_.mapping_units, static_cast<std::int64_t>(seg.chunks.size() + 1));
  mapped_bytes_ += seg.size;
  gauge(stats_.mapped_bytes, static_cast<std::int64_t>(seg.size));
  gauge(stats_.segments, 1);
  if (stitched) {
    gauge(stats_.stitched_bytes, static_cast<std::int64_t>(seg.size));
    ++stats_.stitches.current;
  }
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_map({seg.va, seg.size, stitched}); });
  return id;
}

// Takes what register_segment entered for segment `id` out again (it ran out
// of heap half way); only erases, so it cannot fail itself.
void SegmentTable::unregister(SegmentId id) {
  Segment& seg = segments_[id];
  unhome(id);
  while (!seg.runs.empty()) run_erase(id, std::prev(seg.runs.end()));
  if (auto it = segment_at_.find(seg.va); it != segment_at_.end() && it->second == id)
    segment_at_.erase(it);
  unpinned_by_age_.erase({seg.last_used, id});
  if (idle_by_size_.count({seg.size, id}) != 0) idle_erase(id);
  for (std::uint32_t i = 0; i < seg.chunks.size(); ++i)
    std::erase(mapped_in_[seg.chunks[i]], Mapping{id, i});
  seg = Segment{};
  free_slots_.push_back(id);
}

bool SegmentTable::extend(SegmentId s, const std::vector<ChunkId>& ids) {
  catch_up();  // the new slots join as the chunks are now
  Segment& seg = segments_[s];
  std::size_t total = 0;
  for (ChunkId c : ids) total += pool_.size(c);
  if (seg.sealed || seg.size + total > seg.va_size) return false;
  const DevicePtr base = seg.va + seg.size;
  // On failure: keep the cause, undo, and if the backend refuses to undo,
  // stop extending this segment (its room is not clean) and retry later.
  auto fail = [&](const char* what, Status st, std::size_t mapped) {
    const std::string cause = backend_.last_error();
    Zombie z{0, 0, {}, {}};  // no reservation of its own: the segment's
    for (std::size_t j = 0, o = 0; j < mapped; o += pool_.size(ids[j]), ++j)
      z.mapped.emplace_back(base + o, pool_.size(ids[j]));
    if (!retire(z, true)) {
      zombies_.push_back(std::move(z));
      seg.sealed = true;
    }
    if (is_exhaustion(st)) {
      refusal_.note(st, what, cause);
      return false;
    }
    backend_failure(what, st, cause);
  };
  make_room(ids.size(), s);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const Status st = backend_.map(base + offset, pool_.size(ids[i]), pool_[ids[i]].handle);
    if (st != Status::ok) return fail("map", st, i);
    offset += pool_.size(ids[i]);
  }
  if (const Status st = backend_.set_access(base, total); st != Status::ok)
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
  const bool idle = seg.busy == 0;  // re-entered with its new size
  if (idle) idle_erase(s);
  seg.size += total;
  if (idle) idle_insert(s);
  const auto first_new = static_cast<std::uint32_t>(seg.chunks.size());
  for (ChunkId c : ids) {
    mapped_in_[c].push_back({s, static_cast<std::uint32_t>(seg.chunks.size())});
    seg.chunks.push_back(c);
    seg.offsets.push_back(offset);
    offset += pool_.size(c);
  }
  if (tail_count) run_insert(s, tail_start, tail_count);
  // As in register_segment: the new slots start from what the others saw.
  for (std::uint32_t i = first_new; i < seg.chunks.size(); ++i) {
    if (states_[seg.chunks[i]].seen_offered(s))
      slots_freed(s, i, 1);
    else if (seg.busy++ == 0)
      idle_erase(s);
  }
  rehome(s, ids);
  seg.stitched = true;
  units_ += ids.size();
  gauge(stats_.mapping_units, static_cast<std::int64_t>(ids.size()));
  mapped_bytes_ += total;
  gauge(stats_.mapped_bytes, static_cast<std::int64_t>(total));
  gauge(stats_.stitched_bytes, static_cast<std::int64_t>(total));
  ++stats_.stitches.current;
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_map({base, total, true}); });
  return true;
}

// The segment's entries leave the tables first, so a failing unmap cannot
// leave them half-updated; whatever the backend refused stays on the retry
// list.
bool SegmentTable::unmap(SegmentId s) {
  Zombie z = detach(s);
  if (retire(z, !mapped_inside(z.va, z.va_size))) return true;
  if (last_failure_.empty()) {  // the first cause, not its consequences
    last_failure_ = z.error;
    last_failure_status_ = z.status;
  }
  zombies_.push_back(std::move(z));
  return false;
}

Zombie SegmentTable::detach(SegmentId s) {
  catch_up();
  Segment& seg = segments_[s];
  assert(!seg.pinned());
  // What needs the heap first: the zombie and the slot's place in the free
  // list; then the tables change, which frees only.
  Zombie z{seg.va, seg.va_size, {}, {}};
  z.mapped.reserve(seg.chunks.size());
  for (std::uint32_t i = 0; i < seg.chunks.size(); ++i)
    z.mapped.emplace_back(seg.va + seg.offsets[i], pool_.size(seg.chunks[i]));
  free_slots_.reserve(free_slots_.size() + 1);
  lagging_chunks_.reserve(lagging_chunks_.size() + seg.chunks.size());
  unpinned_by_age_.erase({seg.last_used, s});
  if (seg.busy == 0) idle_erase(s);
  while (!seg.runs.empty()) run_erase(s, std::prev(seg.runs.end()));
  unhome(s);
  for (std::uint32_t i = 0; i < seg.chunks.size(); ++i)
    std::erase(mapped_in_[seg.chunks[i]], Mapping{s, i});
  units_ -= seg.chunks.size() + 1;
  gauge(stats_.mapping_units, -static_cast<std::int64_t>(seg.chunks.size() + 1));
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_unmap({seg.va, seg.size, seg.stitched}); });
  if (seg.reserve) std::erase(reserve_segments_, s);
  segment_at_.erase(seg.va);
  mapped_bytes_ -= seg.size;
  gauge(stats_.mapped_bytes, -static_cast<std::int64_t>(seg.size));
  gauge(stats_.segments, -1);
  if (seg.stitched) gauge(stats_.stitched_bytes, -static_cast<std::int64_t>(seg.size));
  seg = Segment{};
  free_slots_.push_back(s);
  return z;
}

bool SegmentTable::retire(Zombie& z, bool may_unreserve) const {
  std::erase_if(z.mapped, [&](const std::pair<DevicePtr, std::size_t>& m) {
    const Status s = backend_.unmap(m.first, m.second);
    if (s != Status::ok) {
      z.error = std::string("unmap failed: ") + backend_.last_error();
      z.status = s;
    }
    return s == Status::ok;
  });
  if (!z.mapped.empty()) return false;
  if (z.va_size == 0) return true;
  if (!may_unreserve) {
    if (z.error.empty()) z.error = "unreserve deferred: a refused unmap lies inside the range";
    return false;
  }
  const Status s = backend_.unreserve(z.va, z.va_size);
  if (s != Status::ok) {
    z.error = std::string("unreserve failed: ") + backend_.last_error();
    z.status = s;
  }
  return s == Status::ok;
}

// A range is never unreserved while a mapping the backend refused to remove
// lies inside it (an extension's undo lies inside its segment's room).
bool SegmentTable::mapped_inside(DevicePtr va, std::size_t size) const {
  for (const Zombie& z : zombies_) {
    for (const auto& [at, len] : z.mapped)
      if (at >= va && at < va + size) return true;
  }
  return false;
}

bool SegmentTable::retire_zombies() {
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
  for (std::size_t i = 0; i < zombies_.size(); ++i)
    if (!done[i]) left.push_back(std::move(zombies_[i]));
  zombies_ = std::move(left);
  if (!zombies_.empty() && last_failure_.empty()) {
    last_failure_ = zombies_.front().error;
    last_failure_status_ = zombies_.front().status;
  }
  return zombies_.empty();
}

bool SegmentTable::unmap_unpinned() {
  bool clean = retire_zombies();
  std::vector<SegmentId> victims;
  for (auto [age, s] : unpinned_by_age_)
    if (unmappable(segments_[s])) victims.push_back(s);
  for (SegmentId s : victims) clean &= unmap(s);
  return clean;
}

// Mapped ranges cost VA and, on the GPU, unmap time later: segments that own
// nothing are kept while the mapped total stays within the budget, the least
// recently used dropped first.
std::size_t SegmentTable::mapping_budget() const {
  return static_cast<std::size_t>((1.0 + options_.stitch_cache_ratio) *
                                  static_cast<double>(pool_.reserved_bytes()));
}

bool SegmentTable::over_budget() const {
  return (mapped_bytes_ > mapping_budget() || units_ > units_budget()) && !unpinned_by_age_.empty();
}

// The backend's mapping limit, less a sixteenth: every mapping is preceded
// by make_room() or planned with its units, so the margin only absorbs
// the backend's own rounding (limits() says what a range costs in units).
std::size_t SegmentTable::units_budget() const {
  const std::size_t limit = limits_.mappings;
  return limit == BackendLimits::kUnbounded ? limit : limit - limit / 16;
}

void SegmentTable::make_room(std::size_t units, SegmentId keep) {
  if (units_ + units > units_budget()) enforce_budget(keep, units);
}

void SegmentTable::plan_evictions(std::vector<Zombie>* out, SegmentId keep,
                                  std::size_t extra_units) {
  const std::size_t budget = mapping_budget();
  out->reserve(out->size() + unpinned_by_age_.size());  // no zombie lost to a full heap
  auto it = unpinned_by_age_.begin();
  while ((mapped_bytes_ > budget || units_ + extra_units > units_budget()) &&
         it != unpinned_by_age_.end()) {
    const SegmentId victim = it->second;
    ++it;
    const Segment& seg = segments_[victim];
    if (victim == keep || mapped_inside(seg.va, seg.va_size) || !unmappable(seg)) continue;
    try {
      out->push_back(detach(victim));  // detach changes nothing when it fails
    } catch (const std::bad_alloc&) {
      break;  // the host's heap ran out: what was detached so far is in `out`
    }
    ++stats_.evictions.current;
  }
}

void SegmentTable::enforce_budget(SegmentId keep, std::size_t extra_units) {
  std::vector<Zombie> victims;
  plan_evictions(&victims, keep, extra_units);
  zombies_.reserve(zombies_.size() + victims.size());
  for (Zombie& z : victims)
    if (!retire(z, true)) zombies_.push_back(std::move(z));
}

// More or fewer of a segment's pins (owned chunks or borrowing allocations):
// it is in the LRU index of evictable segments while it has none.
void SegmentTable::pin(SegmentId s, std::uint32_t Segment::*count, bool add, std::uint32_t n) {
  Segment& seg = segments_[s];
  const bool was = seg.pinned();
  assert(add || seg.*count >= n);
  if (add)
    seg.*count += n;
  else
    seg.*count -= n;
  if (was == seg.pinned()) return;
  if (was)
    unpinned_by_age_.emplace(seg.last_used, s);
  else
    unpinned_by_age_.erase({seg.last_used, s});
}

// Called on placement, while the segment is pinned (so it is in no LRU set).
void SegmentTable::touch(SegmentId s) {
  assert(segments_[s].pinned());
  segments_[s].last_used = ++clock_;
}

void SegmentTable::add_reserve(SegmentId s) {
  segments_[s].reserve = true;
  reserve_segments_.push_back(s);
}

void SegmentTable::dissolve_reserve(SegmentId s) {
  Segment& seg = segments_[s];
  seg.reserve = false;
  std::erase(reserve_segments_, s);
  for (ChunkId id : seg.chunks) pool_.clear_reserve(id);
}

}  // namespace memlake::lake
