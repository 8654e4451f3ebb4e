// The worker's jobs: when each is wanted, what it plans, and how it is made
// part of the lake.
#include "worker/jobs.hpp"

#include <algorithm>
#include <cassert>

#include "common/timing.hpp"

namespace memlake::worker {

namespace {
constexpr std::size_t kMinChunks = 8;  // below this a stitch on demand is cheap enough
}  // namespace

Jobs::Jobs(lake::Lake& lake, Stats& stats, ObserverList& observers)
    : pool_(lake.pool()),
      table_(lake.segments()),
      demand_(lake.demand()),
      options_(lake.options()),
      stats_(stats),
      observers_(observers) {}

// Consolidate only after a request had to stitch on the allocating thread,
// and only when the largest free run is under half of the free chunks: on a
// GPU the worker's driver calls run beside the training thread's and slow
// them, and ranges built ahead of demand are mostly re-cut before use.
bool Jobs::wants_consolidation() {
  if (!demand_.stitched || pool_.free_bytes() < kMinChunks * options_.granularity) return false;
  table_.catch_up();
  return table_.free_runs().largest_bytes() * 2 < pool_.free_bytes();
}

// The run the largest request seen needs (as far as the free chunks go).
std::size_t Jobs::consolidation_bytes() const {
  return std::min(pool_.free_bytes(), std::max(demand_.largest, kMinChunks * options_.granularity));
}

bool Jobs::wants_reserve() const {
  const std::size_t g = options_.granularity;
  return options_.reserve != 0 && pool_.creating_bytes() == 0 &&
         pool_.reserve_bytes() + g <= options_.reserve &&
         pool_.reserved_bytes() + g <= pool_.capacity();
}

bool Jobs::wanted() {
  return wants_consolidation() || wants_reserve() || table_.over_budget();
}

// The largest free chunks, as many as the largest request seen needs: one
// run that serves it (mapping more costs driver time for runs that later
// requests cut up anyway).
void Jobs::plan_consolidation(StitchPlan* plan) {
  demand_.stitched = false;
  *plan = StitchPlan{};
  const std::size_t cap = consolidation_bytes();
  std::size_t planned = 0;
  const lake::FreeChunkSet& free = pool_.free_set();
  for (auto it = free.rbegin();
       it != free.rend() && plan->ids.size() < options_.max_stitch_chunks && planned < cap; ++it) {
    const lake::ChunkId c = it->second;
    if (pool_[c].reserve) continue;
    pool_.pin(c);
    planned += pool_.size(c);
    plan->ids.push_back(c);
    plan->handles.emplace_back(pool_[c].handle, pool_.size(c));
  }
}

void Jobs::plan_reserve(StitchPlan* plan) {
  *plan = StitchPlan{};
  const std::size_t g = options_.granularity;
  std::size_t deficit = (options_.reserve - pool_.reserve_bytes()) / g * g;
  deficit = std::min(deficit, (pool_.capacity() - pool_.reserved_bytes()) / g * g);
  plan->create_sizes = lake::chunk_sizes_for(deficit, options_);
  pool_.begin_creating(deficit);
}

bool Jobs::plan(Job* job) {
  job->stitch = false;
  job->evictions.clear();
  if (wants_consolidation()) {
    plan_consolidation(&job->plan);
    job->stitch = true;
  } else if (wants_reserve()) {
    plan_reserve(&job->plan);
    job->stitch = true;
  }
  table_.plan_evictions(&job->evictions, lake::kNone);
  job->eviction_bytes = 0;
  for (const lake::Zombie& z : job->evictions)
    for (const auto& [va, bytes] : z.mapped) job->eviction_bytes += bytes;
  return job->stitch || !job->evictions.empty();
}

void Jobs::execute(Job& job) const {
  job.start_ns = now_ns();
  Backend& backend = pool_.backend();
  if (job.stitch) {
    StitchPlan& plan = job.plan;
    for (std::size_t size : plan.create_sizes) {
      ChunkHandle h = 0;
      plan.status = backend.create_chunk(size, &h);
      if (plan.status != Status::ok) break;
      plan.handles.emplace_back(h, size);
    }
    if (plan.status == Status::ok) plan.status = table_.map_range(plan.handles, &plan.range);
    // A reserve that could not be mapped is given back at once; a handle the
    // backend will not release stays adopted (commit) so nothing leaks.
    if (plan.status != Status::ok && !plan.create_sizes.empty())
      std::erase_if(plan.handles, [&](const std::pair<ChunkHandle, std::size_t>& h) {
        return backend.release_chunk(h.first) == Status::ok;
      });
  }
  std::erase_if(job.evictions, [&](lake::Zombie& z) { return table_.retire(z, true); });
  job.end_ns = now_ns();
}

void Jobs::report(const Job& job, bool failed) const {
  if (MEMLAKE_LIKELY(observers_.empty())) return;
  if (job.eviction_bytes != 0)
    observers_.each([&](Observer& o) {
      o.on_worker_job(
          {WorkerJobKind::eviction, job.eviction_bytes, job.start_ns, job.end_ns, false});
    });
  if (!job.stitch) return;
  std::size_t bytes = 0;
  for (const auto& [handle, size] : job.plan.handles) bytes += size;
  const WorkerJobKind kind =
      job.plan.create_sizes.empty() ? WorkerJobKind::consolidation : WorkerJobKind::reserve;
  observers_.each([&](Observer& o) {
    o.on_worker_job({kind, bytes, job.start_ns, job.end_ns, failed});
  });
}

// Registers the range (or, if mapping failed, leaves the lake as it was),
// unpins the chunks, and keeps what could not be unmapped for a retry.
void Jobs::commit(Job& job) {
  for (lake::Zombie& z : job.evictions) table_.keep(std::move(z));
  job.evictions.clear();
  if (!job.stitch) {
    report(job, false);
    return;
  }
  StitchPlan& plan = job.plan;
  for (lake::ChunkId c : plan.ids) {
    assert(pool_[c].pins > 0);
    pool_.unpin(c);
  }
  for (lake::Zombie& z : plan.range.leftover) table_.keep(std::move(z));
  const bool reserve = !plan.create_sizes.empty();
  if (reserve) {
    pool_.end_creating();
    for (auto [handle, size] : plan.handles) {
      const lake::ChunkId id = pool_.adopt(handle, size);
      if (plan.status != Status::ok) continue;  // an unreleasable leftover: a plain free chunk
      pool_.mark_reserve(id);
      plan.ids.push_back(id);
    }
  }
  if (plan.status != Status::ok) {
    ++stats_.worker_failures.current;
    report(job, true);
    return;
  }
  report(job, false);
  const lake::SegmentId s = table_.register_segment(std::move(plan.ids), std::move(plan.range),
                                                    /*stitched=*/!reserve);
  if (reserve) {
    table_.add_reserve(s);
    return;
  }
  table_.add_consolidated(s);
  ++stats_.worker_stitches.current;
}

}  // namespace memlake::worker
