// Lake lifetime, lookups, reclaim, diagnostics and the invariant check.
#include "lake/lake.hpp"

#include "memlake/errors.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace memlake::lake {

Lake::Lake(Backend& backend, const LakeOptions& options, Stats& stats, ObserverList& observers)
    : backend_(backend),
      options_(options),
      stats_(stats),
      observers_(observers),
      free_runs_(options.granularity) {}

Lake::~Lake() {
  // Live allocations at destruction are the caller's leak; their memory goes
  // back to the backend all the same.
  for (Chunk& c : chunks_) {
    for (Piece* p = c.pieces; p != nullptr;) {
      Piece* next = p->next;
      delete_piece(p);
      p = next;
    }
    c.pieces = nullptr;
  }
  retire_zombies();
  for (Segment& seg : segments_) {
    if (!seg.in_use) continue;
    for (std::size_t i = 0; i < seg.chunks.size(); ++i)
      backend_.unmap(seg.va + seg.offsets[i], chunks_[seg.chunks[i]].size);
    backend_.unreserve(seg.va, seg.va_size);
  }
  for (Chunk& c : chunks_) {
    if (c.in_use) backend_.release_chunk(c.handle);
  }
}

const Allocation* Lake::find(DevicePtr ptr) const {
  auto it = allocations_.find(ptr);
  return it == allocations_.end() ? nullptr : &it->second;
}

std::string Lake::diagnose_bad_pointer(DevicePtr ptr) const {
  char buf[200];
  // A cold path: a scan of the live blocks is fine here.
  for (const auto& [start, a] : allocations_) {
    if (ptr > start && ptr < start + a.size) {
      std::snprintf(buf, sizeof buf,
                    "interior pointer %#zx: %zu bytes into a live memlake block, not its start",
                    static_cast<std::size_t>(ptr), static_cast<std::size_t>(ptr - start));
      return buf;
    }
  }
  auto it = segment_at_.upper_bound(ptr);
  if (it != segment_at_.begin()) {
    const Segment& seg = segments_[std::prev(it)->second];
    if (ptr < seg.va + seg.size) {
      std::snprintf(buf, sizeof buf,
                    "double free of %#zx: it lies in memlake memory that is not allocated "
                    "(freed already, or never returned by allocate)",
                    static_cast<std::size_t>(ptr));
      return buf;
    }
  }
  std::snprintf(buf, sizeof buf, "unknown pointer %#zx: not memory of this memlake allocator",
                static_cast<std::size_t>(ptr));
  return buf;
}

std::size_t Lake::reclaim() {
  last_failure_.clear();
  bool clean = retire_zombies();
  std::vector<SegmentId> victims;
  for (auto [age, s] : unpinned_by_age_)
    if (unmappable(segments_[s])) victims.push_back(s);
  for (SegmentId s : victims) clean &= unmap_segment(s);
  std::vector<ChunkId> unmapped;
  for (auto [size, c] : free_chunks_) {
    if (chunks_[c].mapped_in.empty() && chunks_[c].pins == 0) unmapped.push_back(c);
  }
  std::size_t released = 0;
  for (ChunkId c : unmapped) {
    released += chunks_[c].size;
    release_chunk(c);
  }
  if (!clean)
    throw backend_error("memlake: reclaim could not return every mapping (" + last_failure_ +
                        "); the lake is consistent and retries later");
  return released;
}

std::size_t Lake::largest_free_block() {
  catch_up();
  std::size_t largest = fragments_.empty() ? 0 : (*fragments_.rbegin())->size;
  if (!idle_by_size_.empty()) largest = std::max(largest, idle_by_size_.rbegin()->first);
  if (!free_chunks_.empty()) largest = std::max(largest, free_chunks_.rbegin()->first);
  return largest;
}

void Lake::chunks_of(DevicePtr ptr, std::vector<std::pair<ChunkHandle, std::size_t>>* out,
                     std::size_t* offset) const {
  const Allocation* a = find(ptr);
  if (!a) return;
  const Segment& seg = segments_[a->segment];
  *offset = ptr - (seg.va + seg.offsets[a->first_chunk]);
  for (std::uint32_t i = a->first_chunk; i < a->first_chunk + a->chunk_count; ++i) {
    const Chunk& c = chunks_[seg.chunks[i]];
    out->emplace_back(c.handle, c.size);
  }
}

std::vector<std::pair<DevicePtr, std::size_t>> Lake::aliases(DevicePtr ptr,
                                                             std::size_t size) const {
  std::vector<std::pair<DevicePtr, std::size_t>> out;
  const Allocation* a = find(ptr);
  if (!a) return out;
  const Segment& seg = segments_[a->segment];
  std::size_t done = 0;
  for (std::uint32_t i = a->first_chunk; i < a->first_chunk + a->chunk_count && done < size; ++i) {
    const Chunk& c = chunks_[seg.chunks[i]];
    DevicePtr here = seg.va + seg.offsets[i];
    std::size_t start = (i == a->first_chunk) ? ptr - here : 0;
    std::size_t len = std::min(c.size - start, size - done);
    for (Mapping other : c.mapped_in) {
      if (other.segment == a->segment) continue;
      const Segment& o = segments_[other.segment];
      out.emplace_back(o.va + o.offsets[other.index] + start, len);
    }
    done += len;
  }
  return out;
}

std::string Lake::check_invariants() const {
  std::ostringstream err;
  std::size_t reserved = 0, free_bytes = 0, fragment_bytes = 0, mapped = 0;
  std::size_t head_bytes = 0, tail_bytes = 0;
  for (ChunkId id = 0; id < chunks_.size(); ++id) {
    const Chunk& c = chunks_[id];
    if (!c.in_use) continue;
    reserved += c.size;
    const bool in_pool = free_chunks_.count({c.size, id}) != 0;
    if (c.owner == kNone) {
      if (!in_pool || c.live != 0 || c.pieces) err << "free chunk " << id << " is not clean; ";
      free_bytes += c.size;
      continue;
    }
    if (in_pool) err << "owned chunk " << id << " is in the free pool; ";
    if (c.live == 0) err << "owned chunk " << id << " has no live piece; ";
    const Segment& owner = segments_[c.owner];
    if (!owner.in_use || std::none_of(c.mapped_in.begin(), c.mapped_in.end(),
                                      [&](Mapping m) { return m.segment == c.owner; }))
      err << "chunk " << id << " owned by a segment that does not map it; ";
    std::size_t expect = 0;
    std::uint32_t allocated = 0;
    const Piece* prev = nullptr;
    for (const Piece* p = c.pieces; p; prev = p, p = p->next) {
      if (p->offset != expect || p->prev != prev || p->chunk != id || p->size % kAlignment)
        err << "chunk " << id << " pieces do not tile it; ";
      if (!p->allocated) {
        if (prev && !prev->allocated) err << "chunk " << id << " has adjacent free pieces; ";
        if (!fragments_.count(const_cast<Piece*>(p))) err << "free piece missing from the index; ";
        fragment_bytes += p->size;
        if (!p->prev) head_bytes += p->size;
        if (!p->next) tail_bytes += p->size;
      } else {
        ++allocated;
      }
      expect += p->size;
    }
    if (expect != c.size)
      err << "chunk " << id << " pieces cover " << expect << " of " << c.size << "; ";
    if (allocated != c.live) err << "chunk " << id << " live count is off; ";
  }
  std::size_t idle = 0, total_runs = 0;
  for (SegmentId s = 0; s < segments_.size(); ++s) {
    const Segment& seg = segments_[s];
    if (!seg.in_use) continue;
    mapped += seg.size;
    std::uint32_t busy = 0, owned = 0;
    for (ChunkId c : seg.chunks) {
      // As of the last catch-up: owned, unless it changed since.
      if ((chunks_[c].owner != kNone) != ((chunks_[c].run_lag & kRunBehind) != 0)) ++busy;
      if (chunks_[c].owner == s) ++owned;
    }
    if (busy != seg.busy || owned != seg.owned) err << "segment " << s << " counts are off; ";
    SlotRuns runs;
    for (std::uint32_t i = 0; i < seg.chunks.size(); ++i) {
      const Chunk& c = chunks_[seg.chunks[i]];
      if (std::find(c.mapped_in.begin(), c.mapped_in.end(), Mapping{s, i}) == c.mapped_in.end())
        err << "segment " << s << " slot " << i << " missing from its chunk's mappings; ";
      // What the runs say: free, unless it changed since they caught up.
      if ((c.owner == kNone) == ((c.run_lag & kRunBehind) != 0)) continue;
      if (!runs.empty() && std::prev(runs.end())->first + std::prev(runs.end())->second == i)
        ++std::prev(runs.end())->second;
      else
        runs.emplace(i, 1);
    }
    if (!seg.indexed) {
      if (!seg.runs.empty()) err << "segment " << s << " is not indexed but has runs; ";
      runs.clear();
    } else if (runs != seg.runs) {
      err << "segment " << s << " free runs are off; ";
    }
    for (auto [start, count] : runs) {
      if (!free_runs_.count({run_bytes(seg, start, count), s, start}))
        err << "segment " << s << " run at " << start << " missing from the index; ";
    }
    total_runs += runs.size();
    const bool is_idle = idle_by_size_.count({seg.size, s}) != 0;
    if (is_idle != (busy == 0)) err << "segment " << s << " idle index is off; ";
    if ((unpinned_by_age_.count({seg.last_used, s}) != 0) != (owned == 0 && seg.borrowed == 0))
      err << "segment " << s << " LRU index is off; ";
    idle += is_idle;
  }
  std::vector<std::uint32_t> borrowed(segments_.size(), 0);
  for (const auto& [ptr, a] : allocations_) {
    if (borrows(a)) ++borrowed[a.segment];
    const Segment& seg = segments_[a.segment];
    if (ptr != seg.va + seg.offsets[a.first_chunk] + a.piece->offset)
      err << "allocation " << ptr << " is not where its first piece is; ";
  }
  for (SegmentId s = 0; s < segments_.size(); ++s) {
    if (segments_[s].in_use && borrowed[s] != segments_[s].borrowed)
      err << "segment " << s << " borrowed count is off; ";
  }
  if (consolidated_.size() > kIndexedRanges) err << "too many consolidated ranges indexed; ";
  for (SegmentId r : consolidated_) {
    if (!segments_[r].in_use || !segments_[r].indexed)
      err << "consolidated range " << r << " listed but not indexed; ";
  }
  if (reserved != reserved_bytes())
    err << "reserved bytes " << reserved << " disagree with the counters; ";
  if (free_bytes != free_chunk_bytes_) err << "free chunk bytes disagree; ";
  if (fragment_bytes != fragment_bytes_) err << "fragment bytes disagree; ";
  if (head_bytes != head_fragment_bytes_ || tail_bytes != tail_fragment_bytes_)
    err << "free head and tail bytes disagree; ";
  std::size_t indexed = 0;
  for (const Piece* p : fragments_) indexed += p->size;
  if (indexed != fragment_bytes) err << "fragment index holds stale pieces; ";
  if (mapped != mapped_bytes()) err << "mapped bytes disagree; ";
  if (idle != idle_by_size_.size()) err << "idle index holds stale entries; ";
  if (total_runs != free_runs_.size()) err << "free-run index holds stale entries; ";
  for (ChunkId id = 0; id < chunks_.size(); ++id) {
    const std::uint8_t lag = chunks_[id].run_lag;
    if (!(lag & kRunBehind)) continue;
    if (!(lag & kRunListed) ||
        std::find(lagging_chunks_.begin(), lagging_chunks_.end(), id) == lagging_chunks_.end())
      err << "chunk " << id << " is behind but not listed; ";
  }
  return err.str();
}

std::size_t Lake::behind_chunk_count() const {
  return static_cast<std::size_t>(std::count_if(chunks_.begin(), chunks_.end(), [](const Chunk& c) {
    return (c.run_lag & kRunBehind) != 0;
  }));
}

}  // namespace memlake::lake
