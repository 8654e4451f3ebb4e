// CountingBackend: counts every VMM call on its way upstream, in total and by
// who made it: a thread inside an allocator call (CriticalPathScope, put in
// malloc/free by the allocator) or a background worker (WorkerThreadScope),
// and the host time those calls and the critical path's event calls took.
// In the steady state the critical-path count should not move: docs/design.md,
// "Off the critical path". It also counts the calls the layers below refused,
// by operation and status, so a run can report which limits it met.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "backend/adaptors/backend_adaptor.hpp"

namespace memlake {

namespace detail {
inline thread_local int t_critical_path_depth = 0;
inline thread_local int t_worker_depth = 0;
}  // namespace detail

// Marks the calling thread as inside an allocator call (malloc/free) for as
// long as the scope lives. Nests.
class CriticalPathScope {
 public:
  CriticalPathScope() noexcept { ++detail::t_critical_path_depth; }
  ~CriticalPathScope() { --detail::t_critical_path_depth; }
  CriticalPathScope(const CriticalPathScope&) = delete;
  CriticalPathScope& operator=(const CriticalPathScope&) = delete;
  static bool active() noexcept { return detail::t_critical_path_depth > 0; }
};

// Suspends CriticalPathScope for its lifetime: for worker jobs run inline on
// the allocating thread (deterministic mode), which are not its own work.
class CriticalPathPause {
 public:
  CriticalPathPause() noexcept : saved_(detail::t_critical_path_depth) {
    detail::t_critical_path_depth = 0;
  }
  ~CriticalPathPause() { detail::t_critical_path_depth = saved_; }
  CriticalPathPause(const CriticalPathPause&) = delete;
  CriticalPathPause& operator=(const CriticalPathPause&) = delete;

 private:
  int saved_;
};

// Marks the calling thread as a background worker for the scope's lifetime.
class WorkerThreadScope {
 public:
  WorkerThreadScope() noexcept { ++detail::t_worker_depth; }
  ~WorkerThreadScope() { --detail::t_worker_depth; }
  WorkerThreadScope(const WorkerThreadScope&) = delete;
  WorkerThreadScope& operator=(const WorkerThreadScope&) = delete;
  static bool active() noexcept { return detail::t_worker_depth > 0; }
};

class CountingBackend final : public BackendAdaptor {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> upstream);

  Status reserve(std::size_t size, DevicePtr* va) override;
  Status unreserve(DevicePtr va, std::size_t size) override;
  Status create_chunk(std::size_t size, ChunkHandle* chunk) override;
  Status release_chunk(ChunkHandle chunk) override;
  Status map(DevicePtr va, std::size_t size, ChunkHandle chunk) override;
  Status unmap(DevicePtr va, std::size_t size) override;
  Status set_access(DevicePtr va, std::size_t size) override;
  Status export_chunk(ChunkHandle chunk, int* fd) override;
  Status import_chunk(int fd, std::size_t size, ChunkHandle* chunk) override;
  Status event_record(EventHandle event, StreamHandle stream) override;
  Status event_query(EventHandle event) override;
  Status stream_wait_event(StreamHandle stream, EventHandle event) override;

  // Calls made (successful or not) since construction or reset().
  std::uint64_t calls(VmmOp op) const;
  std::uint64_t total() const;
  std::uint64_t critical_path() const;  // made inside a CriticalPathScope
  std::uint64_t critical_path(VmmOp op) const;
  std::uint64_t worker() const;  // made inside a WorkerThreadScope
  std::uint64_t worker(VmmOp op) const;
  // VMM calls that came back with a status other than ok.
  std::uint64_t refusals() const;
  std::uint64_t refusals(Status status) const;
  std::uint64_t refusals(VmmOp op, Status status) const;
  // Host nanoseconds: VMM calls on the critical path and on the worker,
  // event record/query/wait calls on the critical path.
  std::uint64_t critical_path_vmm_ns() const { return load(critical_vmm_ns_); }
  std::uint64_t worker_vmm_ns() const { return load(worker_vmm_ns_); }
  std::uint64_t critical_path_event_ns() const { return load(critical_event_ns_); }
  // Host waits (stream_synchronize, device_synchronize) made inside a
  // CriticalPathScope: malloc and free must never block on the GPU, and this
  // proves they did not.
  Status stream_synchronize(StreamHandle stream) override;
  Status device_synchronize() override;
  std::uint64_t host_waits() const { return host_waits_.load(std::memory_order_relaxed); }
  void reset();

 private:
  static constexpr std::size_t kOps = static_cast<std::size_t>(VmmOp::count);
  using Counters = std::array<std::atomic<std::uint64_t>, kOps>;

  // Counts `op` and runs the upstream call `call`, timing it where it counts.
  template <typename Call>
  Status vmm(VmmOp op, Call call);
  template <typename Call>
  Status event(Call call);
  static std::uint64_t sum(const Counters& c);
  static std::uint64_t load(const std::atomic<std::uint64_t>& v) {
    return v.load(std::memory_order_relaxed);
  }

  Counters calls_{};
  Counters critical_{};
  Counters worker_{};
  std::array<std::array<std::atomic<std::uint64_t>, kStatusCount>, kOps> refusals_{};
  std::atomic<std::uint64_t> host_waits_{0};
  std::atomic<std::uint64_t> critical_vmm_ns_{0};
  std::atomic<std::uint64_t> worker_vmm_ns_{0};
  std::atomic<std::uint64_t> critical_event_ns_{0};
};

static_assert(IsBackend<CountingBackend>);

}  // namespace memlake
