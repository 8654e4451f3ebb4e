// One graph pool: its placements, blocks and release (see graph_pool.hpp).
#include "graph/graph_pool.hpp"

#include <algorithm>

namespace memlake::graph {

GraphPool::Placement::Placement(Backend& upstream, ExclusiveGroup& group, const void* pool,
                                const lake::LakeOptions& options, std::size_t capacity)
    : backend(upstream, group.share, pool),
      chunks(backend, capacity, stats, observers, refusal),
      lake(backend, chunks, options, stats, observers, refusal) {}

GraphPool::GraphPool(PoolId id, std::shared_ptr<ExclusiveGroup> group, Backend& backend,
                     const lake::LakeOptions& options, std::size_t capacity)
    : id_(id), group_(std::move(group)), backend_(backend), options_(options), capacity_(capacity) {
  // Nothing evicts or unmaps a pool's ranges, and no worker reserves ahead.
  options_.defer_eviction = true;
  options_.reserve = 0;
  // The pools of a group share chunks of one size, the granule: a pool's
  // blocks then take whatever chunks the others made, and the group costs
  // the largest pool's granules, not a mix of sizes the pools do not share.
  if (group_->id != 0) {
    options_.max_chunk = options_.granularity;
    options_.large_chunk = 0;
  }
}

GraphPool::~GraphPool() {
  for (auto& [stream, p] : placements_) p->backend.releasing();
  placements_.clear();
}

GraphPool::Placement& GraphPool::placement(StreamHandle stream) {
  auto it = placements_.find(stream);
  if (it == placements_.end())
    it = placements_
             .emplace(stream,
                      std::make_unique<Placement>(backend_, *group_, this, options_, capacity_))
             .first;
  return *it->second;
}

lake::Placed GraphPool::allocate(std::size_t bytes, StreamHandle stream) {
  Placement& p = placement(stream);
  const lake::Request r{rounded(bytes), p.history.push(bytes)};
  p.refusal.clear();
  lake::Placed placed = p.lake.place(r, lake::Budget::map);
  if (!placed) placed = p.lake.place(r, lake::Budget::create, /*from=*/lake::Budget::create);
  if (!placed) {
    refusal_ = p.refusal.any() ? p.refusal.text() : std::string("no chunk could be leased");
    return placed;
  }
  return counted(placed);
}

lake::Placed GraphPool::allocate_at(DevicePtr ptr, std::size_t bytes, StreamHandle stream) {
  auto it = placements_.find(stream);
  if (it == placements_.end()) return {};
  const lake::Placed placed = it->second->lake.place_at(ptr, rounded(bytes));
  return placed ? counted(placed) : placed;
}

std::size_t GraphPool::rounded(std::size_t bytes) {
  return lake::round_up(std::max<std::size_t>(bytes, 1), lake::kAlignment);
}

lake::Placed GraphPool::counted(const lake::Placed& placed) {
  live_bytes_ += placed.size;
  ++live_blocks_;
  ++allocations_;
  return placed;
}

void GraphPool::free(DevicePtr ptr, std::size_t size, StreamHandle owner, StreamHandle stream,
                     bool shared) {
  live_bytes_ -= size;
  --live_blocks_;
  if (stream != owner || shared) {
    retired_bytes_ += size;
    return;
  }
  placement(owner).lake.free(ptr);
}

bool GraphPool::shares_chunks_under(DevicePtr ptr, std::size_t size, StreamHandle owner) {
  return placement(owner).backend.shares_chunks_under(ptr, size);
}

Status GraphPool::keep(DevicePtr ptr, std::size_t size, StreamHandle owner, std::size_t* kept) {
  return placement(owner).backend.keep(ptr, size, kept);
}

std::size_t GraphPool::mapped_bytes() const {
  std::size_t n = 0;
  for (const auto& [stream, p] : placements_)
    n += static_cast<std::size_t>(p->stats.mapped_bytes.current);
  return n;
}

GraphPoolStats GraphPool::stats() const {
  GraphPoolStats s;
  s.group = group_->id;
  s.reserved_bytes = group_->share.bytes_of(this);
  s.kept_bytes = group_->share.kept_bytes_of(this);
  s.mapped_bytes = mapped_bytes();
  s.live_bytes = live_bytes_;
  s.live_blocks = live_blocks_;
  s.retired_bytes = retired_bytes_;
  s.allocations = allocations_;
  for (const auto& [stream, p] : placements_) s.unmaps += p->backend.early_unmaps();
  s.users = users;
  s.allocating = allocating > 0;
  s.released = released;
  return s;
}

std::string GraphPool::check_invariants() const {
  std::string err;
  std::size_t allocated = 0;
  for (const auto& [stream, p] : placements_) {
    err += p->chunks.check_invariants();
    err += p->lake.check_invariants();
    allocated += p->lake.allocated_bytes();
    if (p->backend.early_unmaps() != 0) err += "a graph pool range was unmapped before release; ";
  }
  if (allocated != live_bytes_ + retired_bytes_)
    err += "graph pool live and retired bytes disagree with its lakes; ";
  return err;
}

}  // namespace memlake::graph
