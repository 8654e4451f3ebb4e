// GMLake's allocation policy as a simulation (see gmlake_policy.hpp). The
// names of the steps follow GMLake's DeviceCachingAllocator: get_free_block,
// get_fused_fragmented_blocks (stitch), realloc_block (new_segment),
// release_cached_blocks, update_block/free_block (free), and
// garbage_collect_fused_blocks (collect_fused).
#include "replay/gmlake_policy.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "memlake/errors.hpp"

namespace memlake {

namespace {

constexpr std::uint64_t kMinBlockSize = 512;
constexpr std::uint64_t kSmallSize = std::uint64_t{1} << 20;
constexpr std::uint64_t kSmallBuffer = std::uint64_t{2} << 20;
constexpr std::uint64_t kLargeBuffer = std::uint64_t{20} << 20;
constexpr std::uint64_t kMinLargeAlloc = std::uint64_t{10} << 20;

constexpr std::uint64_t round_up(std::uint64_t n, std::uint64_t step) {
  return (n + step - 1) / step * step;
}

}  // namespace

GmlakePolicy::GmlakePolicy(const GmlakeOptions& options) : options_(options) {}

std::uint64_t GmlakePolicy::round_size(std::uint64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  std::uint64_t r = round_up(bytes, kMinBlockSize);
  // GMLake's change to round_size: everything of the large pool is a whole
  // number of 2 MiB chunks.
  if (r > kSmallSize) r = round_up(bytes, kGranularity);
  return r;
}

std::uint64_t GmlakePolicy::allocation_size(std::uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kGranularity);
}

std::uint32_t GmlakePolicy::new_block() {
  std::uint32_t b;
  if (!free_block_ids_.empty()) {
    b = free_block_ids_.back();
    free_block_ids_.pop_back();
    blocks_[b] = Block{};
  } else {
    b = static_cast<std::uint32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  return b;
}

void GmlakePolicy::drop_block(std::uint32_t b) {
  blocks_[b] = Block{};
  blocks_[b].state = State::dead;
  free_block_ids_.push_back(b);
}

std::uint64_t GmlakePolicy::new_va(std::uint64_t size) {
  std::uint64_t va = next_va_;
  next_va_ += round_up(size, kGranularity) + kGranularity;
  return va;
}

void GmlakePolicy::set_owner(std::uint32_t b) {
  const Block& p = blocks_[b];
  for (std::uint32_t i = 0, n = piece_chunks(p); i < n; ++i) chunks_[chunk_id(p, i)].owner = b;
}

// A chunk turns in use: every free sBlock mapping it can no longer be reused.
void GmlakePolicy::chunk_used(std::uint32_t c, std::uint32_t except) {
  chunks_[c].free = false;
  for (std::uint32_t s : chunks_[c].sblocks) {
    if (s == except) continue;
    Block& sb = blocks_[s];
    if (sb.state == State::pooled) {
      fused_pool_.erase(key(s));
      sb.state = State::fragmented;
    }
    --sb.free_chunks;
  }
}

// A chunk turns free: a fragmented sBlock whose chunks are now all free is
// reusable again.
void GmlakePolicy::chunk_freed(std::uint32_t c, std::uint32_t except) {
  chunks_[c].free = true;
  for (std::uint32_t s : chunks_[c].sblocks) {
    if (s == except) continue;
    Block& sb = blocks_[s];
    ++sb.free_chunks;
    if (sb.state == State::fragmented && sb.free_chunks == sb.chunks.size()) {
      sb.state = State::pooled;
      fused_pool_.insert(key(s));
    }
  }
}

// Splits `size` bytes off the front of block b into a new block, which is
// returned; b keeps the rest. Neither is put in or taken from a pool.
std::uint32_t GmlakePolicy::split_front(std::uint32_t b, std::uint64_t size) {
  std::uint32_t f = new_block();
  Block& blk = blocks_[b];
  Block& front = blocks_[f];
  front.kind = blk.kind;
  front.state = blk.state;
  front.stream = blk.stream;
  front.segment = blk.segment;
  front.addr = blk.addr;
  front.size = size;
  front.first = blk.first;
  front.prev = blk.prev;
  front.next = b;
  if (blk.prev != kNone) blocks_[blk.prev].next = f;
  blk.prev = f;
  blk.addr += size;
  blk.size -= size;
  if (blk.kind == Kind::piece) {
    blk.first += static_cast<std::uint32_t>(size / kGranularity);
    set_owner(f);
  }
  return f;
}

// free_block: back into the pool, merged with free neighbours (the larger
// of two merged pieces keeps its identity so that chunk owners change for
// the smaller one only).
void GmlakePolicy::free_piece(std::uint32_t b) {
  blocks_[b].state = State::pooled;
  Pool& pool = pool_of(blocks_[b]);
  for (int side = 0; side < 2; ++side) {
    std::uint32_t nb = side == 0 ? blocks_[b].prev : blocks_[b].next;
    if (nb == kNone || blocks_[nb].state != State::pooled) continue;
    pool.erase(key(nb));
    std::uint32_t lo = side == 0 ? nb : b;
    std::uint32_t hi = side == 0 ? b : nb;
    std::uint32_t keep = blocks_[b].size >= blocks_[nb].size ? b : nb;
    std::uint32_t gone = keep == b ? nb : b;
    const std::uint64_t lo_size = blocks_[lo].size;
    const std::uint64_t hi_size = blocks_[hi].size;
    Block merged = blocks_[lo];
    merged.size = lo_size + hi_size;
    merged.free_chunks = blocks_[lo].free_chunks + blocks_[hi].free_chunks;
    merged.next = blocks_[hi].next;
    blocks_[keep] = merged;
    if (merged.prev != kNone) blocks_[merged.prev].next = keep;
    if (merged.next != kNone) blocks_[merged.next].prev = keep;
    if (merged.kind == Kind::piece) {
      const std::uint64_t from = gone == lo ? 0 : lo_size / kGranularity;
      const std::uint64_t count = (gone == lo ? lo_size : hi_size) / kGranularity;
      for (std::uint64_t i = 0; i < count; ++i) {
        chunks_[chunk_id(merged, static_cast<std::uint32_t>(from + i))].owner = keep;
      }
    }
    drop_block(gone);
    b = keep;
  }
  pool.insert(key(b));
}

bool GmlakePolicy::get_free_block(Request& r) {
  Pool& pool = r.small ? small_pool_ : large_pool_;
  auto it = pool.lower_bound(Key{r.stream, r.size, 0, 0});
  if (it == pool.end() || it->stream != r.stream) {
    if (!options_.defragment || r.small) return false;
    auto fit = fused_pool_.lower_bound(Key{r.stream, r.size, 0, 0});
    if (fit == fused_pool_.end() || fit->stream != r.stream ||
        static_cast<double>(fit->size) > static_cast<double>(r.size) * options_.reuse_limit) {
      return false;
    }
    return take_sblock(r, fit->block);
  }
  r.block = it->block;
  pool.erase(it);
  blocks_[r.block].state = State::allocated;
  ++(r.small ? counters_.path_small_cached : counters_.path_block);
  return true;
}

// Reuse of a free sBlock: its first size/2MiB chunks serve the request; the
// pBlock pieces holding them leave the free pool, split at chunk boundaries
// where only part of a piece is used.
bool GmlakePolicy::take_sblock(Request& r, std::uint32_t s) {
  fused_pool_.erase(key(s));
  const std::uint32_t keep = static_cast<std::uint32_t>(r.size / kGranularity);
  std::vector<std::uint32_t> to_split;
  for (std::uint32_t i = 0; i < keep; ++i) {
    std::uint32_t c = blocks_[s].chunks[i];
    chunk_used(c, s);
    std::uint32_t p = chunks_[c].owner;
    Block& piece = blocks_[p];
    if (piece.state == State::pooled) {
      large_pool_.erase(key(p));
      piece.state = State::covered;
      to_split.push_back(p);
    }
    --piece.free_chunks;
  }
  for (std::uint32_t p : to_split) {
    if (blocks_[p].free_chunks == 0) continue;  // wholly used: stays covered
    // Cut p into runs of chunks that are all free or all used.
    std::uint32_t cur = p;
    for (;;) {
      const Block& piece = blocks_[cur];
      const std::uint32_t n = piece_chunks(piece);
      const bool first_free = chunks_[chunk_id(piece, 0)].free;
      std::uint32_t run = 1;
      while (run < n && chunks_[chunk_id(piece, run)].free == first_free) ++run;
      std::uint32_t head = cur;
      if (run < n) {
        head = split_front(cur, std::uint64_t{run} * kGranularity);
      }
      Block& h = blocks_[head];
      h.state = first_free ? State::pooled : State::covered;
      h.free_chunks = first_free ? run : 0;
      if (first_free) large_pool_.insert(key(head));
      if (run == n) break;
    }
  }
  Block& sb = blocks_[s];
  sb.used_chunks = keep;
  sb.free_chunks = static_cast<std::uint32_t>(sb.chunks.size()) - keep;
  sb.state = State::allocated;
  r.block = s;
  ++counters_.path_sblock;
  return true;
}

// get_fused_fragmented_blocks: stitch the stream's free pBlocks, largest
// first, into a new sBlock of exactly the request's size.
bool GmlakePolicy::stitch(Request& r, int time) {
  if (!options_.defragment || time < options_.defrag_level) return false;
  if (r.small || r.size < options_.frag_limit) return false;
  auto lo = large_pool_.lower_bound(Key{r.stream, 0, 0, 0});
  auto hi = large_pool_.lower_bound(Key{r.stream, UINT64_MAX, 0, 0});
  if (lo == hi || std::next(lo) == hi) return false;  // GMLake needs two blocks at least
  std::vector<std::uint32_t> picked;
  std::uint64_t fuse = 0;
  for (auto it = hi; it != lo && fuse < r.size;) {
    --it;
    picked.push_back(it->block);
    fuse += it->size;
  }
  if (fuse < r.size) return false;
  for (std::uint32_t p : picked) {
    large_pool_.erase(key(p));
    blocks_[p].state = State::covered;
    blocks_[p].free_chunks = 0;
  }
  if (fuse - r.size >= kGranularity) {
    // The smallest piece taken gives only what is needed; its tail stays free.
    std::uint32_t last = picked.back();
    std::uint32_t front = split_front(last, blocks_[last].size - (fuse - r.size));
    Block& rest = blocks_[last];
    rest.state = State::pooled;
    rest.free_chunks = piece_chunks(rest);
    large_pool_.insert(key(last));
    picked.back() = front;
    fuse = r.size;
  }
  std::vector<std::uint32_t> glued;
  glued.reserve(fuse / kGranularity);
  for (std::uint32_t p : picked) {
    const Block& piece = blocks_[p];
    for (std::uint32_t i = 0, n = piece_chunks(piece); i < n; ++i) {
      glued.push_back(chunk_id(piece, i));
    }
  }
  for (std::uint32_t c : glued) chunk_used(c, kNone);
  std::uint32_t s = new_block();
  Block& sb = blocks_[s];
  sb.kind = Kind::fused;
  sb.state = State::allocated;
  sb.stream = r.stream;
  sb.size = fuse;
  sb.addr = new_va(fuse);
  sb.used_chunks = static_cast<std::uint32_t>(glued.size());
  sb.free_chunks = 0;
  for (std::uint32_t c : glued) chunks_[c].sblocks.push_back(s);
  counters_.address_reserve += 1;
  counters_.mem_map += glued.size();
  counters_.set_access += glued.size();  // GMLake sets access per 2 MiB chunk
  counters_.stitched_chunks += glued.size();
  ++counters_.path_stitch;
  sb.chunks = std::move(glued);
  r.block = s;
  total_fuse_size_ += fuse;
  if (total_fuse_size_ > options_.auto_gc_bytes) collect_fused(true);
  return true;
}

// realloc_block: a new segment of the pool's allocation size.
bool GmlakePolicy::new_segment(Request& r) {
  const std::uint64_t size = r.alloc_size;
  if (options_.capacity && reserved_ + size > options_.capacity) return false;
  Segment seg;
  seg.small = r.small;
  seg.stream = r.stream;
  seg.size = size;
  seg.addr = new_va(size);
  seg.base_chunk = static_cast<std::uint32_t>(chunks_.size());
  const std::uint32_t seg_id = static_cast<std::uint32_t>(segments_.size());
  segments_.push_back(seg);
  reserved_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  std::uint32_t b = new_block();
  Block& blk = blocks_[b];
  blk.kind = r.small ? Kind::small : Kind::piece;
  blk.state = State::allocated;
  blk.stream = r.stream;
  blk.size = size;
  blk.addr = seg.addr;
  blk.segment = seg_id;
  if (r.small) {
    ++counters_.cuda_malloc;
  } else {
    const std::uint64_t n = size / kGranularity;
    for (std::uint64_t i = 0; i < n; ++i) chunks_.push_back(Chunk{b, true, false, {}});
    blk.free_chunks = static_cast<std::uint32_t>(n);
    if (options_.defragment) {
      counters_.mem_create += n;
      counters_.address_reserve += 1;
      counters_.mem_map += n;
      counters_.set_access += n;
    } else {
      ++counters_.cuda_malloc;
    }
  }
  r.block = b;
  return true;
}

void GmlakePolicy::delete_sblock(std::uint32_t s) {
  Block& sb = blocks_[s];
  if (sb.state == State::pooled) fused_pool_.erase(key(s));
  for (std::uint32_t c : sb.chunks) {
    if (chunks_[c].released) continue;
    auto& v = chunks_[c].sblocks;
    v.erase(std::remove(v.begin(), v.end(), s), v.end());
  }
  counters_.mem_unmap += 1;
  counters_.address_free += 1;
  ++counters_.sblocks_collected;
  drop_block(s);
}

// garbage_collect_fused_blocks(2, 0): unmap every sBlock not in use.
void GmlakePolicy::collect_fused(bool include_free) {
  for (std::uint32_t s = 0; s < blocks_.size(); ++s) {
    const Block& sb = blocks_[s];
    if (sb.kind != Kind::fused) continue;
    if (sb.state == State::fragmented || (include_free && sb.state == State::pooled)) {
      total_fuse_size_ -= std::min(total_fuse_size_, sb.size);
      delete_sblock(s);
    }
  }
}

void GmlakePolicy::release_segment_block(std::uint32_t b) {
  Block& blk = blocks_[b];
  pool_of(blk).erase(key(b));
  Segment& seg = segments_[blk.segment];
  if (blk.kind == Kind::piece) {
    for (std::uint32_t i = 0, n = piece_chunks(blk); i < n; ++i) {
      Chunk& ch = chunks_[chunk_id(blocks_[b], i)];
      std::vector<std::uint32_t> users = ch.sblocks;
      for (std::uint32_t s : users) {
        if (blocks_[s].state == State::allocated) {
          blocks_[s].gc_on_free = true;  // GMLake's active_fused_blocks_to_gc
        } else {
          delete_sblock(s);
        }
      }
      ch.sblocks.clear();
      ch.released = true;
      ch.owner = kNone;
    }
    if (options_.defragment) {
      counters_.mem_unmap += 1;
      counters_.address_free += 1;
      counters_.mem_release += seg.size / kGranularity;
    } else {
      ++counters_.cuda_free;
    }
  } else {
    ++counters_.cuda_free;
  }
  seg.released = true;
  reserved_ -= seg.size;
  ++counters_.segments_released;
  drop_block(b);
}

// release_cached_blocks: every free block that is a whole segment goes back.
bool GmlakePolicy::release_cached() {
  std::vector<std::uint32_t> whole;
  for (const Pool* pool : {&large_pool_, &small_pool_}) {
    for (const Key& k : *pool) {
      if (blocks_[k.block].prev == kNone && blocks_[k.block].next == kNone) {
        whole.push_back(k.block);
      }
    }
  }
  for (std::uint32_t b : whole) release_segment_block(b);
  return true;
}

void GmlakePolicy::finish_allocation(Request& r) {
  std::uint32_t b = r.block;
  if (blocks_[b].kind == Kind::fused) return;
  if (blocks_[b].kind == Kind::small) {
    if (blocks_[b].size - r.size >= kMinBlockSize) {
      std::uint32_t f = split_front(b, r.size);
      blocks_[b].state = State::pooled;
      small_pool_.insert(key(b));
      r.block = f;
    }
    blocks_[r.block].state = State::allocated;
    return;
  }
  if (blocks_[b].size - r.size >= kGranularity) {
    std::uint32_t f = split_front(b, r.size);
    Block& rest = blocks_[b];
    rest.state = State::pooled;
    rest.free_chunks = piece_chunks(rest);
    large_pool_.insert(key(b));
    b = f;
  }
  Block& blk = blocks_[b];
  blk.state = State::allocated;
  blk.free_chunks = 0;
  for (std::uint32_t i = 0, n = piece_chunks(blk); i < n; ++i) chunk_used(chunk_id(blk, i), kNone);
  r.block = b;
}

bool GmlakePolicy::allocate(std::uint64_t id, std::uint64_t bytes, std::uint64_t stream) {
  if (live_.count(id)) {
    throw misuse("gmlake policy: alloc of id " + std::to_string(id) + ", which is live");
  }
  Request r;
  r.stream = stream;
  r.size = round_size(bytes);
  r.small = r.size <= kSmallSize;
  r.alloc_size = allocation_size(r.size);
  // The order of GMLake's malloc().
  bool found = get_free_block(r) || stitch(r, 0);
  if (!found) {
    if (new_segment(r)) {
      found = true;
      ++(r.small ? counters_.path_small_new : counters_.path_new);
    } else if (stitch(r, 1)) {
      found = true;
    } else if (release_cached() && new_segment(r)) {
      found = true;
      ++counters_.path_after_release;
    } else {
      found = stitch(r, 2);
    }
  }
  if (!found) {
    ++counters_.ooms;
    return false;
  }
  finish_allocation(r);
  live_.emplace(id, Live{r.block, bytes});
  ++counters_.allocs;
  live_requested_ += bytes;
  peak_requested_ = std::max(peak_requested_, live_requested_);
  return true;
}

void GmlakePolicy::free(std::uint64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) {
    throw misuse("gmlake policy: free of id " + std::to_string(id) + ", which is not live");
  }
  const std::uint32_t b = it->second.block;
  live_requested_ -= it->second.bytes;
  live_.erase(it);
  ++counters_.frees;
  Block& blk = blocks_[b];
  if (blk.kind == Kind::small) {
    free_piece(b);
    return;
  }
  if (blk.kind == Kind::piece) {
    const std::uint32_t n = piece_chunks(blk);
    for (std::uint32_t i = 0; i < n; ++i) chunk_freed(chunk_id(blocks_[b], i), kNone);
    blocks_[b].free_chunks = n;
    free_piece(b);
    return;
  }
  // update_block for an sBlock: its used chunks turn free; pieces whose
  // chunks are now all free return to the pool.
  std::vector<std::uint32_t> to_free;
  for (std::uint32_t i = 0; i < blocks_[b].used_chunks; ++i) {
    std::uint32_t c = blocks_[b].chunks[i];
    chunk_freed(c, b);
    ++blocks_[b].free_chunks;
    std::uint32_t p = chunks_[c].owner;
    Block& piece = blocks_[p];
    if (++piece.free_chunks == piece_chunks(piece)) to_free.push_back(p);
  }
  Block& sb = blocks_[b];
  sb.used_chunks = 0;
  if (sb.gc_on_free) {
    sb.state = State::fragmented;
    delete_sblock(b);
  } else if (sb.free_chunks == sb.chunks.size()) {
    sb.state = State::pooled;
    fused_pool_.insert(key(b));
  } else {
    sb.state = State::fragmented;
  }
  for (std::uint32_t p : to_free) free_piece(p);
}

namespace {

std::string invariant_broken(const std::string& what, std::uint64_t x) {
  return what + " (" + std::to_string(x) + ")";
}

}  // namespace

struct GmlakePolicy::Tally {
  explicit Tally(const GmlakePolicy& g)
      : tiled(g.segments_.size(), 0), users(g.chunks_.size(), 0) {}
  std::vector<std::uint64_t> tiled;  // bytes of blocks per segment
  std::vector<int> users;            // callers per chunk
  std::size_t pooled_small = 0, pooled_large = 0, pooled_fused = 0;
};

std::string GmlakePolicy::check_piece(std::uint32_t b, Tally& tally) const {
  const Block& blk = blocks_[b];
  const bool pooled = blk.state == State::pooled;
  tally.tiled[blk.segment] += blk.size;
  if (pooled) {
    const Pool& pool = blk.kind == Kind::small ? small_pool_ : large_pool_;
    if (!pool.count(key(b))) return invariant_broken("pooled block missing from its pool", b);
    blk.kind == Kind::small ? ++tally.pooled_small : ++tally.pooled_large;
    for (std::uint32_t nb : {blk.prev, blk.next}) {
      if (nb != kNone && blocks_[nb].state == State::pooled) {
        return invariant_broken("two adjacent free blocks were not merged", b);
      }
    }
  }
  if (blk.prev != kNone && blocks_[blk.prev].next != b)
    return invariant_broken("broken prev link", b);
  if (blk.next != kNone && blocks_[blk.next].prev != b)
    return invariant_broken("broken next link", b);
  if (blk.kind == Kind::small) return {};
  const std::uint32_t n = piece_chunks(blk);
  if (blk.free_chunks != (pooled ? n : 0)) return invariant_broken("piece free chunk count", b);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t c = chunk_id(blk, i);
    if (chunks_[c].owner != b) return invariant_broken("chunk owner is not its piece", c);
    if (chunks_[c].free != pooled)
      return invariant_broken("chunk state differs from its piece's", c);
    if (blk.state == State::allocated) ++tally.users[c];
  }
  if (blk.state != State::pooled && blk.state != State::allocated && blk.state != State::covered) {
    return invariant_broken("piece in an sBlock state", b);
  }
  return {};
}

std::string GmlakePolicy::check_sblock(std::uint32_t b, Tally& tally) const {
  const Block& blk = blocks_[b];
  const bool pooled = blk.state == State::pooled;
  if (pooled) {
    if (!fused_pool_.count(key(b))) return invariant_broken("free sBlock missing from the pool", b);
    ++tally.pooled_fused;
  }
  std::uint32_t free_chunks = 0;
  for (std::uint32_t i = 0; i < blk.chunks.size(); ++i) {
    const Chunk& ch = chunks_[blk.chunks[i]];
    if (ch.released) {
      if (!blk.gc_on_free) return invariant_broken("sBlock maps a released chunk", b);
      continue;
    }
    if (std::find(ch.sblocks.begin(), ch.sblocks.end(), b) == ch.sblocks.end()) {
      return invariant_broken("chunk does not list its sBlock", b);
    }
    if (ch.free) ++free_chunks;
    if (blk.state == State::allocated && i < blk.used_chunks) ++tally.users[blk.chunks[i]];
  }
  if (!blk.gc_on_free && free_chunks != blk.free_chunks)
    return invariant_broken("sBlock free count", b);
  if (pooled && free_chunks != blk.chunks.size())
    return invariant_broken("free sBlock not all free", b);
  if (blk.state == State::fragmented && free_chunks == blk.chunks.size()) {
    return invariant_broken("fragmented sBlock is all free", b);
  }
  return {};
}

std::string GmlakePolicy::check_tally(const Tally& tally) const {
  if (tally.pooled_small != small_pool_.size() || tally.pooled_large != large_pool_.size() ||
      tally.pooled_fused != fused_pool_.size()) {
    return "a pool holds a block that is not free";
  }
  for (std::uint32_t s = 0; s < segments_.size(); ++s) {
    if (!segments_[s].released && tally.tiled[s] != segments_[s].size) {
      return invariant_broken("blocks do not tile their segment", s);
    }
  }
  for (std::uint32_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c].released) continue;
    if (tally.users[c] > 1) return invariant_broken("chunk serves two callers", c);
    if ((tally.users[c] == 0) != chunks_[c].free)
      return invariant_broken("chunk use differs from its flag", c);
    for (std::uint32_t s : chunks_[c].sblocks) {
      if (blocks_[s].kind != Kind::fused || blocks_[s].state == State::dead) {
        return invariant_broken("chunk lists a dead sBlock", c);
      }
    }
  }
  return {};
}

std::string GmlakePolicy::check_invariants() const {
  std::uint64_t reserved = 0;
  for (const Segment& s : segments_) {
    if (!s.released) reserved += s.size;
  }
  if (reserved != reserved_)
    return invariant_broken("reserved bytes differ from the live segments", reserved);
  Tally tally(*this);
  for (std::uint32_t b = 0; b < blocks_.size(); ++b) {
    if (blocks_[b].state == State::dead) continue;
    const std::string broken =
        blocks_[b].kind == Kind::fused ? check_sblock(b, tally) : check_piece(b, tally);
    if (!broken.empty()) return broken;
  }
  if (std::string broken = check_tally(tally); !broken.empty()) return broken;
  for (const auto& [id, live] : live_) {
    if (blocks_[live.block].state != State::allocated)
      return invariant_broken("live id not allocated", id);
  }
  return {};
}

}  // namespace memlake
