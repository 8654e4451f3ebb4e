// FaultBackend: armed failures, random failures and added latency per VMM
// operation (see fault_backend.hpp).
#include "backend/adaptors/fault_backend.hpp"

#include <algorithm>

#include "backend/backend_detail.hpp"

namespace memlake {

FaultBackend::FaultBackend(std::unique_ptr<Backend> upstream)
    : BackendAdaptor(std::move(upstream), "fault") {}

Status FaultBackend::default_status(VmmOp op) {
  return op == VmmOp::create ? Status::out_of_memory : Status::error;
}

std::span<const Status> FaultBackend::refusal_kinds() {
  static constexpr Status kKinds[] = {Status::out_of_memory,      Status::out_of_va,
                                      Status::out_of_mappings,    Status::out_of_descriptors,
                                      Status::out_of_host_memory, Status::error};
  return kKinds;
}

void FaultBackend::fail_nth(VmmOp op, std::uint64_t n) {
  fail_nth(op, n, default_status(op));
}

void FaultBackend::fail_nth(VmmOp op, std::uint64_t n, Status status) {
  if (op == VmmOp::count || n == 0) return;
  const auto i = static_cast<std::size_t>(op);
  std::lock_guard lock(mutex_);
  armed_[i].push_back(Armed{seen_[i] + n, status});
}

void FaultBackend::fail_randomly(double probability, std::uint64_t seed,
                                 std::initializer_list<VmmOp> ops) {
  fail_randomly(RandomFaults{probability, seed, std::vector<VmmOp>(ops), {}});
}

void FaultBackend::fail_randomly(const RandomFaults& faults) {
  std::lock_guard lock(mutex_);
  random_probability_ = std::clamp(faults.probability, 0.0, 1.0);
  rng_.seed(faults.seed);
  random_ops_.fill(faults.ops.empty());
  for (VmmOp op : faults.ops) {
    if (op != VmmOp::count) random_ops_[static_cast<std::size_t>(op)] = true;
  }
  random_statuses_.clear();
  for (Status s : faults.statuses) {
    if (s != Status::ok) random_statuses_.push_back(s);
  }
}

void FaultBackend::add_latency(VmmOp op, std::chrono::nanoseconds latency) {
  if (op == VmmOp::count) return;
  std::lock_guard lock(mutex_);
  latency_[static_cast<std::size_t>(op)] = latency;
}

void FaultBackend::clear() {
  std::lock_guard lock(mutex_);
  for (auto& a : armed_) a.clear();
  latency_.fill(std::chrono::nanoseconds::zero());
  random_ops_.fill(false);
  random_statuses_.clear();
  random_probability_ = 0;
}

std::uint64_t FaultBackend::injected(VmmOp op) const {
  if (op == VmmOp::count) return 0;
  std::lock_guard lock(mutex_);
  std::uint64_t n = 0;
  for (auto v : injected_[static_cast<std::size_t>(op)]) n += v;
  return n;
}

std::uint64_t FaultBackend::injected(VmmOp op, Status status) const {
  if (op == VmmOp::count) return 0;
  std::lock_guard lock(mutex_);
  return injected_[static_cast<std::size_t>(op)][static_cast<std::size_t>(status)];
}

std::uint64_t FaultBackend::injected(Status status) const {
  std::lock_guard lock(mutex_);
  std::uint64_t n = 0;
  for (const auto& by_status : injected_) n += by_status[static_cast<std::size_t>(status)];
  return n;
}

std::uint64_t FaultBackend::injected_total() const {
  std::lock_guard lock(mutex_);
  std::uint64_t n = 0;
  for (const auto& by_status : injected_)
    for (auto v : by_status) n += v;
  return n;
}

Status FaultBackend::intercept(VmmOp op) {
  const auto i = static_cast<std::size_t>(op);
  std::chrono::nanoseconds latency;
  Status status = Status::ok;
  std::uint64_t call;
  {
    std::lock_guard lock(mutex_);
    call = ++seen_[i];
    latency = latency_[i];
    auto& armed = armed_[i];
    auto hit =
        std::find_if(armed.begin(), armed.end(), [&](const Armed& a) { return a.call == call; });
    if (hit != armed.end()) {
      status = hit->status;
      armed.erase(hit);
    } else if (random_ops_[i] && random_probability_ > 0 &&
               std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < random_probability_) {
      status = random_statuses_.empty()
                   ? default_status(op)
                   : random_statuses_[std::uniform_int_distribution<std::size_t>(
                         0, random_statuses_.size() - 1)(rng_)];
    }
    if (status != Status::ok) ++injected_[i][static_cast<std::size_t>(status)];
  }
  detail::spin_for(latency);
  if (status != Status::ok) {
    detail::fail(status, "%s: injected fault in %s (call %llu of this operation): %s", name(),
                 vmm_op_name(op), static_cast<unsigned long long>(call), status_name(status));
  }
  return status;
}

Status FaultBackend::reserve(std::size_t size, DevicePtr* va) {
  Status s = intercept(VmmOp::reserve);
  return s == Status::ok ? BackendAdaptor::reserve(size, va) : s;
}

Status FaultBackend::unreserve(DevicePtr va, std::size_t size) {
  Status s = intercept(VmmOp::unreserve);
  return s == Status::ok ? BackendAdaptor::unreserve(va, size) : s;
}

Status FaultBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  Status s = intercept(VmmOp::create);
  return s == Status::ok ? BackendAdaptor::create_chunk(size, chunk) : s;
}

Status FaultBackend::release_chunk(ChunkHandle chunk) {
  Status s = intercept(VmmOp::release);
  return s == Status::ok ? BackendAdaptor::release_chunk(chunk) : s;
}

Status FaultBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  Status s = intercept(VmmOp::map);
  return s == Status::ok ? BackendAdaptor::map(va, size, chunk) : s;
}

Status FaultBackend::unmap(DevicePtr va, std::size_t size) {
  Status s = intercept(VmmOp::unmap);
  return s == Status::ok ? BackendAdaptor::unmap(va, size) : s;
}

Status FaultBackend::set_access(DevicePtr va, std::size_t size) {
  Status s = intercept(VmmOp::set_access);
  return s == Status::ok ? BackendAdaptor::set_access(va, size) : s;
}

Status FaultBackend::export_chunk(ChunkHandle chunk, int* fd) {
  Status s = intercept(VmmOp::export_chunk);
  return s == Status::ok ? BackendAdaptor::export_chunk(chunk, fd) : s;
}

Status FaultBackend::import_chunk(int fd, std::size_t size, ChunkHandle* chunk) {
  Status s = intercept(VmmOp::import_chunk);
  return s == Status::ok ? BackendAdaptor::import_chunk(fd, size, chunk) : s;
}

}  // namespace memlake
