// The mapping worker's jobs, over the parts of a lake: each is planned under
// the allocator's lock, executed (the driver calls) without it, and
// committed under it again; a failed job leaves the lake as it was.
//
// - reserve top-up (Config::reserve): create and map chunks ahead of demand,
//   so a request that needs new memory finds it mapped.
// - eviction: unmap cached ranges over the mapping budget.
//
// The worker does not map free chunks into new ranges ahead of demand: on a
// GPU its driver calls slow the allocating thread's own, and requests cut
// such ranges up before they are used whole (docs/benchmarks.md, "The
// mapping worker").
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "lake/lake.hpp"
#include "memlake/stats.hpp"

namespace memlake::worker {

// Reserve top-up: chunks of `create_sizes` are created by execute() (and
// released again there if the job fails), mapped as one range, and adopted
// by commit().
struct ReservePlan {
  std::vector<std::size_t> create_sizes;
  std::vector<std::pair<ChunkHandle, std::size_t>> handles;
  Status status = Status::ok;
  lake::MappedRange range;
};

struct Job {
  bool reserve = false;
  ReservePlan plan;
  std::vector<lake::Zombie> evictions;  // detached ranges to unmap
  std::size_t eviction_bytes = 0;
  std::int64_t start_ns = 0, end_ns = 0;  // when execute() ran
};

class Jobs {
 public:
  // `chunks_per_access`: chunks granted access per driver call when a
  // reserve maps its range (MappingWorker says why it may be few).
  Jobs(lake::Lake& lake, Stats& stats, ObserverList& observers, std::size_t chunks_per_access);

  // The reserve is short, or more is mapped than the budget allows.
  bool wanted() const;
  // plan() changes nothing when it throws (the host's heap ran out);
  // execute() and commit() do not throw: a job that cannot be completed
  // leaves the lake as it was and counts in worker_failures.
  bool plan(Job* job);
  void execute(Job& job) const;
  void commit(Job& job);
  void count_failure() { ++stats_.worker_failures.current; }
  const ObserverList& observers() const { return observers_; }

 private:
  bool wants_reserve() const;
  void plan_reserve(ReservePlan* plan);
  void report(const Job& job, bool failed) const;
  void abandon(ReservePlan& plan, std::size_t adopted);
  void keep(std::vector<lake::Zombie>& zombies);

  const std::size_t chunks_per_access_;
  lake::ChunkPool& pool_;
  lake::SegmentTable& table_;
  const lake::LakeOptions& options_;
  Stats& stats_;
  ObserverList& observers_;
};

}  // namespace memlake::worker
