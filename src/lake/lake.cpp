// Lake lifetime, lookups, reclaim and diagnostics.
#include "lake/lake.hpp"

#include <algorithm>
#include <cstdio>

#include "memlake/errors.hpp"

namespace memlake::lake {

namespace {
SegmentTableOptions table_options(const LakeOptions& o) {
  SegmentTableOptions t;
  t.granularity = o.granularity;
  t.stitch_cache_ratio = o.stitch_cache_ratio;
  return t;
}
}  // namespace

Lake::Lake(Backend& backend, ChunkPool& pool, const LakeOptions& options, Stats& stats,
           ObserverList& observers, Refusal& refusal)
    : backend_(backend),
      pool_(pool),
      options_(options),
      stats_(stats),
      observers_(observers),
      refusal_(refusal),
      client_(pool.attach(this)),
      table_(backend, pool, table_options(options), stats, observers, nodes_, refusal),
      fragments_(nodes_),
      allocations_(0, std::hash<DevicePtr>{}, std::equal_to<DevicePtr>{},
                   PoolAllocator<std::pair<const DevicePtr, Allocation>>(&nodes_)),
      allocated_by_size_(0, std::hash<std::size_t>{}, std::equal_to<std::size_t>{},
                         PoolAllocator<std::pair<const std::size_t, std::size_t>>(&nodes_)) {
  for (ChunkId c = 0; c < pool.slots(); ++c) chunk_added(c);
}

// Live allocations at destruction are the caller's leak; the table unmaps
// every range, and the pool releases the chunks when it goes.
Lake::~Lake() {
  pool_.detach(client_);
}

void Lake::chunk_added(ChunkId id) {
  if (use_.size() <= id) {
    spare_.resize(id + 1, nullptr);  // first: use_ tells the size
    use_.resize(id + 1);
  }
  use_[id] = ChunkUse{};
  table_.chunk_added(id);
}

void Lake::chunk_removed(ChunkId id) {
  use_[id] = ChunkUse{};
  if (spare_[id] != nullptr) {
    delete_piece(spare_[id]);
    spare_[id] = nullptr;
  }
  table_.chunk_removed(id);
}

const Allocation* Lake::find(DevicePtr ptr) const {
  auto it = allocations_.find(ptr);
  return it == allocations_.end() ? nullptr : &it->second;
}

bool Lake::locate(DevicePtr ptr, SegmentId* s, std::uint32_t* slot, std::size_t* offset) const {
  const SegmentId id = table_.containing(ptr);
  if (id == kNone || table_[id].reserve) return false;
  const Segment& seg = table_[id];
  const std::size_t at = ptr - seg.va;
  *slot = static_cast<std::uint32_t>(std::upper_bound(seg.offsets.begin(), seg.offsets.end(), at) -
                                     seg.offsets.begin() - 1);
  *offset = at - seg.offsets[*slot];
  *s = id;
  return true;
}

bool Lake::locate(Place& place, SegmentId* s, std::uint32_t* slot, std::size_t* offset) const {
  if (place.segment != kNone && place.segment < table_.slots()) {
    const Segment& seg = table_[place.segment];
    const DevicePtr ptr = place.ptr;
    if (seg.in_use && !seg.reserve && ptr >= seg.va && ptr < seg.va + seg.size &&
        place.slot < seg.offsets.size()) {
      const std::size_t at = ptr - seg.va;
      const std::size_t end =
          place.slot + 1 < seg.offsets.size() ? seg.offsets[place.slot + 1] : seg.size;
      if (at >= seg.offsets[place.slot] && at < end) {
        *s = place.segment;
        *slot = place.slot;
        *offset = at - seg.offsets[place.slot];
        return true;
      }
    }
  }
  if (!locate(place.ptr, s, slot, offset)) return false;
  place.segment = *s;
  place.slot = *slot;
  return true;
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
  if (table_.containing(ptr) != kNone) {
    std::snprintf(buf, sizeof buf,
                  "double free of %#zx: it lies in memlake memory that is not allocated "
                  "(freed already, or never returned by allocate)",
                  static_cast<std::size_t>(ptr));
    return buf;
  }
  std::snprintf(buf, sizeof buf, "unknown pointer %#zx: not memory of this memlake allocator",
                static_cast<std::size_t>(ptr));
  return buf;
}

std::size_t Lake::reclaim() {
  table_.clear_failure();
  const bool clean = table_.unmap_unpinned();
  std::vector<ChunkId> unmapped;
  for (auto [size, c] : pool_.free_set())
    if (table_.mapped_in(c).empty()) unmapped.push_back(c);
  std::size_t released = 0;
  Status refused = Status::ok;  // the first release the backend refused
  for (ChunkId c : unmapped) {
    const std::size_t size = pool_.size(c);
    if (pool_.release(c))
      released += size;
    else if (refused == Status::ok)
      refused = refusal_.status;
  }
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_reclaim(released); });
  if (!clean && !is_exhaustion(table_.last_failure_status()))
    throw backend_error("memlake: reclaim could not return every mapping (" +
                        table_.last_failure() + "); the lake is consistent and retries later");
  if (refused != Status::ok && !is_exhaustion(refused))
    throw backend_error("memlake: reclaim could not release every chunk (" + refusal_.text() +
                        "); the lake is consistent and retries later");
  return released;
}

std::size_t Lake::largest_free_block() {
  table_.catch_up();
  std::size_t largest = fragments_.largest();
  const auto& idle = table_.idle_by_size();
  if (!idle.empty()) largest = std::max(largest, idle.rbegin()->first);
  const FreeChunkSet& free = pool_.free_set();
  if (!free.empty()) largest = std::max(largest, free.rbegin()->first);
  return largest;
}

void Lake::chunks_of(DevicePtr ptr, std::vector<std::pair<ChunkHandle, std::size_t>>* out,
                     std::size_t* offset) const {
  const Allocation* a = find(ptr);
  if (!a) return;
  const Segment& seg = table_[a->segment];
  *offset = ptr - (seg.va + seg.offsets[a->first_chunk]);
  for (std::uint32_t i = a->first_chunk; i < a->first_chunk + a->chunk_count; ++i) {
    const ChunkId c = seg.chunks[i];
    out->emplace_back(pool_[c].handle, pool_.size(c));
  }
}

std::vector<std::pair<DevicePtr, std::size_t>> Lake::aliases(DevicePtr ptr,
                                                             std::size_t size) const {
  std::vector<std::pair<DevicePtr, std::size_t>> out;
  const Allocation* a = find(ptr);
  if (!a) return out;
  const Segment& seg = table_[a->segment];
  std::size_t done = 0;
  for (std::uint32_t i = a->first_chunk; i < a->first_chunk + a->chunk_count && done < size; ++i) {
    const ChunkId c = seg.chunks[i];
    const DevicePtr here = seg.va + seg.offsets[i];
    const std::size_t start = (i == a->first_chunk) ? ptr - here : 0;
    const std::size_t len = std::min(pool_.size(c) - start, size - done);
    for (Mapping other : table_.mapped_in(c)) {
      if (other.segment == a->segment) continue;
      const Segment& o = table_[other.segment];
      out.emplace_back(o.va + o.offsets[other.index] + start, len);
    }
    done += len;
  }
  return out;
}

}  // namespace memlake::lake
