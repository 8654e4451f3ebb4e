// SegmentTable: the lake's virtual ranges (segments) over chunks of the pool.
//
// A segment is a reserved VA range with chunks mapped back to back; a chunk
// may be mapped in several segments at once. The table maps and unmaps
// ranges, keeps what the ladder reads about them (idle segments by size,
// free runs of chunk slots by bytes, least recently used segments that own
// nothing), keeps the mapped total within its budget, and keeps ranges the
// backend refused to unmap (zombies) for a retry.
//
// Home: a free chunk is offered through one segment only, its home: the
// segment that last mapped it or handed it out, whichever came later (the
// newest other one mapping it when its home is unmapped). Other segments
// keep showing the chunk's bytes to the blocks they hold, but do not offer
// it while it is free, so the free runs of a range the worker laid out are
// not cut up through other ranges' views of the same chunks, and each free
// chunk is in one run at most. A block that comes back to its place from
// the last step takes the chunks there wherever their home is (the lake's
// remembered rung), so a repeated step keeps its layout.
//
// Behind: a chunk taken, given back or rehomed since the segments mapping it
// last caught up (note_chunk_change, catch_up). Their busy counts, the idle
// index and their free runs tell the chunk's state as of then (ChunkState's
// seen_free and seen_home). Free runs: every maximal run of consecutive
// slots of a segment whose chunks it offers as of then is in Segment::runs
// and in the run index. A segment with busy == 0 offers all its chunks: it
// is idle (cached, reusable whole, evictable); one that owns no chunk and
// that no allocation borrows through is unpinned and may be unmapped.
// Not thread-safe, except map_range and retire, which touch no table state
// (the worker runs them without the lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "common/node_pool.hpp"
#include "common/observer_list.hpp"
#include "lake/chunk_pool.hpp"
#include "lake/refusal.hpp"
#include "lake/run_index.hpp"
#include "lake/slot_runs.hpp"
#include "lake/types.hpp"
#include "memlake/stats.hpp"
#include "stream/fence.hpp"

namespace memlake::lake {

struct Segment {
  DevicePtr va = 0;
  std::size_t size = 0;         // mapped bytes, from va
  std::size_t va_size = 0;      // reserved bytes: room to extend in place
  std::vector<ChunkId> chunks;  // in address order
  std::vector<std::size_t> offsets;
  // Runs of consecutive free chunks: first slot -> number of slots. Each is
  // also in the table's run index, so free space inside mapped ranges is
  // reused in place, without mapping anything.
  SlotRuns runs;
  std::uint32_t busy = 0;   // chunks taken (by this or another segment or client)
  std::uint32_t owned = 0;  // chunks whose live pieces are reached through this segment
  // Live allocations reached through this segment that start or end in a
  // chunk another segment owns (borrowed ends): they pin it like owned
  // chunks do.
  std::uint32_t borrowed = 0;
  bool stitched = false;
  bool reserve = false;  // the worker's reserve: used only where new memory would be made
  bool sealed = false;   // its room past the end is not clean: never extend it
  bool in_use = false;   // slot holds a mapped segment
  std::uint64_t last_used = 0;
  // The newest fence a block was freed into it under: queued work may still
  // use its addresses until that fence completes, so no unmapping before.
  FenceId fence;
  // Not evictable: it owns a chunk or an allocation borrows through it.
  bool pinned() const { return owned != 0 || borrowed != 0; }
};

// A chunk's home, and what the segments mapping it saw when they last
// caught up with it: 16 bytes, four to a cache line, since a catch-up reads
// one for each chunk of every block taken or freed (where the chunk is
// mapped is kept apart: only a change of home reads it).
struct ChunkState {
  SegmentId home = kNone;       // the segment that offers it while free: kNone only when unmapped
  SegmentId seen_home = kNone;  // as of the last catch-up
  // The chunk's slot in seen_home (when that is not kNone): a catch-up that
  // finds the home unchanged updates that one mapping without a search.
  std::uint32_t seen_home_slot = 0;
  bool seen_free = true;  // as of the last catch-up (a new chunk is free)
  bool listed = false;    // in the table's list of chunks to catch up with
  // Whether segment `s` counts the chunk as free, as of the last catch-up.
  bool seen_offered(SegmentId s) const { return seen_free && seen_home == s; }
};
static_assert(sizeof(ChunkState) == 16);

// A range that is out of the table but not (fully) unmapped yet.
struct Zombie {
  DevicePtr va = 0;
  std::size_t va_size = 0;  // 0: part of a segment's reservation, nothing to free
  std::vector<std::pair<DevicePtr, std::size_t>> mapped;
  std::string error;
  Status status = Status::ok;  // of the last refused call
};

// A range mapped by map_range, ready for register_segment.
struct MappedRange {
  DevicePtr va = 0;
  std::size_t va_size = 0, total = 0;
  std::vector<std::size_t> offsets;
  std::string error;             // the backend's message on failure
  std::vector<Zombie> leftover;  // what a failed mapping could not undo
  Zombie undo;                   // on success: how to take the range back
};

struct SegmentTableOptions {
  std::size_t granularity = std::size_t{2} << 20;
  double stitch_cache_ratio = 4.0;
};

class SegmentTable {
 public:
  SegmentTable(Backend& backend, ChunkPool& pool, const SegmentTableOptions& options, Stats& stats,
               ObserverList& observers, NodePool& nodes, Refusal& refusal);
  ~SegmentTable();  // unmaps every segment and zombie
  SegmentTable(const SegmentTable&) = delete;
  SegmentTable& operator=(const SegmentTable&) = delete;

  Segment& operator[](SegmentId s) { return segments_[s]; }
  const Segment& operator[](SegmentId s) const { return segments_[s]; }
  std::size_t slots() const { return segments_.size(); }
  // Where chunk `c` is mapped: segment and slot, oldest mapping first.
  const std::vector<Mapping>& mapped_in(ChunkId c) const { return mapped_in_[c]; }
  void chunk_added(ChunkId c);
  void chunk_removed(ChunkId c) {
    states_[c] = ChunkState{};
    mapped_in_[c] = {};
  }
  // The segment whose mapped bytes hold `ptr`, or kNone.
  SegmentId containing(DevicePtr ptr) const;
  // Chunk `c` is mapped in segment `s`.
  bool maps_chunk(SegmentId s, ChunkId c) const;
  // Chunk `c` is free and segment `s`, which maps it, may hand it out.
  bool offers(SegmentId s, ChunkId c) const { return pool_.is_free(c) && states_[c].home == s; }

  // ---- mapping ----
  // Reserves a range for `chunks` (handle, size), maps each and grants access
  // over them, `chunks_per_access` chunks per call (one call for all by
  // default: access costs per handle, and one call costs least). On failure
  // everything done is undone and the status says why. Touches no table
  // state.
  Status map_range(const std::vector<std::pair<ChunkHandle, std::size_t>>& chunks, MappedRange* out,
                   std::size_t chunks_per_access = SIZE_MAX) const;
  SegmentId register_segment(std::vector<ChunkId> ids, MappedRange range, bool stitched);
  // Maps `ids` into a new segment; kNone when a resource of the backend runs
  // out (noted in the Refusal). Other backend failures throw.
  SegmentId map_segment(std::vector<ChunkId> ids, bool stitched);
  // Maps free chunks at the end of segment `s`; false when a resource of
  // the backend runs out (noted in the Refusal; other failures throw).
  bool extend(SegmentId s, const std::vector<ChunkId>& ids);
  // Unmaps a segment that owns no chunk; false when the backend refused
  // part of it (kept for a retry).
  bool unmap(SegmentId s);
  // Takes an unpinned segment out of every table; returns what is left to
  // unmap and unreserve.
  Zombie detach(SegmentId s);
  // Unmaps what is left of a dropped range, then frees its addresses (when
  // it has a reservation of its own). Touches no table state.
  bool retire(Zombie& z, bool may_unreserve) const;
  void keep(Zombie z) { zombies_.push_back(std::move(z)); }
  // Room for `n` more zombies, so that keeping them cannot fail.
  void reserve_zombies(std::size_t n) { zombies_.reserve(zombies_.size() + n); }
  // Retries every zombie; true when none is left.
  bool retire_zombies();
  // Unmaps every segment nothing pins whose fences have completed; false
  // when the backend refused something (last_failure() says what).
  bool unmap_unpinned();
  const std::string& last_failure() const { return last_failure_; }
  Status last_failure_status() const { return last_failure_status_; }
  void clear_failure() {
    last_failure_.clear();
    last_failure_status_ = Status::ok;
  }

  // ---- the mapping budget ----
  std::size_t mapping_budget() const;  // mapped bytes allowed (stitch_cache_ratio)
  // Mapping units (backend.hpp) the ranges may hold: the backend's limit
  // less a headroom.
  std::size_t units_budget() const;
  bool over_budget() const;
  std::size_t unpinned_count() const { return unpinned_by_age_.size(); }
  // Detaches least recently used unpinned segments (not `keep`) until the
  // mapped bytes and, with `extra_units` more to come, the mapping units are
  // within their budgets; the unmapping is left to the caller.
  void plan_evictions(std::vector<Zombie>* out, SegmentId keep, std::size_t extra_units = 0);
  // The same, unmapping at once.
  void enforce_budget(SegmentId keep, std::size_t extra_units = 0);
  // Before mapping `units` more: unmaps idle ranges where the units would
  // cross their budget, so the backend's limit is not met.
  void make_room(std::size_t units, SegmentId keep = kNone);
  void set_fences_done(FenceId through) { fences_done_ = through; }
  FenceId fences_done() const { return fences_done_; }

  // ---- pins, owned chunks and use ----
  // Chunk `c`, which `s` maps, has `s` as its home from now on (it hands it
  // out); the segments that offered it catch up.
  void rehome(SegmentId s, ChunkId c);
  // `n` more or fewer of a segment's pins of one kind (a block's chunks
  // come and go together: one call for all of them).
  void pin(SegmentId s, std::uint32_t Segment::*count, bool add, std::uint32_t n = 1);
  void touch(SegmentId s);  // placed in: most recently used

  // ---- idle segments and free runs ----
  // An idle, non-reserve segment of at least `bytes` and at most `most`.
  SegmentId find_idle(std::size_t bytes, std::size_t most) const;
  using SizeKey = std::pair<std::size_t, SegmentId>;
  template <typename T>
  using PoolSet = std::set<T, std::less<T>, PoolAllocator<T>>;
  const PoolSet<SizeKey>& idle_by_size() const { return idle_by_size_; }
  const RunIndex& free_runs() const { return free_runs_; }
  std::size_t run_bytes(const Segment& seg, std::uint32_t start, std::uint32_t count) const;
  // The smallest run (not of the reserve) that holds `bytes`.
  bool find_free_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const;
  // A run of the worker's reserve that holds `bytes`.
  bool find_reserve_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const;

  // ---- catching up ----
  // Chunk `c` was taken or given back: the segments mapping it are behind.
  void note_chunk_change(ChunkId c) {
    ChunkState& m = states_[c];
    if (m.listed) return;
    m.listed = true;
    lagging_chunks_.push_back(c);
  }
  // The chunks were taken through segment `s` (their home from now on) or
  // given back (`s` kNone: homes stay): one note each, for a block's run.
  void note_run_change(std::span<const ChunkId> ids, SegmentId s);
  bool behind() const { return !lagging_chunks_.empty(); }
  // Brings the segments mapping chunks taken, given back or rehomed since
  // the last call up to date: busy counts, the idle index, free runs.
  void catch_up();
  std::size_t behind_chunk_count() const;

  // ---- the worker's ranges ----
  void add_reserve(SegmentId s);
  // A request took new memory from reserve range `s`: the range is ordinary
  // memory from now on, and the worker makes another reserve.
  void dissolve_reserve(SegmentId s);

  std::string check_invariants() const;

 private:
  bool unmappable(const Segment& seg) const { return seg.fence <= fences_done_; }
  bool mapped_inside(DevicePtr va, std::size_t size) const;
  void run_insert(SegmentId s, std::uint32_t start, std::uint32_t count);
  void run_erase(SegmentId s, SlotRuns::iterator it);
  void slots_freed(SegmentId s, std::uint32_t index, std::uint32_t count);
  void slots_claimed(SegmentId s, std::uint32_t index, std::uint32_t count);
  // Mapping `where` offers its chunk `now` where it did not, or the reverse.
  void catch_up_mapping(Mapping where, bool now);
  void apply_stretches(const std::vector<Mapping>& slots, bool freed);
  void rehome(SegmentId s, const std::vector<ChunkId>& ids);
  // Chunks whose home was `s`, which is going: the newest other segment
  // mapping each becomes its home.
  void unhome(SegmentId s);
  void idle_insert(SegmentId s);
  void idle_erase(SegmentId s);
  SegmentId new_slot();
  void unregister(SegmentId id);
  [[noreturn]] void backend_failure(const char* what, Status s, const std::string& cause) const;

  Backend& backend_;
  ChunkPool& pool_;
  SegmentTableOptions options_;
  Stats& stats_;
  ObserverList& observers_;
  std::vector<Segment> segments_;
  std::vector<SegmentId> free_slots_;
  std::vector<ChunkState> states_;               // by chunk id
  std::vector<std::vector<Mapping>> mapped_in_;  // by chunk id
  PoolSet<SizeKey> idle_by_size_;                // busy == 0
  using AgeKey = std::pair<std::uint64_t, SegmentId>;
  PoolSet<AgeKey> unpinned_by_age_;  // !pinned(), least recently used first
  using BaseEntry = std::pair<const DevicePtr, SegmentId>;
  std::map<DevicePtr, SegmentId, std::less<DevicePtr>, PoolAllocator<BaseEntry>> segment_at_;
  RunIndex free_runs_;           // every segment's runs of chunks it offers, by bytes
  std::vector<Zombie> zombies_;  // retried by unmap_unpinned() and the destructor
  std::string last_failure_;
  Status last_failure_status_ = Status::ok;
  Refusal& refusal_;
  const BackendLimits limits_;
  std::size_t mapped_bytes_ = 0;
  std::size_t units_ = 0;  // mapping units the registered ranges hold
  std::uint64_t clock_ = 0;
  FenceId fences_done_;
  std::vector<SegmentId> reserve_segments_;  // ranges over the worker's reserve
  // Chunks marked listed (some no longer behind).
  std::vector<ChunkId> lagging_chunks_;
  std::vector<Mapping> caught_claimed_, caught_freed_;  // catch_up's scratch
  struct Stretch {
    std::uint32_t start = 0, count = 0;
  };
  std::vector<Stretch> open_stretches_;      // apply_stretches' scratch: one per segment
  std::vector<SegmentId> touched_segments_;  // ...with an open stretch
};

}  // namespace memlake::lake
