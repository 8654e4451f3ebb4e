// Consolidation, the mapping worker's job on the lake: when free memory is
// scattered over many segments (no free run holds what it adds up to), map
// the free chunks into one new range, so the next large request finds a free
// run and maps nothing on the allocating thread. Chunks may be mapped at
// several addresses, so this takes no memory from anyone: the chunks stay
// free until a request claims them through whichever segment it finds.
#include <cassert>

#include "lake/lake.hpp"

namespace memlake::lake {

namespace {
constexpr std::size_t kMinChunks = 8;  // below this a stitch on demand is cheap enough
}

bool Lake::wants_consolidation() const {
  if (free_chunk_bytes_ < kMinChunks * options_.granularity) return false;
  const std::size_t largest = free_runs_.empty() ? 0 : free_runs_.rbegin()->bytes;
  return stitch_demand_ && largest * 2 < free_chunk_bytes_;
}

bool Lake::plan_consolidation(StitchPlan* plan) {
  if (!wants_consolidation()) return false;
  stitch_demand_ = false;
  plan->ids.clear();
  plan->handles.clear();
  for (auto it = free_chunks_.rbegin();
       it != free_chunks_.rend() && plan->ids.size() < options_.max_stitch_chunks; ++it) {
    Chunk& c = chunks_[it->second];
    ++c.pins;
    plan->ids.push_back(it->second);
    plan->handles.emplace_back(c.handle, c.size);
  }
  if (plan->ids.size() >= 2) return true;
  for (ChunkId c : plan->ids) --chunks_[c].pins;
  plan->ids.clear();
  return false;
}

void Lake::execute(StitchPlan& plan) const {
  plan.status = map_range(plan.handles, &plan.range);
}

void Lake::commit(StitchPlan& plan) {
  for (ChunkId c : plan.ids) {
    assert(chunks_[c].pins > 0);
    --chunks_[c].pins;
  }
  for (Zombie& z : plan.range.leftover) zombies_.push_back(std::move(z));
  if (plan.status != Status::ok) {
    ++stats_.worker_failures.current;
    return;
  }
  SegmentId s = register_segment(std::move(plan.ids), std::move(plan.range), /*stitched=*/true);
  ++stats_.worker_stitches.current;
  enforce_cache_budget(s);
}

}  // namespace memlake::lake
