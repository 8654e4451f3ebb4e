// The mapping worker's jobs, over the parts of a lake: each is planned under
// the allocator's lock, executed (the driver calls) without it, and
// committed under it again; a failed job leaves the lake as it was.
//
// - consolidation: after a request had to stitch because free memory is
//   scattered over many ranges, map the largest free chunks (as many as the
//   largest request needs) into one new range, so the next large request
//   finds a free run and maps nothing on the allocating thread. Chunks may
//   be mapped at several addresses, so this takes no memory from anyone:
//   the chunks stay free until a request takes them through whichever range
//   it finds.
// - reserve top-up (Config::reserve): create and map chunks ahead of demand,
//   so a request that needs new memory finds it mapped.
// - eviction: unmap cached ranges over the mapping budget.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "lake/lake.hpp"
#include "memlake/stats.hpp"

namespace memlake::worker {

struct StitchPlan {
  std::vector<lake::ChunkId> ids;  // free chunks it maps, pinned meanwhile
  std::vector<std::pair<ChunkHandle, std::size_t>> handles;
  // Reserve top-up: chunks of these sizes are created by execute() (and
  // released again there if the job fails); commit() adopts them.
  std::vector<std::size_t> create_sizes;
  Status status = Status::ok;
  lake::MappedRange range;
};

struct Job {
  bool stitch = false;
  StitchPlan plan;
  std::vector<lake::Zombie> evictions;  // detached ranges to unmap
  std::size_t eviction_bytes = 0;
  std::int64_t start_ns = 0, end_ns = 0;  // when execute() ran
};

class Jobs {
 public:
  // `chunks_per_access`: chunks granted access per driver call when a
  // consolidation maps its range (MappingWorker says why it may be few).
  Jobs(lake::Lake& lake, Stats& stats, ObserverList& observers, std::size_t chunks_per_access);

  // Free memory is scattered after a request had to stitch, the reserve is
  // short, or more is mapped than the budget allows. Catches the segments up.
  bool wanted();
  // plan() changes nothing when it throws (the host's heap ran out);
  // execute() and commit() do not throw: a job that cannot be completed
  // leaves the lake as it was and counts in worker_failures.
  bool plan(Job* job);
  void execute(Job& job) const;
  void commit(Job& job);
  void count_failure() { ++stats_.worker_failures.current; }
  const ObserverList& observers() const { return observers_; }

 private:
  bool wants_consolidation();
  bool wants_reserve() const;
  std::size_t consolidation_bytes() const;
  void plan_consolidation(StitchPlan* plan);
  void plan_reserve(StitchPlan* plan);
  void report(const Job& job, bool failed) const;
  void abandon(StitchPlan& plan, std::size_t adopted);
  void keep(std::vector<lake::Zombie>& zombies);

  const std::size_t chunks_per_access_;
  lake::ChunkPool& pool_;
  lake::SegmentTable& table_;
  lake::Demand& demand_;
  const lake::LakeOptions& options_;
  Stats& stats_;
  ObserverList& observers_;
  bool consolidate_ = false;  // wanted() found consolidation worth a job
};

}  // namespace memlake::worker
