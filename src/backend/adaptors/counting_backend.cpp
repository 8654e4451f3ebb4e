// CountingBackend: per-operation atomic counters (see counting_backend.hpp).
#include "backend/adaptors/counting_backend.hpp"

namespace memlake {

CountingBackend::CountingBackend(std::unique_ptr<Backend> upstream)
    : BackendAdaptor(std::move(upstream), "counting") {}

void CountingBackend::count(VmmOp op) {
  const auto i = static_cast<std::size_t>(op);
  calls_[i].fetch_add(1, std::memory_order_relaxed);
  if (CriticalPathScope::active()) critical_[i].fetch_add(1, std::memory_order_relaxed);
  if (WorkerThreadScope::active()) worker_[i].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t CountingBackend::sum(const Counters& c) {
  std::uint64_t n = 0;
  for (const auto& v : c) n += v.load(std::memory_order_relaxed);
  return n;
}

Status CountingBackend::reserve(std::size_t size, DevicePtr* va) {
  count(VmmOp::reserve);
  return BackendAdaptor::reserve(size, va);
}

Status CountingBackend::unreserve(DevicePtr va, std::size_t size) {
  count(VmmOp::unreserve);
  return BackendAdaptor::unreserve(va, size);
}

Status CountingBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  count(VmmOp::create);
  return BackendAdaptor::create_chunk(size, chunk);
}

Status CountingBackend::release_chunk(ChunkHandle chunk) {
  count(VmmOp::release);
  return BackendAdaptor::release_chunk(chunk);
}

Status CountingBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  count(VmmOp::map);
  return BackendAdaptor::map(va, size, chunk);
}

Status CountingBackend::unmap(DevicePtr va, std::size_t size) {
  count(VmmOp::unmap);
  return BackendAdaptor::unmap(va, size);
}

Status CountingBackend::set_access(DevicePtr va, std::size_t size) {
  count(VmmOp::set_access);
  return BackendAdaptor::set_access(va, size);
}

std::uint64_t CountingBackend::calls(VmmOp op) const {
  return calls_[static_cast<std::size_t>(op)].load(std::memory_order_relaxed);
}
std::uint64_t CountingBackend::critical_path(VmmOp op) const {
  return critical_[static_cast<std::size_t>(op)].load(std::memory_order_relaxed);
}
std::uint64_t CountingBackend::worker(VmmOp op) const {
  return worker_[static_cast<std::size_t>(op)].load(std::memory_order_relaxed);
}
std::uint64_t CountingBackend::total() const {
  return sum(calls_);
}
std::uint64_t CountingBackend::critical_path() const {
  return sum(critical_);
}
std::uint64_t CountingBackend::worker() const {
  return sum(worker_);
}

Status CountingBackend::stream_synchronize(StreamHandle stream) {
  if (CriticalPathScope::active()) host_waits_.fetch_add(1, std::memory_order_relaxed);
  return upstream().stream_synchronize(stream);
}

void CountingBackend::reset() {
  for (auto* c : {&calls_, &critical_, &worker_}) {
    for (auto& v : *c) v.store(0, std::memory_order_relaxed);
  }
  host_waits_.store(0, std::memory_order_relaxed);
}

}  // namespace memlake
