// The lake's core types. Glossary:
//
//  chunk       One physical handle from the backend (a multiple of the
//              granularity). The unit of stitching: mapped whole, never split.
//  segment     A reserved virtual range with chunks mapped back to back. The
//              first segment over new chunks is a pBlock; a segment built
//              over chunks that already existed is a stitched sBlock. A chunk
//              may be mapped in several segments at once.
//  owner       The one segment through whose addresses a chunk's live
//              allocations are reached. A chunk with no live allocation has
//              no owner and is *free*: any segment may claim it.
//  piece       A byte range inside an owned chunk, allocated or free. Free
//              pieces are the *fragments* that small requests and the tails
//              of large blocks share (512-byte granular).
//  allocation  What the caller holds: one piece, or pieces of several
//              consecutive chunks of one segment: the first may start inside
//              its chunk (a *continuation* of the tail of the block before
//              it, so that chunk's tail is not wasted, or past a free *head*
//              left for the slack of its last granule, Lake::lead_for); the
//              others start at their chunk's offset 0. The first and the
//              last chunk may be owned by another segment (*borrowed ends*:
//              the allocation's segment was mapped over a chunk with a free
//              tail, chunks for the middle and a chunk with a free head).
//
// Chunk identity (checked by Lake::check_invariants):
//   every chunk is free (in the free pool, no owner, no live piece) or owned
//   by exactly one segment that maps it and holds >= 1 live piece in it;
//   sum(chunk sizes) == reserved bytes.
// Behind: a chunk claimed or freed since the segments mapping it last
// caught up (Lake::note_chunk_change, Lake::catch_up). Their busy counts, the
// idle index and their free runs tell the chunk's state as of then.
// Free runs: every maximal run of consecutive slots of an indexed segment
// whose chunks are free, or claimed but still behind, less those freed but
// still behind, is in Segment::runs and in the lake's free-run index.
// Segment state: busy == number of its chunks that have an owner (as of the
// last catch-up); a segment with busy == 0 is *idle* (cached, reusable whole,
// evictable); a segment can be unmapped only when it owns no chunk and no
// allocation borrows through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "backend/backend.hpp"
#include "lake/slot_runs.hpp"
#include "node_pool.hpp"
#include "stream/fence.hpp"

namespace memlake::lake {

using ChunkId = std::uint32_t;
using SegmentId = std::uint32_t;
inline constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
inline constexpr std::size_t kAlignment = 512;  // every allocation and piece
inline constexpr std::uint8_t kRunBehind = 1;
inline constexpr std::uint8_t kRunListed = 2;

struct Piece {
  std::size_t offset = 0;  // within its chunk
  std::size_t size = 0;
  ChunkId chunk = kNone;
  bool allocated = false;
  Piece* prev = nullptr;  // neighbours within the chunk, by offset
  Piece* next = nullptr;
};

// One place a chunk is mapped: which segment, at which of its chunk slots.
struct Mapping {
  SegmentId segment = kNone;
  std::uint32_t index = 0;
  bool operator==(const Mapping&) const = default;
};

struct Chunk {
  ChunkHandle handle = 0;
  std::size_t size = 0;
  SegmentId owner = kNone;
  std::size_t owner_offset = 0;  // the chunk's offset inside its owner segment
  std::uint32_t live = 0;        // allocated pieces
  Piece* pieces = nullptr;       // head of the piece list while owned
  std::vector<Mapping> mapped_in;
  std::uint32_t pins = 0;  // worker jobs mapping it without the lock: not to be released
  bool in_use = false;     // slot holds a chunk
  bool reserve = false;    // created by the worker ahead of demand, not yet taken
  // kRunBehind: claimed or freed since the segments mapping it caught up
  // (busy counts, idle index, free runs); kRunListed: in the lake's list of
  // such chunks.
  std::uint8_t run_lag = 0;
  // The last fence under which a block in it was freed (Lake::free): work
  // queued before that fence may still use it, so a stream given it waits.
  FenceId fence;
};

struct Segment {
  DevicePtr va = 0;
  std::size_t size = 0;         // mapped bytes, from va
  std::size_t va_size = 0;      // reserved bytes: room to extend in place
  std::vector<ChunkId> chunks;  // in address order
  std::vector<std::size_t> offsets;
  // Runs of consecutive free chunks: first slot -> number of slots. Each is
  // also in the lake's free-run index, so free space inside mapped ranges is
  // reused in place, without mapping anything.
  SlotRuns runs;
  std::uint32_t busy = 0;   // chunks with an owner (this or another segment)
  std::uint32_t owned = 0;  // chunks owned by this segment
  // Live allocations reached through this segment that start or end in a
  // chunk another segment owns (Lake::try_borrowed_ends): they pin it like
  // owned chunks do.
  std::uint32_t borrowed = 0;
  bool stitched = false;
  bool prepared = false;  // stitched by the worker and not yet used
  bool reserve = false;   // the worker's reserve: used only where new memory would be made
  bool sealed = false;    // its room past the end is not clean: never extend it
  // Its free runs are in the run index. A consolidated range that maps every
  // chunk of an idle segment supersedes that segment's runs: it keeps
  // serving whole (idle, exact fit) without its runs being kept up to date.
  bool indexed = true;
  bool in_use = false;  // slot holds a mapped segment
  std::uint64_t last_used = 0;
  // A block freed into it by a fence (StreamScheduler::fence_all) may still
  // be in use by queued GPU work until that fence completes: no unmapping
  // before then.
  FenceId fence;
  // Not evictable: it owns a chunk or an allocation borrows through it.
  bool pinned() const { return owned != 0 || borrowed != 0; }
};

struct Allocation {
  SegmentId segment = kNone;      // the owner segment of its chunk(s)
  std::uint32_t first_chunk = 0;  // index into the segment's chunks
  std::uint32_t chunk_count = 1;
  Piece* piece = nullptr;     // the piece, when chunk_count == 1
  std::size_t size = 0;       // rounded to kAlignment
  std::size_t requested = 0;  // as asked
};

}  // namespace memlake::lake
