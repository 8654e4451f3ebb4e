// The mapping worker's jobs on the lake, each planned and committed under
// the allocator's lock and executed (the VMM calls) without it:
//
// - consolidation: after a request had to stitch because free memory is
//   scattered over many segments, map the largest free chunks (as many as
//   the largest request needs) into one new range, so the next large
//   request finds a free run and maps nothing on the allocating thread.
//   Chunks may be mapped at several addresses, so this takes no memory from
//   anyone: the chunks stay free until a request claims them through
//   whichever segment it finds.
// - reserve top-up (Config::reserve): create and map chunks ahead of demand,
//   so a request that needs new memory finds it mapped.
// - eviction: unmap cached ranges over the mapping budget.
#include <algorithm>
#include <cassert>

#include "lake/lake.hpp"

namespace memlake::lake {

namespace {
constexpr std::size_t kMinChunks = 8;  // below this a stitch on demand is cheap enough
}  // namespace

// After a request had to stitch on the allocating thread, consolidate when
// the largest free run is under half of the free chunks. Only then: on a
// GPU the worker's VMM calls run beside the training thread's and slow them
// down (its own critical-path calls took 66 us each instead of 25 us while
// the worker mapped ahead of demand too; GPT-2 training steps 1.3x slower),
// and ranges built ahead of demand were mostly re-cut before use.
bool Lake::wants_consolidation() {
  if (!stitch_demand_ || free_chunk_bytes_ < kMinChunks * options_.granularity) return false;
  catch_up();
  const std::size_t largest = free_runs_.largest_bytes();
  return largest * 2 < free_chunk_bytes_;
}

// The run the largest request seen needs (as far as the free chunks go).
std::size_t Lake::consolidation_bytes() const {
  return std::min(free_chunk_bytes_, std::max(demand_target_, kMinChunks * options_.granularity));
}

bool Lake::wants_reserve() const {
  const auto held = static_cast<std::size_t>(stats_.reserve_bytes.current);
  return options_.reserve != 0 && creating_bytes_ == 0 &&
         held + options_.granularity <= options_.reserve &&
         reserved_bytes() + options_.granularity <= options_.capacity;
}

bool Lake::wants_work() {
  return wants_consolidation() || wants_reserve() || over_budget();
}

bool Lake::plan_job(WorkerJob* job) {
  job->stitch = false;
  job->evictions.clear();
  StitchPlan& plan = job->plan;
  if (wants_consolidation()) {
    // The largest free chunks, as many as the largest request seen needs:
    // one run that serves it (mapping more cost driver time for runs that
    // later requests cut up anyway).
    stitch_demand_ = false;
    plan = StitchPlan{};
    const std::size_t cap = consolidation_bytes();
    std::size_t planned = 0;
    for (auto it = free_chunks_.rbegin();
         it != free_chunks_.rend() && plan.ids.size() < options_.max_stitch_chunks && planned < cap;
         ++it) {
      Chunk& c = chunks_[it->second];
      if (c.reserve) continue;
      ++c.pins;
      planned += c.size;
      plan.ids.push_back(it->second);
      plan.handles.emplace_back(c.handle, c.size);
    }
    job->stitch = true;
  } else if (wants_reserve()) {
    plan = StitchPlan{};
    const std::size_t g = options_.granularity;
    const auto held = static_cast<std::size_t>(stats_.reserve_bytes.current);
    std::size_t deficit = (options_.reserve - held) / g * g;
    deficit = std::min(deficit, (options_.capacity - reserved_bytes()) / g * g);
    plan.create_sizes = chunk_sizes_for(deficit);
    creating_bytes_ = deficit;
    job->stitch = true;
  }
  plan_evictions(&job->evictions, kNone);
  return job->stitch || !job->evictions.empty();
}

void Lake::execute(WorkerJob& job) const {
  if (job.stitch) {
    StitchPlan& plan = job.plan;
    for (std::size_t size : plan.create_sizes) {
      ChunkHandle h = 0;
      plan.status = backend_.create_chunk(size, &h);
      if (plan.status != Status::ok) break;
      plan.handles.emplace_back(h, size);
    }
    if (plan.status == Status::ok) plan.status = map_range(plan.handles, &plan.range);
    // A reserve that could not be mapped is given back at once; a handle the
    // backend will not release stays adopted (commit) so nothing leaks.
    if (plan.status != Status::ok && !plan.create_sizes.empty())
      std::erase_if(plan.handles, [&](const std::pair<ChunkHandle, std::size_t>& h) {
        return backend_.release_chunk(h.first) == Status::ok;
      });
  }
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
  const bool reserve = !plan.create_sizes.empty();
  if (reserve) {
    creating_bytes_ = 0;
    for (auto [handle, size] : plan.handles) {
      const ChunkId id = adopt_chunk(handle, size);
      if (plan.status != Status::ok) continue;  // an unreleasable leftover: a plain free chunk
      chunks_[id].reserve = true;
      gauge(stats_.reserve_bytes, static_cast<std::int64_t>(size));
      plan.ids.push_back(id);
    }
  }
  if (plan.status != Status::ok) {
    ++stats_.worker_failures.current;
    return;
  }
  const SegmentId s = register_segment(std::move(plan.ids), std::move(plan.range), !reserve);
  if (reserve) {
    segments_[s].reserve = true;
    reserve_segments_.push_back(s);
    return;
  }
  unindex_superseded(s);
  std::erase_if(consolidated_, [&](SegmentId r) { return !segments_[r].indexed; });
  consolidated_.push_back(s);
  if (consolidated_.size() > kIndexedRanges) {
    unindex(consolidated_.front());
    consolidated_.erase(consolidated_.begin());
  }
  segments_[s].prepared = true;
  ++stats_.worker_stitches.current;
}

std::size_t Lake::indexed_segment_count() const {
  return static_cast<std::size_t>(std::count_if(
      segments_.begin(), segments_.end(), [](const Segment& s) { return s.in_use && s.indexed; }));
}

// Every mapping of a chunk in an indexed segment costs run-index upkeep on
// each claim and free; without this, each consolidation would add one more
// copy of every free chunk's runs (measured: ~5 mappings per chunk, most of
// the allocation path's time).
void Lake::unindex_superseded(SegmentId range) {
  std::vector<char> in_range(chunks_.size(), 0);
  for (ChunkId c : segments_[range].chunks) in_range[c] = 1;
  for (SegmentId s = 0; s < segments_.size(); ++s) {
    const Segment& seg = segments_[s];
    if (s == range || !seg.in_use || !seg.indexed || seg.busy != 0 || seg.reserve) continue;
    if (std::all_of(seg.chunks.begin(), seg.chunks.end(), [&](ChunkId c) { return in_range[c]; }))
      unindex(s);
  }
}

}  // namespace memlake::lake
