// The lake: where a block goes. It places requests on the chunks of a
// ChunkPool through the ranges of its SegmentTable, by the ladder of
// ladder.cpp, and takes them back on free. It knows nothing of streams: the
// allocator hands it a freed block with an opaque FenceId (src/stream/), and
// the lake keeps the newest fence each chunk and range was freed under.
//
// Parts (each file opens with what it owns):
//   chunk_pool.*      physical chunks, free or held by a client (this lake)
//   segment_table.*   virtual ranges: mapping, idle and free-run indexes,
//   segment_runs.cpp  catch-up, the mapping budget
//   ladder.cpp        the ladder: which rung is tried, in which order
//   rungs.cpp         one function per rung
//   pieces.cpp        byte ranges inside chunks: placing, carving, freeing
//   gather.cpp        choosing free chunks and making new ones for a range
//   remembered.cpp    the places requests had in earlier steps
//   place_at.cpp      a block put back at an address (graph pool checkpoints)
//   lake.cpp          lifetime, lookups, reclaim, diagnostics
//   invariants.cpp    the checks of every part
// Not thread-safe: the allocator holds its lock.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "common/node_pool.hpp"
#include "common/observer_list.hpp"
#include "lake/chunk_pool.hpp"
#include "lake/fragments.hpp"
#include "lake/segment_table.hpp"
#include "lake/types.hpp"
#include "memlake/observer.hpp"
#include "memlake/stats.hpp"
#include "stream/fence.hpp"

namespace memlake::lake {

// Addresses remembered per request key, and keys at most (remembered.cpp).
inline constexpr std::size_t kRememberedPlaces = 4;
inline constexpr std::size_t kRememberedKeys = std::size_t{1} << 16;

struct LakeOptions {
  std::size_t granularity = std::size_t{2} << 20;
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

// One request, as the ladder sees it.
struct Request {
  std::size_t size = 0;       // rounded to kAlignment
  std::uint64_t history = 0;  // the caller's requests before it (RequestHistory)
};

// What a rung may do beyond reusing what is mapped and free.
enum class Budget : std::uint8_t {
  reuse,   // map nothing
  map,     // map chunks that exist
  create,  // create chunks too
};

struct Placed {
  DevicePtr ptr = 0;     // 0: not placed
  std::size_t size = 0;  // the rounded size handed out
  Rung rung = Rung::fragment;
  // The newest fence part of this memory was freed under: a stream given
  // it waits for that fence unless it has completed.
  FenceId fence;
  explicit operator bool() const { return ptr != 0; }
};

// How new memory of `bytes` is cut into chunks (gather.cpp).
std::vector<std::size_t> chunk_sizes_for(std::size_t bytes, const LakeOptions& o);

class Lake final : private ChunkPool::Client {
 public:
  Lake(Backend& backend, ChunkPool& pool, const LakeOptions& options, Stats& stats,
       ObserverList& observers, Refusal& refusal);
  ~Lake() override;
  Lake(const Lake&) = delete;
  Lake& operator=(const Lake&) = delete;

  // The ladder (ladder.cpp): the cheapest rung that serves `r` and needs no
  // more than `budget`, skipping the rungs that need less than `from` (tried
  // by an earlier call for the same request). Throws backend_error when the
  // backend fails for another reason than a lack of memory.
  Placed place(const Request& r, Budget budget, Budget from = Budget::reuse);
  // A block of `size` bytes (rounded) at `ptr`, where the lake placed one
  // before and whose bytes are all free again (place_at.cpp); an empty
  // Placed when they are not, or `ptr` lies in no range of this lake.
  Placed place_at(DevicePtr ptr, std::size_t size);
  // The pointer must be a live allocation (find()). The block may be in use
  // by work queued before `fence`: no unmapping before it completes, and a
  // stream given the memory waits for it (Placed::fence) unless
  // `others_wait` is false (every stream that could be given it has waited).
  void free(DevicePtr ptr, FenceId fence = {}, bool others_wait = true);
  void fences_completed(FenceId through) { table_.set_fences_done(through); }
  FenceId fences_done() const { return table_.fences_done(); }

  const Allocation* find(DevicePtr ptr) const;
  // The caller's note on the live block at `ptr` (CallerNote), for the
  // caller to fill in after place() and read back; nullptr when no live
  // block starts at `ptr`.
  CallerNote* caller_note(DevicePtr ptr) {
    auto it = allocations_.find(ptr);
    return it == allocations_.end() ? nullptr : &it->second.caller;
  }
  // Calls f(ptr, allocation) for every live block, in no order.
  template <class F>
  void each_allocation(F&& f) const {
    for (const auto& [ptr, a] : allocations_) f(ptr, a);
  }
  std::size_t allocation_count() const { return allocations_.size(); }
  // Why `ptr` is not a live allocation: "double free ...", "interior pointer
  // ...", or "unknown pointer ...".
  std::string diagnose_bad_pointer(DevicePtr ptr) const;
  // Unmaps idle ranges and releases free chunks no range maps; returns the
  // physical bytes released. What the backend refuses for want of a
  // resource stays for a later try; a refusal for another reason throws
  // backend_error (the lake stays consistent and retries later).
  std::size_t reclaim();
  std::size_t largest_free_block();
  std::size_t free_chunk_bytes() const { return pool_.free_bytes(); }
  std::size_t fragment_bytes() const { return fragments_.bytes(); }
  std::size_t allocated_bytes() const { return allocated_bytes_; }  // live blocks, rounded
  std::size_t reserved_bytes() const { return pool_.reserved_bytes(); }
  std::size_t capacity() const { return pool_.capacity(); }
  std::size_t granularity() const { return options_.granularity; }
  const LakeOptions& options() const { return options_; }

  // Every other address at which the bytes of [ptr, ptr+size) can be read
  // (other ranges mapping the same chunks), per chunk: pairs of (alias
  // address, length). For tests of stitching.
  std::vector<std::pair<DevicePtr, std::size_t>> aliases(DevicePtr ptr, std::size_t size) const;
  // The chunks (handle, size) of the live allocation at `ptr`, in address
  // order, and where it starts in the first (sharing).
  void chunks_of(DevicePtr ptr, std::vector<std::pair<ChunkHandle, std::size_t>>* out,
                 std::size_t* offset) const;

  // The mapping worker's view (src/worker/jobs.cpp), under the allocator's lock.
  ChunkPool& pool() { return pool_; }
  SegmentTable& segments() { return table_; }
  const SegmentTable& segments() const { return table_; }

  std::string check_invariants() const;
  // For tests: entries of the free-run index after catching up.
  std::size_t free_run_count() {
    table_.catch_up();
    return table_.free_runs().size();
  }

 private:
  // Per chunk, what placement keeps: 32 bytes, two to a cache line, since a
  // large block's chunks mostly have consecutive ids.
  struct ChunkUse {
    SegmentId owner = kNone;       // the range through which its live pieces are reached
    std::uint32_t live = 0;        // allocated pieces
    std::size_t owner_offset = 0;  // the chunk's offset inside its owner
    Piece* pieces = nullptr;       // head of the piece list while owned
    FenceId fence;                 // the newest fence a block in it was freed under
  };
  static_assert(sizeof(ChunkUse) == 32);
  // A request is known by its size, how many blocks of that size are
  // allocated when it comes, and the requests before it; a large one also
  // by the bytes allocated when it comes (remembered.cpp).
  struct PlaceKey {
    std::size_t size = 0;
    std::size_t count = 0;
    std::uint64_t history = 0;
    std::size_t allocated = 0;  // bytes allocated in the lake (large requests; 0 in remembered_)
    bool operator==(const PlaceKey&) const = default;
    PlaceKey without_allocated() const { return {size, count, history, 0}; }
  };
  struct PlaceKeyHash {
    std::size_t operator()(const PlaceKey& k) const {
      return ((k.size * 31 + k.count) * 31 + k.allocated) * 0x9E3779B97F4A7C15ull ^ k.history;
    }
  };
  // A remembered address, with the range and chunk slot it was found in
  // when last looked up: checked against that range first, so a request
  // back at its place reads one range's entry instead of searching the
  // address map (`segment` kNone until first looked up).
  struct Place {
    DevicePtr ptr = 0;
    SegmentId segment = kNone;
    std::uint32_t slot = 0;
  };
  using Places = std::vector<Place>;  // newest last
  using PlaceMap = std::unordered_map<PlaceKey, Places, PlaceKeyHash>;

  // ChunkPool::Client: chunk_changed hears of other clients' takes and
  // give-backs; claim and unclaim note the lake's own.
  void chunk_added(ChunkId id) override;
  void chunk_removed(ChunkId id) override;
  void chunk_changed(ChunkId id) override { table_.note_chunk_change(id); }

  // ladder.cpp
  // `key` is place_key(r): no rung that fails changes it.
  Placed climb(Rung rung, const Request& r, const PlaceKey& key, Budget budget);
  bool small(const Request& r) const { return r.size <= options_.small_max; }
  // The table's indexes are about to be read: segments left behind catch up
  // (and a lag that a request had to pay for ends the hit streak).
  void read_segments();
  bool frees_may_lag() const;

  // rungs.cpp: each returns an empty Placed when it cannot serve.
  Placed rung_remembered(const Request& r, const PlaceKey& key);
  Placed rung_fragment(const Request& r);
  Placed rung_idle_segment(const Request& r);
  Placed rung_continuation(const Request& r, bool extend, Budget budget);
  // Whether a large block of `size` grows one freed lately, and whether it
  // grows one that had itself grown: a buffer that keeps growing (rungs.cpp).
  bool grows_a_freed_block(std::size_t size) const;
  bool keeps_growing(std::size_t size) const;
  Placed rung_run_between_pieces(const Request& r);
  Placed rung_free_run(const Request& r);
  Placed rung_grow(const Request& r, Budget budget);
  Placed rung_borrowed_ends(const Request& r);
  Placed rung_reserve(const Request& r);
  Placed rung_new_range(const Request& r, Budget budget);
  bool extend_by(SegmentId s, std::size_t need, Budget budget);
  bool borrowed_ends_for(std::size_t size, Piece** tail, Piece** head, std::size_t* middle) const;

  // lake.cpp
  // Where `ptr` lies: its range (not a reserve), the slot of the chunk under
  // it and the offset into that chunk; false when no range of the lake holds it.
  bool locate(DevicePtr ptr, SegmentId* s, std::uint32_t* slot, std::size_t* offset) const;
  // locate() for a remembered place: its range and slot first, then the
  // search (which updates them).
  bool locate(Place& place, SegmentId* s, std::uint32_t* slot, std::size_t* offset) const;

  // remembered.cpp
  PlaceKey place_key(const Request& r) const;
  void remember_place(const PlaceKey& key, DevicePtr ptr);
  // Makes `ptr` the newest of the places in `places`, or of key's places in
  // `map` when `places` is null.
  static void remember_in(PlaceMap& map, const PlaceKey& key, Places* places, DevicePtr ptr);
  Placed place_at_one_of(const Request& r, Places& places);
  bool free_at(Place& place, std::size_t size, SegmentId* s, std::uint32_t* slot, Piece** piece,
               std::size_t* lead) const;
  void count_size(std::size_t size, int delta);

  // gather.cpp
  // Free chunks for `bytes` (none mapped in `exclude`), plus new chunks for
  // what they do not cover when `create`. Largest first.
  bool gather_chunks(std::size_t bytes, bool create, std::vector<ChunkId>* chosen,
                     std::vector<ChunkId>* created, SegmentId exclude = kNone);
  bool select_free_chunks(std::size_t bytes, std::vector<ChunkId>* chosen, SegmentId exclude) const;
  // Whether mapping `need` more bytes after the end of `s` would leave free
  // chunks out (beyond the `counted` bytes of them the caller uses in
  // place): a range cannot map a chunk twice, so new memory made then would
  // stand in for them, where a new range over every free chunk makes only
  // what they lack.
  bool growth_leaves_out_free_chunks(SegmentId s, std::size_t need, std::size_t counted) const;
  SegmentId build_segment_for(std::size_t bytes, bool create, bool* stitched);
  void release_all(const std::vector<ChunkId>& created);
  std::size_t slack_for(std::size_t bytes) const;

  // place_at.cpp
  Piece* free_piece_over(ChunkId c, std::size_t from, std::size_t to) const;
  Piece* carve_at(Piece* free_piece, std::size_t offset, std::size_t size);

  // pieces.cpp
  Placed place_span(Rung rung, SegmentId s, std::uint32_t first, Piece* tail, std::size_t size,
                    std::size_t lead = 0);
  Placed place_on_piece(Rung rung, Piece* fragment, std::size_t size);
  // Where a block placed on free chunks from slot `first` of `s` starts in
  // the first: past a free head that takes the slack, or at 0.
  std::size_t lead_for(SegmentId s, std::uint32_t first, std::size_t size) const;
  Piece* carve(Piece* free_piece, std::size_t size);
  Piece* carve_back(Piece* free_piece, std::size_t size);
  // Returns the owner of the chunk when its last piece went (the chunk went
  // back to the pool; the caller unpins the owner), else kNone.
  SegmentId free_piece(Piece* p);
  DevicePtr piece_address(const Piece* p) const;
  // `fence`, when given, is the newest fence of the block's chunks, found by
  // the caller on its walk over them.
  FenceId record(DevicePtr ptr, const Allocation& a, const FenceId* fence = nullptr);
  bool borrows(const Allocation& a) const;
  Piece* free_tail(ChunkId c) const;
  Piece* free_tail_before(SegmentId s, std::uint32_t slot) const;
  void remember_tail(SegmentId s, std::size_t last_chunk_index);
  // Takes / gives back one chunk; the caller pins / unpins its owner, once
  // for all the chunks of a block.
  void claim(ChunkId c, SegmentId s, std::size_t offset_in_segment);
  SegmentId unclaim(ChunkId c);  // returns the owner it had
  // The body of a large block: `count` chunks from slot `first` of `s`,
  // each wholly the block's, taken (all free) or given back (the block is
  // freed) together. claim_whole returns the first chunk's piece and raises
  // `fence` to the newest fence of the chunks; unclaim_whole gives back
  // `count` chunks from slot `first` on, each held whole by the block,
  // raising their fences to `fence` first.
  Piece* claim_whole(SegmentId s, std::uint32_t first, std::uint32_t count, FenceId* fence);
  void unclaim_whole(SegmentId s, std::uint32_t first, std::uint32_t count, FenceId fence);
  // Chunk `c` is owned by `s` and holds one live piece, the whole chunk.
  bool held_whole_by(ChunkId c, SegmentId s) const {
    const ChunkUse& u = use_[c];
    return u.owner == s && u.live == 1 && u.pieces->next == nullptr;
  }
  Piece* new_piece(const Piece& p) { return new (nodes_.get(sizeof(Piece))) Piece(p); }
  void delete_piece(Piece* p) { nodes_.put(p, sizeof(Piece)); }

  Backend& backend_;
  ChunkPool& pool_;
  LakeOptions options_;
  Stats& stats_;
  ObserverList& observers_;
  Refusal& refusal_;
  NodePool nodes_;  // before every container that draws from it
  ClientId client_;
  SegmentTable table_;
  std::vector<ChunkUse> use_;  // by chunk id
  // By chunk id: the piece a chunk had when it was last given back whole
  // (unclaim_whole), still describing the whole chunk allocated, for the
  // next claim_whole of it; null when there is none.
  std::vector<Piece*> spare_;
  FragmentIndex fragments_;
  std::unordered_map<DevicePtr, Allocation, std::hash<DevicePtr>, std::equal_to<DevicePtr>,
                     PoolAllocator<std::pair<const DevicePtr, Allocation>>>
      allocations_;
  std::size_t allocated_bytes_ = 0;
  // Large requests in a row that came back to their remembered places, with
  // no request in between that had the segments catch up.
  std::uint32_t hit_streak_ = 0;
  // Chunks whose last piece was left free by a recent placement: where the
  // next large block may continue (newest last). Validated on use.
  std::vector<ChunkId> recent_tails_;
  // The last large blocks freed, and whether each had grown one before it:
  // how a buffer that grows step by step is told from sizes that vary.
  struct Freed {
    std::size_t size = 0;
    bool grew = false;
  };
  std::array<Freed, 8> freed_{};
  std::size_t freed_next_ = 0;
  // Where requests were placed, by PlaceKey without the bytes allocated,
  // and (large requests) with them.
  PlaceMap remembered_;
  PlaceMap remembered_at_allocated_;
  // The places rung_remembered found under the request's key with the
  // bytes allocated, for remember_place (no rung in between changes the
  // maps); null when there were none.
  Places* places_at_allocated_ = nullptr;
  // Large blocks only. A size's entry goes when its last block is freed and
  // comes back with the next one, every step: its nodes come from nodes_.
  std::unordered_map<std::size_t, std::size_t, std::hash<std::size_t>, std::equal_to<std::size_t>,
                     PoolAllocator<std::pair<const std::size_t, std::size_t>>>
      allocated_by_size_;
};

}  // namespace memlake::lake
