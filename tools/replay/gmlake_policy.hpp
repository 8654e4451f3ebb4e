// GmlakePolicy: a simulation of GMLake's allocator (ASPLOS'24; the GMLake
// folder of intelligent-machine-learning/glake, src/CUDACachingAllocator.cpp
// and include/cuda_vmm_allocator.h), for side-by-side comparison in
// memlake-replay. No memory is touched: it tracks blocks, 2 MiB physical
// chunks and stitched ranges, and counts the physical bytes and the driver
// calls GMLake would have made. docs/replay.md says what is modelled.
//
// Pools, as in GMLake: requests up to 1 MiB go to the stock small pool
// (2 MiB cudaMalloc segments split at 512 B); larger requests are rounded to
// 2 MiB and served, in order, by best fit among free pBlocks of the stream,
// best fit among free sBlocks of the stream (if at most reuse_limit times the
// request), stitching free pBlocks of the stream (requests >= frag_limit
// only), a new segment of 2 MiB chunks, and after an out-of-memory a release
// of every fully free segment and a retry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace memlake {

struct GmlakeOptions {
  // Environment knobs of GMLake, with its defaults.
  std::uint64_t frag_limit = std::uint64_t{512} << 20;      // fragLimit
  double reuse_limit = 10.0;                                // reuseLimit
  int defrag_level = 0;                                     // defragLevel
  std::uint64_t auto_gc_bytes = std::uint64_t{1000} << 30;  // autoGC (GiB)
  bool defragment = true;                                   // vmmDefragment
  // Physical bytes the device may hold; 0: unlimited.
  std::uint64_t capacity = 0;
};

struct GmlakeCounters {
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t ooms = 0;
  // Which step served each allocation.
  std::uint64_t path_small_cached = 0;   // free block of the small pool
  std::uint64_t path_small_new = 0;      // new 2 MiB small segment
  std::uint64_t path_block = 0;          // best-fit free pBlock
  std::uint64_t path_sblock = 0;         // reuse of a cached sBlock
  std::uint64_t path_stitch = 0;         // new sBlock stitched from free pBlocks
  std::uint64_t path_new = 0;            // new segment of chunks
  std::uint64_t path_after_release = 0;  // new segment after releasing cached segments
  std::uint64_t stitched_chunks = 0;     // chunks mapped into new sBlocks
  std::uint64_t sblocks_collected = 0;   // sBlocks unmapped by GC or by release
  std::uint64_t segments_released = 0;
  // Driver calls: cudaMalloc/cudaFree for the small pool, VMM for the rest.
  std::uint64_t cuda_malloc = 0;
  std::uint64_t cuda_free = 0;
  std::uint64_t mem_create = 0;
  std::uint64_t mem_release = 0;
  std::uint64_t address_reserve = 0;
  std::uint64_t address_free = 0;
  std::uint64_t mem_map = 0;
  std::uint64_t mem_unmap = 0;
  std::uint64_t set_access = 0;

  std::uint64_t vmm_calls() const {
    return mem_create + mem_release + address_reserve + address_free + mem_map + mem_unmap +
           set_access;
  }
};

class GmlakePolicy {
 public:
  static constexpr std::uint64_t kGranularity = std::uint64_t{2} << 20;

  explicit GmlakePolicy(const GmlakeOptions& options = {});

  // Returns false when the request does not fit in the capacity (GMLake would
  // raise OutOfMemoryError); the id is then not live. Throws memlake::misuse
  // for an id that is already live.
  bool allocate(std::uint64_t id, std::uint64_t bytes, std::uint64_t stream);
  // Throws memlake::misuse for an id that is not live.
  void free(std::uint64_t id);

  std::uint64_t reserved() const { return reserved_; }
  std::uint64_t peak_reserved() const { return peak_reserved_; }
  std::uint64_t live_requested() const { return live_requested_; }
  std::uint64_t peak_requested() const { return peak_requested_; }
  const GmlakeCounters& counters() const { return counters_; }
  const GmlakeOptions& options() const { return options_; }

  // GMLake's size classes.
  static std::uint64_t round_size(std::uint64_t bytes);
  static std::uint64_t allocation_size(std::uint64_t rounded);

  // Empty when every internal invariant holds; else the first broken one.
  std::string check_invariants() const;

 private:
  static constexpr std::uint32_t kNone = UINT32_MAX;

  enum class Kind : std::uint8_t { small, piece, fused };
  // pooled: in a free pool (small, large or free sBlocks). allocated: handed
  // to a caller. covered: a pBlock piece whose chunks all serve an sBlock.
  // fragmented: a free sBlock some of whose chunks are in use elsewhere.
  enum class State : std::uint8_t { pooled, allocated, covered, fragmented, dead };

  struct Block {
    Kind kind = Kind::piece;
    State state = State::dead;
    bool gc_on_free = false;  // a chunk of this active sBlock was released
    std::uint64_t stream = 0;
    std::uint64_t size = 0;
    std::uint64_t addr = 0;
    std::uint32_t segment = kNone;
    std::uint32_t first = 0;  // piece: first chunk within its segment
    std::uint32_t prev = kNone;
    std::uint32_t next = kNone;
    std::uint32_t free_chunks = 0;      // fused
    std::uint32_t used_chunks = 0;      // fused: chunks [0, used) serve the caller
    std::vector<std::uint32_t> chunks;  // fused: chunk ids in mapping order
  };
  struct Chunk {
    std::uint32_t owner = kNone;  // the pBlock piece holding it
    bool free = true;
    bool released = false;
    std::vector<std::uint32_t> sblocks;  // sBlocks mapping it
  };
  struct Segment {
    bool small = false;
    bool released = false;
    std::uint64_t stream = 0;
    std::uint64_t addr = 0;
    std::uint64_t size = 0;
    std::uint32_t base_chunk = 0;
  };
  struct Key {
    std::uint64_t stream;
    std::uint64_t size;
    std::uint64_t addr;
    std::uint32_t block;
    bool operator<(const Key& o) const {
      if (stream != o.stream) return stream < o.stream;
      if (size != o.size) return size < o.size;
      if (addr != o.addr) return addr < o.addr;
      return block < o.block;
    }
  };
  using Pool = std::set<Key>;
  struct Live {
    std::uint32_t block;
    std::uint64_t bytes;
  };
  struct Request {
    std::uint64_t stream;
    std::uint64_t size;        // rounded
    std::uint64_t alloc_size;  // a new segment's size
    bool small;
    std::uint32_t block = kNone;
  };

  std::uint32_t new_block();
  void drop_block(std::uint32_t b);
  Key key(std::uint32_t b) const {
    return {blocks_[b].stream, blocks_[b].size, blocks_[b].addr, b};
  }
  Pool& pool_of(const Block& b) { return b.kind == Kind::small ? small_pool_ : large_pool_; }
  std::uint32_t chunk_id(const Block& piece, std::uint32_t i) const {
    return segments_[piece.segment].base_chunk + piece.first + i;
  }
  std::uint32_t piece_chunks(const Block& piece) const {
    return static_cast<std::uint32_t>(piece.size / kGranularity);
  }
  std::uint64_t new_va(std::uint64_t size);

  bool get_free_block(Request& r);
  bool take_sblock(Request& r, std::uint32_t s);
  bool stitch(Request& r, int time);
  bool new_segment(Request& r);
  bool release_cached();
  void release_segment_block(std::uint32_t b);
  void collect_fused(bool include_free);
  void delete_sblock(std::uint32_t s);
  void finish_allocation(Request& r);

  void chunk_used(std::uint32_t c, std::uint32_t except);
  void chunk_freed(std::uint32_t c, std::uint32_t except);
  void free_piece(std::uint32_t b);  // back to its pool, merged with free neighbours
  std::uint32_t split_front(std::uint32_t b, std::uint64_t size);
  void set_owner(std::uint32_t b);

  // The parts of check_invariants(): each returns what is broken, or "".
  struct Tally;
  std::string check_piece(std::uint32_t b, Tally& tally) const;
  std::string check_sblock(std::uint32_t b, Tally& tally) const;
  std::string check_tally(const Tally& tally) const;

  GmlakeOptions options_;
  GmlakeCounters counters_;
  std::vector<Block> blocks_;
  std::vector<std::uint32_t> free_block_ids_;
  std::vector<Chunk> chunks_;
  std::vector<Segment> segments_;
  Pool small_pool_;
  Pool large_pool_;
  Pool fused_pool_;  // free sBlocks
  std::unordered_map<std::uint64_t, Live> live_;
  std::uint64_t next_va_ = std::uint64_t{1} << 40;
  std::uint64_t reserved_ = 0;
  std::uint64_t peak_reserved_ = 0;
  std::uint64_t live_requested_ = 0;
  std::uint64_t peak_requested_ = 0;
  std::uint64_t total_fuse_size_ = 0;
};

}  // namespace memlake
