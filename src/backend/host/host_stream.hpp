// Host streams: the CPU stand-in for CUDA streams. A HostStream is an ordered
// work queue served by its own thread. Every job gets a sequence number when
// it is enqueued; the stream publishes the number of the last job that
// finished, so "everything before point N has run" is one comparison. Events
// are (stream, sequence) pairs taken at record time; a cross-stream wait is a
// job that blocks the waiting stream's thread, never the enqueuing thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/backend.hpp"

namespace memlake {

class HostStream {
 public:
  HostStream();
  ~HostStream();  // drains the queue, then joins the thread
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Both return the sequence number given to the new job. They throw
  // std::bad_alloc when the queue cannot grow, and then enqueue nothing.
  std::uint64_t enqueue(HostFn fn, void* user);
  // The job finishes once `other` has completed job `seq`.
  std::uint64_t enqueue_wait(std::shared_ptr<HostStream> other, std::uint64_t seq);

  // Sequence number of the last job enqueued so far (0: none yet).
  std::uint64_t tail() const;
  // True when every job up to and including `seq` has finished.
  bool reached(std::uint64_t seq) const {
    return completed_.load(std::memory_order_acquire) >= seq;
  }
  void wait_for(std::uint64_t seq);
  void drain() { wait_for(tail()); }
  // Finishes the queued jobs and stops the thread; idempotent.
  void shutdown();
  bool on_worker_thread() const { return std::this_thread::get_id() == worker_.get_id(); }

 private:
  struct Job {
    std::uint64_t seq = 0;
    HostFn fn = nullptr;
    void* user = nullptr;
    std::shared_ptr<HostStream> wait_stream;  // set for a wait job
    std::uint64_t wait_seq = 0;
  };

  std::uint64_t push(Job job);
  void run();

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // jobs arrived or stop requested
  std::condition_variable done_cv_;  // a job finished
  std::deque<Job> queue_;
  std::uint64_t enqueued_ = 0;
  std::atomic<std::uint64_t> completed_{0};
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace memlake
