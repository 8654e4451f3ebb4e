// FaultBackend: fails chosen VMM calls and slows others down, to test the
// allocator's error paths and its behaviour with a slow driver. Any status
// can be injected on any operation: physical exhaustion, the limits
// (out_of_va, out_of_mappings, out_of_descriptors, out_of_host_memory) and
// plain errors, by count (the n-th call) or at random for a seed. An
// injected failure never reaches the upstream backend, so it has no side
// effect, and it leaves "injected fault in <op>" in last_error().
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <vector>

#include "backend/adaptors/backend_adaptor.hpp"

namespace memlake {

class FaultBackend final : public BackendAdaptor {
 public:
  explicit FaultBackend(std::unique_ptr<Backend> upstream);

  // What an injected fault returns unless told otherwise: out_of_memory for
  // create, error for everything else.
  static Status default_status(VmmOp op);
  // Every status a backend call may fail with for want of a resource, and
  // error: what a fault sweep injects.
  static std::span<const Status> refusal_kinds();

  struct RandomFaults {
    double probability = 0;
    std::uint64_t seed = 0;
    std::vector<VmmOp> ops;        // empty: every operation
    std::vector<Status> statuses;  // empty: default_status(op); else one of them, at random
  };

  // Fails the n-th call of `op` from now on (n = 1: the next one). Several
  // may be armed at once.
  void fail_nth(VmmOp op, std::uint64_t n);
  void fail_nth(VmmOp op, std::uint64_t n, Status status);
  // Fails each call of the listed operations (all of them when the list is
  // empty) with the given probability; deterministic for a seed.
  void fail_randomly(double probability, std::uint64_t seed, std::initializer_list<VmmOp> ops = {});
  // The same with a choice of statuses; replaces any earlier random faults.
  void fail_randomly(const RandomFaults& faults);
  // Every later call of `op` first waits this long (busy, like a driver).
  void add_latency(VmmOp op, std::chrono::nanoseconds latency);
  // Disarms every fault and latency; the counters below are kept.
  void clear();

  std::uint64_t injected(VmmOp op) const;
  std::uint64_t injected(VmmOp op, Status status) const;
  std::uint64_t injected(Status status) const;  // over every operation
  std::uint64_t injected_total() const;

  Status reserve(std::size_t size, DevicePtr* va) override;
  Status unreserve(DevicePtr va, std::size_t size) override;
  Status create_chunk(std::size_t size, ChunkHandle* chunk) override;
  Status release_chunk(ChunkHandle chunk) override;
  Status map(DevicePtr va, std::size_t size, ChunkHandle chunk) override;
  Status unmap(DevicePtr va, std::size_t size) override;
  Status set_access(DevicePtr va, std::size_t size) override;
  Status export_chunk(ChunkHandle chunk, int* fd) override;
  Status import_chunk(int fd, std::size_t size, ChunkHandle* chunk) override;

 private:
  static constexpr std::size_t kOps = static_cast<std::size_t>(VmmOp::count);
  struct Armed {
    std::uint64_t call;  // value of seen_ at which to fail
    Status status;
  };

  // ok: forward the call; anything else: the injected failure.
  Status intercept(VmmOp op);

  mutable std::mutex mutex_;
  std::array<std::uint64_t, kOps> seen_{};
  std::array<std::array<std::uint64_t, kStatusCount>, kOps> injected_{};
  std::array<std::vector<Armed>, kOps> armed_{};
  std::array<std::chrono::nanoseconds, kOps> latency_{};
  std::array<bool, kOps> random_ops_{};
  std::vector<Status> random_statuses_;
  double random_probability_ = 0;
  std::mt19937_64 rng_;
};

static_assert(IsBackend<FaultBackend>);

}  // namespace memlake
