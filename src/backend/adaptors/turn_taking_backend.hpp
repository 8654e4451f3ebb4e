// TurnTakingBackend: the allocating thread goes first at the driver.
//
// The driver serializes the VMM calls of all threads, and a thread that calls
// back to back wins the driver's lock again and again: on an H200 the
// training thread's own calls took 40-89 us instead of 19-40 us while the
// background worker mapped (docs/benchmarks.md, "Where the step time goes").
// So the allocating thread takes a turn (ForegroundTurn) for as long as it
// may call the driver, and a background worker thread, before each VMM call
// it makes through this adaptor, waits until no turn is held. The worker
// then delays the allocating thread by at most the one call it had begun.
//
// Only threads marked with BackgroundThreadScope wait; a worker job run
// inline on the allocating thread never does.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "backend/adaptors/backend_adaptor.hpp"

namespace memlake {

namespace detail {
inline thread_local bool t_background_thread = false;
}  // namespace detail

// Chunks a background thread grants access per driver call: access costs
// per handle (about 29 us on an H200), so an allocating thread that needs
// the driver waits for at most this much of a background call.
inline constexpr std::size_t kBackgroundChunksPerAccess = 4;

// Marks the calling thread as a background thread whose VMM calls give way.
class BackgroundThreadScope {
 public:
  BackgroundThreadScope() noexcept : saved_(detail::t_background_thread) {
    detail::t_background_thread = true;
  }
  ~BackgroundThreadScope() { detail::t_background_thread = saved_; }
  BackgroundThreadScope(const BackgroundThreadScope&) = delete;
  BackgroundThreadScope& operator=(const BackgroundThreadScope&) = delete;
  static bool active() noexcept { return detail::t_background_thread; }

 private:
  bool saved_;
};

class DriverTurns {
 public:
  // Held by a thread that serves a request and may call the driver. Nests,
  // and several threads may hold one at once.
  class ForegroundTurn {
   public:
    explicit ForegroundTurn(DriverTurns* turns) noexcept : turns_(turns) {
      if (turns_ != nullptr) turns_->held_.fetch_add(1, std::memory_order_seq_cst);
    }
    ~ForegroundTurn() {
      if (turns_ != nullptr) turns_->release();
    }
    ForegroundTurn(const ForegroundTurn&) = delete;
    ForegroundTurn& operator=(const ForegroundTurn&) = delete;

   private:
    DriverTurns* turns_;
  };

  // Returns once no ForegroundTurn is held (at once when none is).
  void wait_for_turn();
  // Calls that waited, and the nanoseconds they waited.
  std::uint64_t waits() const { return waits_.load(std::memory_order_relaxed); }
  std::uint64_t wait_ns() const { return wait_ns_.load(std::memory_order_relaxed); }

 private:
  void release();

  std::atomic<int> held_{0};
  std::atomic<int> waiting_{0};
  std::mutex mutex_;
  std::condition_variable free_;
  std::atomic<std::uint64_t> waits_{0};
  std::atomic<std::uint64_t> wait_ns_{0};
};

class TurnTakingBackend final : public BackendAdaptor {
 public:
  explicit TurnTakingBackend(std::unique_ptr<Backend> upstream);

  DriverTurns& turns() { return turns_; }
  const DriverTurns& turns() const { return turns_; }

  Status reserve(std::size_t size, DevicePtr* va) override;
  Status unreserve(DevicePtr va, std::size_t size) override;
  Status create_chunk(std::size_t size, ChunkHandle* chunk) override;
  Status release_chunk(ChunkHandle chunk) override;
  Status map(DevicePtr va, std::size_t size, ChunkHandle chunk) override;
  Status unmap(DevicePtr va, std::size_t size) override;
  Status set_access(DevicePtr va, std::size_t size) override;

 private:
  void give_way() {
    if (BackgroundThreadScope::active()) turns_.wait_for_turn();
  }

  DriverTurns turns_;
};

static_assert(IsBackend<TurnTakingBackend>);

}  // namespace memlake
