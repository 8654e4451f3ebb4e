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
  if (!stitch_demand_ || free_chunk_bytes_ < kMinChunks * options_.granularity) return false;
  const std::size_t largest = free_runs_.empty() ? 0 : free_runs_.rbegin()->bytes;
  return largest * 2 < free_chunk_bytes_;
}

bool Lake::wants_work() const {
  return wants_consolidation() || over_budget();
}

bool Lake::plan_job(WorkerJob* job) {
  job->stitch = false;
  job->evictions.clear();
  if (wants_consolidation()) {
    stitch_demand_ = false;
    StitchPlan& plan = job->plan;
    plan = StitchPlan{};
    for (auto it = free_chunks_.rbegin();
         it != free_chunks_.rend() && plan.ids.size() < options_.max_stitch_chunks; ++it) {
      Chunk& c = chunks_[it->second];
      ++c.pins;
      plan.ids.push_back(it->second);
      plan.handles.emplace_back(c.handle, c.size);
    }
    job->stitch = true;
  }
  plan_evictions(&job->evictions, kNone);
  return job->stitch || !job->evictions.empty();
}

void Lake::execute(WorkerJob& job) const {
  if (job.stitch) job.plan.status = map_range(job.plan.handles, &job.plan.range);
  std::erase_if(job.evictions, [&](Zombie& z) { return retire(z, true); });
}

void Lake::commit(WorkerJob& job) {
  for (Zombie& z : job.evictions) zombies_.push_back(std::move(z));
  job.evictions.clear();
  if (!job.stitch) return;
  StitchPlan& plan = job.plan;
  for (ChunkId c : plan.ids) {
    assert(chunks_[c].pins > 0);
    --chunks_[c].pins;
  }
  for (Zombie& z : plan.range.leftover) zombies_.push_back(std::move(z));
  if (plan.status != Status::ok) {
    ++stats_.worker_failures.current;
    return;
  }
  register_segment(std::move(plan.ids), std::move(plan.range), /*stitched=*/true);
  ++stats_.worker_stitches.current;
}

}  // namespace memlake::lake
