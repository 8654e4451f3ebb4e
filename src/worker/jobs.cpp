// The worker's jobs: when each is wanted, what it plans, and how it is made
// part of the lake.
#include "worker/jobs.hpp"

#include <algorithm>

#include "common/timing.hpp"

namespace memlake::worker {

Jobs::Jobs(lake::Lake& lake, Stats& stats, ObserverList& observers, std::size_t chunks_per_access)
    : chunks_per_access_(chunks_per_access),
      pool_(lake.pool()),
      table_(lake.segments()),
      options_(lake.options()),
      stats_(stats),
      observers_(observers) {}

bool Jobs::wants_reserve() const {
  const std::size_t g = options_.granularity;
  return options_.reserve != 0 && pool_.creating_bytes() == 0 &&
         pool_.reserve_bytes() + g <= options_.reserve &&
         pool_.reserved_bytes() + g <= pool_.capacity();
}

bool Jobs::wanted() const {
  return wants_reserve() || table_.over_budget();
}

void Jobs::plan_reserve(ReservePlan* plan) {
  *plan = ReservePlan{};
  const std::size_t g = options_.granularity;
  std::size_t deficit = (options_.reserve - pool_.reserve_bytes()) / g * g;
  deficit = std::min(deficit, (pool_.capacity() - pool_.reserved_bytes()) / g * g);
  plan->create_sizes = lake::chunk_sizes_for(deficit, options_);
  plan->handles.reserve(plan->create_sizes.size());
  pool_.begin_creating(deficit);
}

bool Jobs::plan(Job* job) {
  job->reserve = false;
  job->evictions.clear();
  // Room for the evictions first: nothing after the reserve's plan may fail
  // for want of heap.
  job->evictions.reserve(table_.unpinned_count());
  if (wants_reserve()) {
    plan_reserve(&job->plan);
    job->reserve = true;
  }
  const std::size_t units = job->reserve ? job->plan.create_sizes.size() + 1 : 0;
  table_.plan_evictions(&job->evictions, lake::kNone, units);
  job->eviction_bytes = 0;
  for (const lake::Zombie& z : job->evictions)
    for (const auto& [va, bytes] : z.mapped) job->eviction_bytes += bytes;
  return job->reserve || !job->evictions.empty();
}

void Jobs::execute(Job& job) const {
  job.start_ns = now_ns();
  Backend& backend = pool_.backend();
  if (job.reserve) {
    ReservePlan& plan = job.plan;
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
    if (plan.status != Status::ok)
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
  if (!job.reserve) return;
  std::size_t bytes = 0;
  for (const auto& [handle, size] : job.plan.handles) bytes += size;
  observers_.each([&](Observer& o) {
    o.on_worker_job({WorkerJobKind::reserve, bytes, job.start_ns, job.end_ns, failed});
  });
}

// Registers the reserve's range (or, if creating or mapping failed, leaves
// the lake as it was), and keeps what could not be unmapped for a retry.
void Jobs::commit(Job& job) {
  keep(job.evictions);
  if (!job.reserve) {
    report(job, false);
    return;
  }
  ReservePlan& plan = job.plan;
  keep(plan.range.leftover);
  pool_.end_creating();
  std::size_t adopted = 0;
  lake::Zombie undo = std::move(plan.range.undo);
  try {
    std::vector<lake::ChunkId> ids;
    ids.reserve(plan.handles.size());
    for (; adopted < plan.handles.size(); ++adopted) {
      const auto [handle, size] = plan.handles[adopted];
      const lake::ChunkId id = pool_.adopt(handle, size);
      if (plan.status != Status::ok) continue;  // an unreleasable leftover: a plain free chunk
      pool_.mark_reserve(id);
      ids.push_back(id);
    }
    if (plan.status != Status::ok) {
      ++stats_.worker_failures.current;
      report(job, true);
      return;
    }
    const lake::SegmentId s =
        table_.register_segment(std::move(ids), std::move(plan.range), /*stitched=*/false);
    table_.add_reserve(s);
    ++stats_.worker_reserves.current;
    report(job, false);
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
void Jobs::abandon(ReservePlan& plan, std::size_t adopted) {
  for (std::size_t i = adopted; i < plan.handles.size(); ++i)
    pool_.backend().release_chunk(plan.handles[i].first);
}

}  // namespace memlake::worker
