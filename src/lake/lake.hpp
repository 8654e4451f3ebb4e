// The lake: one device's physical chunks and the virtual segments over them.
// It knows nothing of streams (src/stream/ decides when a freed block may be
// handed to it) and is not thread-safe (the allocator holds its lock).
//
// Allocation ladder (strategy.cpp), cheapest first:
//   small requests: fragment exact/best fit -> first chunk of the smallest
//                   free run -> borrowed ends -> a one-chunk segment
//   others:         the place the same request had before (remembered.cpp)
//                   -> idle segment that fits (exact) -> continuation of a recent
//                   tail -> fragment best fit (split) -> smallest free run
//                   -> borrowed ends (a block of a granule or two across the
//                   free tail and head of two busy chunks) -> continuation
//                   past a segment's end -> grow a segment
//                   whose free end holds half or more -> stitch free chunks
//                   (+ new ones for the deficit) -> (caller) reclaim and retry
//                   -> OOM
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "lake/free_chunk_set.hpp"
#include "lake/run_index.hpp"
#include "lake/types.hpp"
#include "memlake/observer.hpp"
#include "memlake/stats.hpp"
#include "node_pool.hpp"
#include "observers.hpp"
#include "stat_update.hpp"
#include "stream/fence.hpp"

namespace memlake::lake {

// Consolidated ranges whose free runs stay indexed, the newest. Each one
// maps every chunk that was free when it was made, so older ones mostly
// repeat it; keeping their runs up to date made each claim and free touch
// one more mapping per chunk (measured on the recorded GPT-2 training
// trace: allocate median -30% with 2 instead of all, same peak).
inline constexpr std::size_t kIndexedRanges = 2;

// Addresses remembered per request key, and keys at most, for
// try_remembered (remembered.cpp).
inline constexpr std::size_t kRememberedPlaces = 4;
inline constexpr std::size_t kRememberedKeys = std::size_t{1} << 16;

struct LakeOptions {
  std::size_t granularity = std::size_t{2} << 20;
  std::size_t capacity = 0;
  std::size_t small_max = std::size_t{1} << 20;
  std::size_t max_chunk = std::size_t{2} << 20;
  std::size_t large_chunk = 0;  // 0: max_chunk for every request
  std::size_t large_chunk_from = 0;
  double fit_slack = 0.125;
  double stitch_cache_ratio = 4.0;
  bool defer_eviction = false;  // a worker unmaps ranges over the budget
  std::size_t max_stitch_chunks = 4096;
  std::size_t reserve = 0;  // free chunks the worker creates ahead of demand
};

struct LakeResult {
  DevicePtr ptr = 0;           // 0 when no memory could be found
  Rung rung = Rung::fragment;  // the rung that served it
  std::size_t size = 0;        // rounded size handed out
  // The latest fence under which part of this memory was freed: the caller's
  // stream must wait for it unless it has completed (StreamScheduler).
  FenceId fence;
};

class Lake {
 public:
  Lake(Backend& backend, const LakeOptions& options, Stats& stats, ObserverList& observers);
  ~Lake();
  Lake(const Lake&) = delete;
  Lake& operator=(const Lake&) = delete;

  // Runs the ladder; ptr == 0 means out of memory (the caller may reclaim and
  // retry). With allow_new false, no chunk is created (the caller has other
  // places to look first); with allow_map false, nothing is mapped either
  // (only what is mapped and free serves). Throws backend_error when the
  // backend fails for another reason.
  // `history`: the caller's requests before this one (RequestHistory), which
  // tells where in a repeated step it comes.
  LakeResult allocate(std::size_t requested, bool allow_new = true, bool allow_map = true,
                      std::uint64_t history = 0);
  // The pointer must be a live allocation (see find()). `fence`: the block
  // may be in use by GPU work until that fence completes (fences_completed);
  // no unmapping before then, and a stream given the memory waits for the
  // fence (LakeResult::fence) unless `others_wait` is false: every stream
  // that could be given it has waited already (direct frees).
  void free(DevicePtr ptr, FenceId fence = {}, bool others_wait = true);
  // Fences up to and including `through` have completed.
  void fences_completed(FenceId through) { fences_done_ = through; }
  FenceId fences_done() const { return fences_done_; }
  // Cuts a live allocation after its first `keep` bytes (a multiple of
  // kAlignment, less than its size) into two; returns the second's address.
  DevicePtr split(DevicePtr ptr, std::size_t keep);
  const Allocation* find(DevicePtr ptr) const;
  // Why `ptr` is not a live allocation: "double free ...", "interior pointer
  // ...", or "unknown pointer ...".
  std::string diagnose_bad_pointer(DevicePtr ptr) const;

  // Unmaps idle segments and releases free chunks no live segment maps.
  // Returns the physical bytes released.
  std::size_t reclaim();
  std::size_t largest_free_block();
  std::size_t free_chunk_bytes() const { return free_chunk_bytes_; }
  std::size_t fragment_bytes() const { return fragment_bytes_; }
  std::size_t allocated_bytes() const { return allocated_bytes_; }  // live blocks, rounded
  // Kept in the stats gauges, which the lake updates.
  std::size_t reserved_bytes() const {
    return static_cast<std::size_t>(stats_.reserved_bytes.current);
  }
  std::size_t mapped_bytes() const { return static_cast<std::size_t>(stats_.mapped_bytes.current); }
  std::size_t capacity() const { return options_.capacity; }
  // The largest cached block that still counts as a fit for `size` bytes:
  // small blocks exactly, larger ones within the fit slack.
  std::size_t reuse_limit(std::size_t size) const {
    return size <= options_.small_max ? size : size + slack_for(size);
  }
  std::size_t granularity() const { return options_.granularity; }

  // Every other address at which the bytes of [ptr, ptr+size) can be read
  // (other segments mapping the same chunks), per chunk-sized run: pairs of
  // (alias address, length). For tests of stitching.
  std::vector<std::pair<DevicePtr, std::size_t>> aliases(DevicePtr ptr, std::size_t size) const;
  // The chunks (handle, size) of the live allocation at `ptr`, in address
  // order, and where it starts in the first.
  void chunks_of(DevicePtr ptr, std::vector<std::pair<ChunkHandle, std::size_t>>* out,
                 std::size_t* offset) const;

  // Worker jobs (consolidate.cpp), each in three steps: plan and commit under
  // the allocator's lock, execute (the VMM calls) without it.
  // A dropped range the backend did not fully unmap: retried later.
  struct Zombie {
    DevicePtr va = 0;
    std::size_t va_size = 0;  // 0: part of a segment's reservation, nothing to free
    std::vector<std::pair<DevicePtr, std::size_t>> mapped;
    std::string error;
  };
  struct StitchPlan {
    std::vector<ChunkId> ids;
    std::vector<std::pair<ChunkHandle, std::size_t>> handles;
    // Reserve top-up: chunks of these sizes are created by execute() (and
    // released again there if the job fails); commit() adopts them.
    std::vector<std::size_t> create_sizes;
    Status status = Status::ok;
    struct Range {
      DevicePtr va = 0;
      std::size_t va_size = 0, total = 0;
      std::vector<std::size_t> offsets;
      std::string error;             // the backend's message on failure
      std::vector<Zombie> leftover;  // what a failed mapping could not undo
    } range;
  };
  struct WorkerJob {
    bool stitch = false;
    StitchPlan plan;
    std::vector<Zombie> evictions;  // detached ranges to unmap
  };
  // Brings the segments mapping chunks claimed or freed since the last call
  // up to date: busy counts, the idle index, free runs (note_chunk_change).
  void catch_up();
  // Free memory is scattered after a request had to stitch, or more is
  // mapped than the cache budget allows: a job would help. Not const: they
  // may have the segments catch up.
  bool wants_work();
  bool wants_consolidation();
  bool wants_reserve() const;
  std::size_t consolidation_bytes() const;
  bool over_budget() const;
  std::size_t mapping_budget() const;  // mapped bytes allowed (stitch_cache_ratio)
  // Consolidation picks the free chunks to map into one range and pins them;
  // eviction detaches ranges over the budget.
  bool plan_job(WorkerJob* job);
  void execute(WorkerJob& job) const;
  // Registers the range (or, if mapping failed, leaves the lake as it was),
  // unpins the chunks, and keeps what could not be unmapped for a retry.
  void commit(WorkerJob& job);
  std::string check_invariants() const;
  // For tests: entries of the free-run index, segments whose runs it holds.
  std::size_t free_run_count() {
    catch_up();
    return free_runs_.size();
  }
  std::size_t indexed_segment_count() const;
  std::size_t behind_chunk_count() const;
  std::size_t indexed_consolidated_ranges() const { return consolidated_.size(); }

 private:
  // strategy.cpp
  LakeResult allocate_small(std::size_t size, std::uint64_t history);
  LakeResult allocate_small_ladder(std::size_t size);
  LakeResult allocate_large(std::size_t size);
  SegmentId find_idle_segment(std::size_t bytes) const;
  bool find_free_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const;
  LakeResult try_continuation(std::size_t size, bool extend);
  LakeResult try_run_between_pieces(std::size_t size);
  LakeResult try_grow_segment(std::size_t size);
  LakeResult take_reserve_run(std::size_t bytes, std::size_t size);
  LakeResult try_borrowed_ends(std::size_t size);
  // remembered.cpp: a request is known by its size, how many blocks of that
  // size are allocated when it comes, and the requests before it.
  struct PlaceKey {
    std::size_t size = 0;
    std::size_t count = 0;      // blocks of that size allocated
    std::uint64_t history = 0;  // the requests before it (RequestHistory)
    bool operator==(const PlaceKey&) const = default;
  };
  struct PlaceKeyHash {
    std::size_t operator()(const PlaceKey& k) const {
      return (k.size * 31 + k.count) * 0x9E3779B97F4A7C15ull ^ k.history;
    }
  };
  PlaceKey place_key(std::size_t size, std::uint64_t history) const;
  void remember_place(PlaceKey key, DevicePtr ptr);
  LakeResult try_remembered(PlaceKey key);
  bool free_at(DevicePtr ptr, std::size_t size, SegmentId* s, std::uint32_t* slot, Piece** piece,
               std::size_t* lead) const;
  bool excluded_from(ChunkId c, SegmentId s) const;
  bool extend_segment(SegmentId s, std::vector<ChunkId> ids);
  void remember_tail(SegmentId s, std::size_t last_chunk_index);
  Piece* find_fragment(std::size_t size) const;
  SegmentId build_segment_for(std::size_t bytes, bool* stitched);
  // `exclude`: skip chunks already mapped in that segment.
  bool gather_chunks(std::size_t bytes, std::vector<ChunkId>* chosen, std::vector<ChunkId>* created,
                     SegmentId exclude = kNone);
  bool select_free_chunks(std::size_t bytes, std::vector<ChunkId>* chosen,
                          SegmentId exclude = kNone) const;
  std::size_t slack_for(std::size_t bytes) const;
  std::vector<std::size_t> chunk_sizes_for(std::size_t bytes) const;

  // segments.cpp
  using MappedRange = StitchPlan::Range;
  Status map_range(const std::vector<std::pair<ChunkHandle, std::size_t>>& chunks,
                   MappedRange* out) const;
  SegmentId register_segment(std::vector<ChunkId> ids, MappedRange range, bool stitched);
  SegmentId map_segment(std::vector<ChunkId> chunks, bool stitched);
  bool unmap_segment(SegmentId s);
  Zombie detach_segment(SegmentId s);
  void plan_evictions(std::vector<Zombie>* out, SegmentId keep);
  bool retire(Zombie& z, bool may_unreserve) const;
  bool mapped_inside(DevicePtr va, std::size_t size) const;
  bool retire_zombies();
  void enforce_cache_budget(SegmentId keep);
  ChunkId create_chunk(std::size_t size);  // kNone on OOM
  ChunkId adopt_chunk(ChunkHandle handle, std::size_t size);
  void release_chunk(ChunkId c);
  void claim(ChunkId c, SegmentId s, std::size_t offset_in_segment);
  void dissolve_reserve(SegmentId s);
  bool find_reserve_run(std::size_t bytes, SegmentId* s, std::uint32_t* start) const;
  void unclaim(ChunkId c);
  void touch(SegmentId s);
  void pin(SegmentId s, std::uint32_t Segment::*count, bool add);
  // Free-run index upkeep (segments.cpp).
  std::size_t run_bytes(const Segment& seg, std::uint32_t start, std::uint32_t count) const;
  void run_insert(SegmentId s, std::uint32_t start, std::uint32_t count);
  void run_erase(SegmentId s, SlotRuns::iterator it);
  void slots_freed(SegmentId s, std::uint32_t index, std::uint32_t count);
  void slots_claimed(SegmentId s, std::uint32_t index, std::uint32_t count);
  void note_chunk_change(ChunkId c);
  // Frees leave the segments behind: requests keep hitting their places.
  bool frees_may_lag() const;
  void apply_stretches(const std::vector<Mapping>& slots, bool freed);
  // Drops segment `s`'s runs from the index for good (Segment::indexed).
  void unindex(SegmentId s);
  // After the consolidated range `range` was registered: idle segments all
  // of whose chunks it maps leave the run index.
  void unindex_superseded(SegmentId range);
  void idle_insert(SegmentId s);
  void idle_erase(SegmentId s);

  // pieces.cpp
  Piece* carve(Piece* free_piece, std::size_t size);
  Piece* carve_back(Piece* free_piece, std::size_t size);
  Piece* split_piece(Piece* allocated, std::size_t at);
  void free_piece(Piece* p);
  void fragment_insert(Piece* p);
  void fragment_erase(Piece* p);
  DevicePtr piece_address(const Piece* p) const;
  DevicePtr place_span(SegmentId s, std::uint32_t first, Piece* tail, std::size_t size,
                       std::size_t lead = 0);
  // Where a block placed on free chunks from slot `first` of `s` starts in
  // the first: past a free head that takes the slack, or at 0.
  std::size_t lead_for(SegmentId s, std::uint32_t first, std::size_t size) const;
  DevicePtr place_on_piece(Piece* fragment, std::size_t size, std::size_t requested);
  void record(DevicePtr ptr, const Allocation& a);
  void count_size(std::size_t size, int delta);  // allocated_by_size_
  // Starts or ends in a chunk its segment does not own (try_borrowed_ends).
  bool borrows(const Allocation& a) const;
  // The last piece of owned chunk `c` if it is free, else nullptr.
  Piece* free_tail(ChunkId c) const;
  // That of the chunk before `slot` in segment `s`, if `s` owns it.
  Piece* free_tail_before(SegmentId s, std::uint32_t slot) const;

  [[noreturn]] void backend_failure(const char* what, Status s) const;
  [[noreturn]] void backend_failure(const char* what, Status s, const std::string& cause) const;

  Backend& backend_;
  LakeOptions options_;
  Stats& stats_;
  ObserverList& observers_;
  NodePool pool_;  // before every container that draws from it

  template <typename T, typename Order = std::less<T>>
  using PoolSet = std::set<T, Order, PoolAllocator<T>>;
  template <typename K, typename V>
  using PoolMap = std::map<K, V, std::less<K>, PoolAllocator<std::pair<const K, V>>>;
  Piece* new_piece(const Piece& p) { return new (pool_.get(sizeof(Piece))) Piece(p); }
  void delete_piece(Piece* p) { pool_.put(p, sizeof(Piece)); }

  std::vector<Chunk> chunks_;
  std::vector<ChunkId> free_chunk_slots_;
  std::vector<Segment> segments_;
  std::vector<SegmentId> free_segment_slots_;

  struct FragmentOrder {
    bool operator()(const Piece* a, const Piece* b) const {
      if (a->size != b->size) return a->size < b->size;
      if (a->chunk != b->chunk) return a->chunk < b->chunk;
      return a->offset < b->offset;
    }
  };
  PoolSet<Piece*, FragmentOrder> fragments_{FragmentOrder{}, PoolAllocator<Piece*>(&pool_)};
  FreeChunkSet free_chunks_;  // by size, then id
  using SizeKey = std::pair<std::size_t, SegmentId>;
  PoolSet<SizeKey> idle_by_size_{PoolAllocator<SizeKey>(&pool_)};  // busy == 0
  using AgeKey = std::pair<std::uint64_t, SegmentId>;
  PoolSet<AgeKey> unpinned_by_age_{PoolAllocator<AgeKey>(&pool_)};  // !pinned(), LRU order
  using BaseEntry = std::pair<const DevicePtr, SegmentId>;
  PoolMap<DevicePtr, SegmentId> segment_at_{PoolAllocator<BaseEntry>(&pool_)};  // by base address
  RunIndex free_runs_;  // every indexed segment's runs of free chunks, by size
  std::unordered_map<DevicePtr, Allocation, std::hash<DevicePtr>, std::equal_to<DevicePtr>,
                     PoolAllocator<std::pair<const DevicePtr, Allocation>>>
      allocations_{0, std::hash<DevicePtr>{}, std::equal_to<DevicePtr>{},
                   PoolAllocator<std::pair<const DevicePtr, Allocation>>(&pool_)};
  std::vector<Zombie> zombies_;  // retried by reclaim() and the destructor
  std::string last_failure_;

  std::size_t free_chunk_bytes_ = 0;
  std::size_t fragment_bytes_ = 0;
  // Of those, in fragments that start their chunk (heads) and that end it
  // (tails); a piece alone in its chunk is never free (the chunk would be).
  std::size_t head_fragment_bytes_ = 0;
  std::size_t tail_fragment_bytes_ = 0;
  std::size_t allocated_bytes_ = 0;
  std::uint64_t clock_ = 0;
  FenceId fences_done_;
  FenceId placed_fence_;  // record(): of the block placed last
  bool unmappable(const Segment& seg) const { return seg.fence <= fences_done_; }
  bool allow_new_ = true;                    // for the allocate() call in progress
  bool allow_map_ = true;                    // likewise
  bool stitch_demand_ = false;               // a request stitched since the last consolidation
  std::size_t demand_target_ = 0;            // the largest large request since the last reclaim
  std::size_t creating_bytes_ = 0;           // a reserve job's chunks in the making
  std::vector<SegmentId> reserve_segments_;  // ranges over the worker's reserve
  std::vector<SegmentId> consolidated_;      // the worker's indexed ranges, oldest first
  // Chunks marked kRunListed (some no longer behind). A chunk released while
  // listed loses its marks, so catch_up skips its entry.
  std::vector<ChunkId> lagging_chunks_;
  // Large requests in a row that came back to their remembered places, with
  // no request in between that had the segments catch up (Lake::allocate).
  std::uint32_t hit_streak_ = 0;
  std::vector<Mapping> caught_claimed_, caught_freed_;  // catch_up's scratch
  struct Stretch {
    std::uint32_t start = 0, count = 0;
  };
  std::vector<Stretch> open_stretches_;      // apply_stretches' scratch: one per segment
  std::vector<SegmentId> touched_segments_;  // ...with an open stretch
  // Chunks whose last piece was left free by a recent placement: where the
  // next large block may continue (newest last). Validated on use.
  std::vector<ChunkId> recent_tails_;
  // Where large requests were placed, newest last, by PlaceKey (remembered.cpp).
  std::unordered_map<PlaceKey, std::vector<DevicePtr>, PlaceKeyHash> remembered_;
  std::unordered_map<std::size_t, std::size_t> allocated_by_size_;  // large blocks only
};

}  // namespace memlake::lake
