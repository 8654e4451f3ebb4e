// The mapping worker's thread and its inline (deterministic) twin.
#include "worker/mapping_worker.hpp"

#include "backend/adaptors/counting_backend.hpp"

namespace memlake {

MappingWorker::MappingWorker(std::mutex& allocator_lock, lake::Lake& lake, WorkerMode mode)
    : lock_(allocator_lock), lake_(lake), mode_(mode) {
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

void MappingWorker::wait_idle(std::unique_lock<std::mutex>& lock) {
  idle_.wait(lock, [&] { return !busy_; });
}

void MappingWorker::nudge() {
  if (mode_ == WorkerMode::off || stopping_ || !lake_.wants_consolidation()) return;
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
  lake::Lake::StitchPlan plan;
  if (!lake_.plan_consolidation(&plan)) return;
  lake_.execute(plan);
  try {
    lake_.commit(plan);
  } catch (const std::exception&) {
    // commit's budget eviction failed in the backend; the new range is
    // registered and the lake consistent, so the caller's request goes on.
  }
}

void MappingWorker::loop() {
  WorkerThreadScope worker;
  std::unique_lock lock(lock_);
  for (;;) {
    wake_.wait(lock, [&] { return pending_ || stopping_; });
    if (stopping_) return;
    pending_ = false;
    lake::Lake::StitchPlan plan;
    if (!lake_.plan_consolidation(&plan)) continue;
    busy_ = true;
    lock.unlock();
    lake_.execute(plan);
    lock.lock();
    try {
      lake_.commit(plan);
    } catch (const std::exception&) {
      // See run_inline(): the lake stays consistent.
    }
    busy_ = false;
    idle_.notify_all();
  }
}

}  // namespace memlake
