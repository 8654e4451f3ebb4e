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

Jobs::Jobs(lake::Lake& lake, Stats& stats, ObserverList& observers, std::size_t chunks_per_access)
    : chunks_per_access_(chunks_per_access),
      pool_(lake.pool()),
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

// Twice the larger requests that lately missed their places (as far as the
// free chunks go): room for the next such request and the one after it,
// while mapping all free memory would cost driver time for runs that later
// requests cut up anyway.
std::size_t Jobs::consolidation_bytes() const {
  const std::size_t floor = kMinChunks * options_.granularity;
  return std::min(pool_.free_bytes(), std::max(2 * demand_.recent, floor));
}

bool Jobs::wants_reserve() const {
  const std::size_t g = options_.granularity;
  return options_.reserve != 0 && pool_.creating_bytes() == 0 &&
         pool_.reserve_bytes() + g <= options_.reserve &&
         pool_.reserved_bytes() + g <= pool_.capacity();
}

bool Jobs::wanted() {
  consolidate_ = consolidate_ || wants_consolidation();
  return consolidate_ || wants_reserve() || table_.over_budget();
}

// Free chunks for consolidation_bytes(), laid out as one range that becomes
// their home.
void Jobs::plan_consolidation(StitchPlan* plan) {
  *plan = StitchPlan{};
  const std::size_t cap = consolidation_bytes();
  std::size_t planned = 0;
  std::vector<bool> chosen(pool_.slots());
  auto add = [&](lake::ChunkId c) {
    if (chosen[c] || pool_[c].reserve || !pool_.is_free(c) || planned >= cap ||
        plan->ids.size() >= options_.max_stitch_chunks)
      return;
    chosen[c] = true;
    planned += pool_.size(c);
    plan->ids.push_back(c);
    plan->handles.emplace_back(pool_[c].handle, pool_.size(c));
  };
  // The runs of other ranges first, largest first, each in its own order: a
  // request that takes part of such a run through its own range then takes
  // one stretch of the new range instead of chunks scattered over it.
  const lake::RunIndex& runs = table_.free_runs();
  for (auto it = runs.end(); it != runs.begin() && planned < cap;) {
    --it;
    const lake::Segment& seg = table_[it->segment];
    const std::uint32_t end = it->start + seg.runs.at(it->start);
    for (std::uint32_t j = it->start; j < end; ++j) add(seg.chunks[j]);
  }
  const lake::FreeChunkSet& free = pool_.free_set();
  for (auto it = free.rbegin(); it != free.rend() && planned < cap; ++it) add(it->second);
  // Only now, with nothing left that needs the heap, does the plan change
  // the lake.
  for (lake::ChunkId c : plan->ids) pool_.pin(c);
  demand_.stitched = false;
  consolidate_ = false;
}

void Jobs::plan_reserve(StitchPlan* plan) {
  *plan = StitchPlan{};
  const std::size_t g = options_.granularity;
  std::size_t deficit = (options_.reserve - pool_.reserve_bytes()) / g * g;
  deficit = std::min(deficit, (pool_.capacity() - pool_.reserved_bytes()) / g * g);
  plan->create_sizes = lake::chunk_sizes_for(deficit, options_);
  plan->handles.reserve(plan->create_sizes.size());
  pool_.begin_creating(deficit);
}

bool Jobs::plan(Job* job) {
  job->stitch = false;
  job->evictions.clear();
  // Room for the evictions first: the plans below pin chunks, and nothing
  // after them may fail for want of heap.
  job->evictions.reserve(table_.unpinned_count());
  if (consolidate_ && pool_.free_bytes() >= kMinChunks * options_.granularity) {
    plan_consolidation(&job->plan);
    job->stitch = true;
  } else if (wants_reserve()) {
    consolidate_ = false;
    plan_reserve(&job->plan);
    job->stitch = true;
  }
  const std::size_t units =
      job->stitch ? job->plan.handles.size() + job->plan.create_sizes.size() + 1 : 0;
  table_.plan_evictions(&job->evictions, lake::kNone, units);
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
    if (plan.status == Status::ok) {
      try {
        plan.status = table_.map_range(plan.handles, &plan.range, chunks_per_access_);
      } catch (const std::bad_alloc&) {  // before anything was mapped
        plan.status = Status::out_of_host_memory;
      }
    }
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
  if (job.stitch)
    for (lake::ChunkId c : job.plan.ids) {
      assert(pool_[c].pins > 0);
      pool_.unpin(c);
    }
  keep(job.evictions);
  if (!job.stitch) {
    report(job, false);
    return;
  }
  StitchPlan& plan = job.plan;
  keep(plan.range.leftover);
  const bool reserve = !plan.create_sizes.empty();
  if (reserve) pool_.end_creating();
  std::size_t adopted = 0;
  lake::Zombie undo = std::move(plan.range.undo);
  try {
    if (reserve) {
      plan.ids.reserve(plan.ids.size() + plan.handles.size());
      for (; adopted < plan.handles.size(); ++adopted) {
        const auto [handle, size] = plan.handles[adopted];
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
    const lake::SegmentId s =
        table_.register_segment(std::move(plan.ids), std::move(plan.range), /*stitched=*/!reserve);
    report(job, false);
    if (reserve) {
      table_.add_reserve(s);
      return;
    }
    table_.add_consolidated(s);
    ++stats_.worker_stitches.current;
  } catch (const std::bad_alloc&) {
    if (plan.status == Status::ok) table_.retire(undo, true);
    abandon(plan, adopted);
    ++stats_.worker_failures.current;
    report(job, true);
  }
}

// What the backend could not unmap is kept for a retry; where the heap has
// no room for the list, one more try now.
void Jobs::keep(std::vector<lake::Zombie>& zombies) {
  for (lake::Zombie& z : zombies) {
    try {
      table_.keep(std::move(z));
    } catch (const std::bad_alloc&) {
      table_.retire(z, true);
    }
  }
  zombies.clear();
}

// The host's heap ran out while a job was made part of the lake (its range
// went back already): the chunks it created and the pool did not take go
// back too.
void Jobs::abandon(StitchPlan& plan, std::size_t adopted) {
  if (!plan.create_sizes.empty())
    for (std::size_t i = adopted; i < plan.handles.size(); ++i)
      pool_.backend().release_chunk(plan.handles[i].first);
}

}  // namespace memlake::worker
