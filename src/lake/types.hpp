// The lake's core types. Glossary:
//
//  chunk       One physical handle from the backend (a multiple of the
//              granularity), kept by the ChunkPool. The unit of stitching:
//              mapped whole, never split. Free, or taken by a client (the
//              lake) that placed memory in it.
//  segment     A reserved virtual range with chunks mapped back to back
//              (SegmentTable). The first segment over new chunks is a
//              pBlock; one built over chunks that existed already is a
//              stitched sBlock. A chunk may be mapped in several segments.
//  owner       The one segment through whose addresses a taken chunk's live
//              allocations are reached.
//  piece       A byte range inside an owned chunk, allocated or free. Free
//              pieces are the *fragments* that small requests and the tails
//              of large blocks share (512-byte granular).
//  allocation  What the caller holds: one piece, or pieces of several
//              consecutive chunks of one segment: the first may start inside
//              its chunk (a *continuation* of the tail of the block before
//              it, or past a free *head* left for the slack of its last
//              granule, Lake::lead_for); the others start at their chunk's
//              offset 0. The first and the last chunk may be owned by another
//              segment (*borrowed ends*: the allocation's segment was mapped
//              over a chunk with a free tail, chunks for the middle and a
//              chunk with a free head).
//  rung        One way of serving a request (memlake::Rung); the ladder
//              (ladder.cpp) tries them cheapest first.
//
// Chunk identity (checked by Lake::check_invariants): every chunk is free
// (no owner, no piece) or taken and owned by exactly one segment that maps
// it and holds >= 1 live piece in it; sum(chunk sizes) == reserved bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "backend/backend.hpp"

namespace memlake::lake {

using ChunkId = std::uint32_t;
using SegmentId = std::uint32_t;
inline constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
inline constexpr std::size_t kAlignment = 512;  // every allocation and piece

inline std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

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

// What the allocator above the lake keeps about a live block. It lives in
// the lake's entry of the block, so that one map lookup serves both on every
// allocate and free; the lake itself never reads it.
struct CallerNote {
  std::size_t requested = 0;  // the bytes asked for
  void* stream = nullptr;     // the stream it was allocated on
};

// A live block. 48 bytes, so that its hash map entry is one cache line.
struct Allocation {
  SegmentId segment = kNone;      // the owner segment of its chunk(s)
  std::uint32_t first_chunk = 0;  // index into the segment's chunks
  std::uint32_t chunk_count = 1;
  bool grows = false;      // grew a block freed lately (Lake::grows_a_freed_block)
  bool borrows = false;    // its first or last chunk is another range's (Lake::borrows)
  Piece* piece = nullptr;  // its first piece
  std::size_t size = 0;    // rounded to kAlignment
  CallerNote caller;
};
static_assert(sizeof(Allocation) <= 48);

}  // namespace memlake::lake
