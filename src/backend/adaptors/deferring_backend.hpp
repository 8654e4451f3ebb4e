// DeferringBackend: stream-ordered mapping. Inside a DeferScope (the
// allocating thread, while it climbs the ladder), maps are made at once and
// set_access and unmap are queued as one batch; the allocator hands the
// block out at once and makes the caller's stream wait, GPU-side, on a host
// counter that the batch raises once its calls are made. The mapping worker
// makes them (run_pending) while the host goes on queueing work: the
// driver's time (access costs per handle, a map a fraction of it) leaves the
// allocating thread, and the GPU waits only if it gets to the block before
// the worker is done. The memory is valid in the stream order of the
// allocating stream, as cudaMallocAsync's is; its address is mapped when it
// is handed out, so a library that looks the pointer up on the host
// (cudaPointerGetAttributes) finds it, with no access yet.
//
// Order: batches run one at a time, in the order they were sealed. A map
// while an unmap is queued (which may free the same addresses) is queued
// too, behind it. A call that must come after queued ones (unreserve,
// release_chunk, export_chunk, and an unmap made outside a scope, which may
// hit a range a batch still maps) first runs every queued batch on the
// calling thread; a map outside a scope (the worker's jobs) maps chunks into
// a range of its own and goes straight upstream. Limits: usage() counts the
// mapping units queued maps will take, and within an eighth of the mapping
// limit a queued map is made at once (after the queued calls), so that a
// refusal reaches the lake, which routes around it, as without deferring.
//
// A queued call the driver refuses when it runs cannot be reported to the
// caller who already has the block: the batch still raises its counter (no
// stream waits for ever), deferring stops, and the allocator, at its next
// call, makes the refused calls again (remake_failed) and reports the cause
// (take_failure): work that reached the block meanwhile found it unmapped.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/adaptors/backend_adaptor.hpp"
#include "backend/adaptors/turn_taking_backend.hpp"

namespace memlake {

class DeferringBackend final : public BackendAdaptor {
 public:
  // Asks upstream for a counter; without one, available() is false and every
  // call goes straight upstream.
  explicit DeferringBackend(std::unique_ptr<Backend> upstream);
  // Runs what is queued, then destroys the counter.
  ~DeferringBackend() override;

  bool available() const { return counter_ != nullptr && !failed_.load(); }
  // Why there is no counter (upstream's error), when available() is false
  // from the start.
  const std::string& unavailable_reason() const { return unavailable_; }

  // Calls of this thread on `b` (if not null) are deferred while a scope
  // lives.
  class DeferScope {
   public:
    explicit DeferScope(DeferringBackend* b) noexcept;
    ~DeferScope();
    DeferScope(const DeferScope&) = delete;
    DeferScope& operator=(const DeferScope&) = delete;

   private:
    DeferringBackend* saved_;
  };

  // Queues the calls deferred since the last seal as one batch; false when
  // there were none. Called with the allocator's lock held.
  bool seal();
  // `stream` waits, GPU-side, for every batch not yet run, unless it already
  // waits for the newest. Allocator lock held.
  Status wait(StreamHandle stream);
  // The stream is gone: a later stream with the same handle has waited for
  // nothing. Allocator lock held.
  void forget(StreamHandle stream);
  // Whether a batch is queued and not yet run.
  bool pending() const { return done_.load() < sealed_.load(); }
  // Runs every queued batch, in order, on the calling thread; true when it
  // ran any.
  bool run_pending();
  // The thread that makes batches in the background marks itself with a
  // RunnerScope: between its calls it gives way while `turns` (the
  // allocating thread's) are held, unless another thread waits to run the
  // queue itself.
  void give_way_to(const DriverTurns* turns) { turns_ = turns; }
  class RunnerScope {
   public:
    RunnerScope() noexcept;
    ~RunnerScope();
    RunnerScope(const RunnerScope&) = delete;
    RunnerScope& operator=(const RunnerScope&) = delete;
  };
  // The cause of the first queued call the driver refused, once; empty when
  // none (or already taken).
  std::string take_failure();
  // Makes the refused calls again, in order, on the calling thread (after
  // what is queued); true when none is left refused. Allocator lock held.
  bool remake_failed();

  struct Counts {
    std::uint64_t batches = 0;       // batches sealed
    std::uint64_t calls = 0;         // calls deferred
    std::uint64_t stream_waits = 0;  // GPU-side waits issued
    std::uint64_t failures = 0;      // deferred calls refused when run
    std::uint64_t lag_ns = 0;        // from sealing to the last call made, summed
    std::uint64_t lag_max_ns = 0;    // the longest
  };
  Counts counts() const;

  BackendUsage usage() const override;

  Status unreserve(DevicePtr va, std::size_t size) override;
  Status release_chunk(ChunkHandle chunk) override;
  Status map(DevicePtr va, std::size_t size, ChunkHandle chunk) override;
  Status unmap(DevicePtr va, std::size_t size) override;
  Status set_access(DevicePtr va, std::size_t size) override;
  Status export_chunk(ChunkHandle chunk, int* fd) override;

 private:
  // `mapped`: a map made at once, kept in its batch only to show where the
  // batch's set_access calls may be cut (split_access); never made again.
  enum class Op : std::uint8_t { map, mapped, set_access, unmap };
  struct Call {
    Op op;
    DevicePtr va;
    std::size_t size;
    ChunkHandle chunk;
  };
  struct Batch {
    std::uint64_t number = 0;
    std::int64_t sealed_ns = 0;  // steady clock
    std::size_t units = 0;       // mapping units its maps take (usage())
    std::vector<Call> calls;
  };

  bool deferring() const;
  // Within an eighth of the mapping limit, counting queued maps.
  bool near_limit() const;
  Status defer(Call call);
  void run(const Batch& batch);
  // The batch's calls as run, in order, with a set_access over a range the
  // batch mapped cut into calls of a few chunks each.
  static void split_access(const Batch& batch, std::vector<Call>* calls);
  void note_failure(const Call& c);
  Status make(const Call& c);

  CounterHandle counter_ = nullptr;
  const std::size_t mapping_limit_;  // limits().mappings, known at construction
  std::string unavailable_;
  std::atomic<bool> failed_{false};

  Batch open_;  // touched only by the thread in a DeferScope (allocator lock held)
  std::size_t open_units_ = 0;

  mutable std::mutex queue_mutex_;  // guards queue_, queued_units_, failure_
  std::deque<Batch> queue_;
  std::size_t queued_units_ = 0;  // mapping units the queued maps will take
  // Unmaps queued and not yet made: a map waits behind them.
  std::atomic<std::size_t> unmaps_queued_{0};
  std::string failure_;
  std::vector<Call> failed_calls_;        // refused when run, in order
  std::mutex run_mutex_;                  // one thread runs batches at a time
  std::atomic<std::uint64_t> sealed_{0};  // number of the newest batch sealed
  std::atomic<std::uint64_t> done_{0};    // number of the newest batch run

  // Streams and the newest batch each already waits for (few streams).
  std::vector<std::pair<StreamHandle, std::uint64_t>> waited_;

  const DriverTurns* turns_ = nullptr;
  std::atomic<int> others_running_{0};  // threads other than the runner in run_pending
  std::atomic<std::uint64_t> batches_{0}, calls_{0}, stream_waits_{0}, failures_{0};
  std::atomic<std::uint64_t> lag_ns_{0}, lag_max_ns_{0};
};

}  // namespace memlake
