// The invariants of every part of the lake, checked from scratch (tests,
// MEMLAKE_DEBUG=3 builds): each check rebuilds what a part keeps
// incrementally and compares.
#include <algorithm>
#include <sstream>

#include "lake/lake.hpp"

namespace memlake::lake {

std::string SegmentTable::check_invariants() const {
  std::ostringstream err;
  std::size_t idle = 0, total_runs = 0, mapped = 0;
  for (SegmentId s = 0; s < segments_.size(); ++s) {
    const Segment& seg = segments_[s];
    if (!seg.in_use) continue;
    mapped += seg.size;
    std::uint32_t busy = 0;
    SlotRuns runs;
    for (std::uint32_t i = 0; i < seg.chunks.size(); ++i) {
      const ChunkId c = seg.chunks[i];
      const auto& in = mapped_in_[c];
      if (std::find(in.begin(), in.end(), Mapping{s, i}) == in.end())
        err << "segment " << s << " slot " << i << " missing from its chunk's mappings; ";
      if (!states_[c].seen_offered(s)) {  // as of the last catch-up
        ++busy;
        continue;
      }
      if (!runs.empty() && std::prev(runs.end())->first + std::prev(runs.end())->second == i)
        ++std::prev(runs.end())->second;
      else
        runs.emplace(i, 1);
    }
    if (busy != seg.busy) err << "segment " << s << " busy count is off; ";
    if (runs != seg.runs) err << "segment " << s << " free runs are off; ";
    for (auto [start, count] : runs)
      if (!free_runs_.count({run_bytes(seg, start, count), s, start}))
        err << "segment " << s << " run at " << start << " missing from the index; ";
    total_runs += runs.size();
    const bool is_idle = idle_by_size_.count({seg.size, s}) != 0;
    if (is_idle != (busy == 0)) err << "segment " << s << " idle index is off; ";
    if ((unpinned_by_age_.count({seg.last_used, s}) != 0) != !seg.pinned())
      err << "segment " << s << " LRU index is off; ";
    idle += is_idle;
  }
  for (ChunkId c = 0; c < states_.size(); ++c) {
    for (Mapping m : mapped_in_[c])
      if (m.segment >= segments_.size() || !segments_[m.segment].in_use ||
          segments_[m.segment].chunks[m.index] != c)
        err << "chunk " << c << " lists a mapping its segment does not have; ";
    const ChunkState& m = states_[c];
    const bool behind =
        pool_[c].in_use && (m.seen_free != pool_.is_free(c) || m.seen_home != m.home);
    if (behind && (!m.listed || std::find(lagging_chunks_.begin(), lagging_chunks_.end(), c) ==
                                    lagging_chunks_.end()))
      err << "chunk " << c << " is behind but not listed; ";
    if (!behind && m.seen_home != kNone &&
        (m.seen_home_slot >= segments_[m.seen_home].chunks.size() ||
         segments_[m.seen_home].chunks[m.seen_home_slot] != c))
      err << "chunk " << c << " has the wrong slot of its home; ";
    if (mapped_in_[c].empty() ? m.home != kNone : !maps_chunk(m.home, c))
      err << "chunk " << c << " has a home that does not map it; ";
  }
  if (mapped != mapped_bytes_) err << "mapped bytes disagree; ";
  if (idle != idle_by_size_.size()) err << "idle index holds stale entries; ";
  if (total_runs != free_runs_.size()) err << "free-run index holds stale entries; ";
  return err.str();
}

std::string Lake::check_invariants() const {
  std::ostringstream err;
  err << pool_.check_invariants() << table_.check_invariants();
  std::size_t fragment_bytes = 0, head_bytes = 0, tail_bytes = 0, beside_small = 0;
  std::vector<std::uint32_t> owned(table_.slots(), 0);
  // Live pieces of small blocks, by chunk.
  std::vector<std::uint32_t> small_blocks(pool_.slots(), 0);
  for (const auto& [ptr, a] : allocations_) {
    if (a.size > options_.small_max) continue;
    for (std::uint32_t i = 0; i < a.chunk_count; ++i)
      ++small_blocks[table_[a.segment].chunks[a.first_chunk + i]];
  }
  for (ChunkId id = 0; id < pool_.slots(); ++id) {
    if (!pool_[id].in_use) continue;
    const ChunkUse& u = use_[id];
    if (const Piece* p = spare_[id];
        p && (p->offset != 0 || p->size != pool_.size(id) || p->chunk != id || !p->allocated ||
              p->prev || p->next || p == u.pieces))
      err << "chunk " << id << " spare piece is not the whole chunk; ";
    // Free chunks, and chunks another client holds (graph pools lease
    // theirs from the allocator's pool), have nothing of this lake's.
    if (pool_.is_free(id) || pool_[id].holder != client_) {
      if (u.owner != kNone || u.live != 0 || u.pieces || fragments_.small_blocks_in(id) != 0)
        err << (pool_.is_free(id) ? "free" : "leased") << " chunk " << id << " is not clean; ";
      continue;
    }
    if (fragments_.small_blocks_in(id) != small_blocks[id])
      err << "chunk " << id << " small block count is off; ";
    if (u.owner == kNone) {
      err << "taken chunk " << id << " has no owner; ";
      continue;
    }
    if (u.live == 0) err << "owned chunk " << id << " has no live piece; ";
    if (!table_[u.owner].in_use || !table_.maps_chunk(u.owner, id))
      err << "chunk " << id << " owned by a segment that does not map it; ";
    else
      ++owned[u.owner];
    std::size_t expect = 0;
    std::uint32_t allocated = 0;
    const Piece* prev = nullptr;
    for (const Piece* p = u.pieces; p; prev = p, p = p->next) {
      if (p->offset != expect || p->prev != prev || p->chunk != id || p->size % kAlignment)
        err << "chunk " << id << " pieces do not tile it; ";
      if (!p->allocated) {
        if (prev && !prev->allocated) err << "chunk " << id << " has adjacent free pieces; ";
        if (!fragments_.contains(const_cast<Piece*>(p)))
          err << "free piece missing from the index; ";
        const bool by_small = small_blocks[id] != 0;
        if (fragments_.beside_small_contains(const_cast<Piece*>(p)) != by_small)
          err << "chunk " << id << " free piece is wrongly indexed beside small blocks; ";
        beside_small += by_small ? 1 : 0;
        fragment_bytes += p->size;
        if (!p->prev) head_bytes += p->size;
        if (!p->next) tail_bytes += p->size;
      } else {
        ++allocated;
      }
      expect += p->size;
    }
    if (expect != pool_.size(id))
      err << "chunk " << id << " pieces cover " << expect << " of " << pool_.size(id) << "; ";
    if (allocated != u.live) err << "chunk " << id << " live count is off; ";
  }
  std::vector<std::uint32_t> borrowed(table_.slots(), 0);
  for (const auto& [ptr, a] : allocations_) {
    if (a.borrows != borrows(a)) err << "allocation " << ptr << " borrowing is off; ";
    if (a.borrows) ++borrowed[a.segment];
    const Segment& seg = table_[a.segment];
    if (ptr != seg.va + seg.offsets[a.first_chunk] + a.piece->offset)
      err << "allocation " << ptr << " is not where its first piece is; ";
  }
  for (SegmentId s = 0; s < table_.slots(); ++s) {
    if (!table_[s].in_use) continue;
    if (owned[s] != table_[s].owned) err << "segment " << s << " owned count is off; ";
    if (borrowed[s] != table_[s].borrowed) err << "segment " << s << " borrowed count is off; ";
  }
  if (fragment_bytes != fragments_.bytes()) err << "fragment bytes disagree; ";
  if (head_bytes != fragments_.head_bytes() || tail_bytes != fragments_.tail_bytes())
    err << "free head and tail bytes disagree; ";
  std::size_t indexed = 0;
  for (const Piece* p : fragments_) indexed += p->size;
  if (indexed != fragment_bytes) err << "fragment index holds stale pieces; ";
  if (beside_small != fragments_.beside_small_count())
    err << "index of pieces beside small blocks holds stale pieces; ";
  return err.str();
}

}  // namespace memlake::lake
