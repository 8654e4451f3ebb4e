// The background mapping worker: one thread per allocator that does VMM work
// off the allocating thread: it keeps the reserve created and mapped, and
// unmaps ranges over the mapping budget. It is nudged once per allocation,
// after the rungs that make no new memory, when it has work; it never
// polls, and the allocating thread never waits for it (if a job is under
// way, a request that needs mapping does it itself).
//
// Each job (jobs.hpp) plans under the allocator's lock, makes its VMM calls
// without it, and commits under it again; a failed job leaves the lake as
// it was.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "lake/lake.hpp"
#include "memlake/config.hpp"
#include "worker/jobs.hpp"

namespace memlake {

class MappingWorker {
 public:
  MappingWorker(std::mutex& allocator_lock, lake::Lake& lake, Stats& stats, ObserverList& observers,
                WorkerMode mode);
  ~MappingWorker();
  MappingWorker(const MappingWorker&) = delete;
  MappingWorker& operator=(const MappingWorker&) = delete;

  // Whether a job is wanted now (lock held): cheap when there is nothing to
  // do. The caller brings what the job plans with (the fences known
  // complete) up to date, then nudges.
  bool has_work() { return mode_ != WorkerMode::off && !stopping_ && jobs_.wanted(); }
  // Starts the job has_work() found wanted (lock held): inline, at once.
  void nudge();
  // Finishes the job in progress, then stops the thread. Idempotent.
  void stop();
  // Waits (lock held, released while waiting) until no job is under way,
  // and drops a job nudged but not begun, so that empty_cache can release
  // every chunk and no reserve is made after it (the next allocation asks
  // again). Not for malloc/free.
  void settle(std::unique_lock<std::mutex>& lock);

 private:
  void loop();
  void run_inline();
  void run_job(std::unique_lock<std::mutex>* lock);

  // What has_work() reads on every allocation, together ahead of the rest.
  WorkerMode mode_;
  bool stopping_ = false;
  bool pending_ = false;
  bool busy_ = false;
  std::mutex& lock_;
  worker::Jobs jobs_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::thread thread_;
};

}  // namespace memlake
