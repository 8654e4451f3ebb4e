// The mapping worker's thread and its inline (deterministic) twin.
#include "worker/mapping_worker.hpp"

#include <cassert>
#include <cstdint>

#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/turn_taking_backend.hpp"

namespace memlake {

namespace {
// On its own thread the worker grants access a few chunks per call
// (turn_taking_backend.hpp); inline, one call.
std::size_t chunks_per_access(WorkerMode mode) {
  return mode == WorkerMode::thread ? kBackgroundChunksPerAccess : SIZE_MAX;
}
}  // namespace

MappingWorker::MappingWorker(std::mutex& allocator_lock, lake::Lake& lake, Stats& stats,
                             ObserverList& observers, WorkerMode mode)
    : mode_(mode), lock_(allocator_lock), jobs_(lake, stats, observers, chunks_per_access(mode)) {
  if (mode_ == WorkerMode::thread) thread_ = std::thread([this] { loop(); });
}

MappingWorker::~MappingWorker() {
  stop();
}

void MappingWorker::stop() {
  {
    std::lock_guard lock(lock_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void MappingWorker::settle(std::unique_lock<std::mutex>& lock) {
  idle_.wait(lock, [&] { return !busy_; });
  pending_ = false;
}

void MappingWorker::nudge() {
  assert(has_work());
  if (mode_ == WorkerMode::inline_jobs) {
    run_inline();
    return;
  }
  pending_ = true;
  if (!busy_) wake_.notify_one();
}

void MappingWorker::run_inline() {
  CriticalPathPause not_the_callers_work;
  WorkerThreadScope worker;
  run_job(nullptr);
}

// One job, planned and committed with the lock held and executed without it
// (`lock`, when given, is released meanwhile). Nothing escapes: a plan the
// host's heap cannot hold is dropped and counted as a failed job.
void MappingWorker::run_job(std::unique_lock<std::mutex>* lock) {
  worker::Job job;
  try {
    if (!jobs_.plan(&job)) return;
  } catch (const std::exception&) {
    jobs_.count_failure();
    return;
  }
  busy_ = true;
  // Opened and closed with the lock held, around the driver calls.
  SlowWorkScope slow(jobs_.observers(), SlowWork::worker_job);
  slow.begin(0, nullptr);
  if (lock) lock->unlock();
  jobs_.execute(job);
  if (lock) lock->lock();
  jobs_.commit(job);
  busy_ = false;
  idle_.notify_all();
}

void MappingWorker::loop() {
  WorkerThreadScope worker;
  BackgroundThreadScope gives_way_at_the_driver;
  std::unique_lock lock(lock_);
  for (;;) {
    wake_.wait(lock, [&] { return pending_ || stopping_; });
    if (stopping_) return;
    pending_ = false;
    run_job(&lock);
  }
}

}  // namespace memlake
