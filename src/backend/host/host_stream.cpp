// Ordered per-stream job queues for HostBackend (see host_stream.hpp).
#include "backend/host/host_stream.hpp"

#include <utility>

namespace memlake {

HostStream::HostStream() : worker_([this] { run(); }) {}

HostStream::~HostStream() {
  shutdown();
}

std::uint64_t HostStream::push(Job job) {
  std::uint64_t seq;
  {
    // The number is taken once the job is in the queue: a queue that cannot
    // grow (std::bad_alloc) leaves no number that would never complete.
    std::lock_guard lock(mutex_);
    seq = enqueued_ + 1;
    job.seq = seq;
    queue_.push_back(std::move(job));
    enqueued_ = seq;
  }
  work_cv_.notify_one();
  return seq;
}

std::uint64_t HostStream::enqueue(HostFn fn, void* user) {
  return push(Job{0, fn, user, nullptr, 0});
}

std::uint64_t HostStream::enqueue_wait(std::shared_ptr<HostStream> other, std::uint64_t seq) {
  return push(Job{0, nullptr, nullptr, std::move(other), seq});
}

std::uint64_t HostStream::tail() const {
  std::lock_guard lock(mutex_);
  return enqueued_;
}

void HostStream::wait_for(std::uint64_t seq) {
  if (reached(seq)) return;
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return reached(seq); });
}

void HostStream::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  work_cv_.notify_one();
  if (worker_.joinable()) worker_.join();
}

void HostStream::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    if (job.wait_stream) {
      job.wait_stream->wait_for(job.wait_seq);
    } else if (job.fn != nullptr) {
      job.fn(job.user);
    }
    {
      // Publishing under the lock keeps wait_for() from missing the wakeup.
      std::lock_guard lock(mutex_);
      completed_.store(job.seq, std::memory_order_release);
    }
    done_cv_.notify_all();
  }
}

}  // namespace memlake
