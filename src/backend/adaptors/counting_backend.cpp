// CountingBackend: per-operation atomic counters (see counting_backend.hpp).
#include "backend/adaptors/counting_backend.hpp"

#include "common/timing.hpp"

namespace memlake {

CountingBackend::CountingBackend(std::unique_ptr<Backend> upstream)
    : BackendAdaptor(std::move(upstream), "counting") {}

namespace {
// Runs `call`, adding its host nanoseconds to `ns` when there is one.
template <typename Call>
Status timed(std::atomic<std::uint64_t>* ns, Call call) {
  if (ns == nullptr) return call();
  const std::int64_t start = now_ns();
  const Status s = call();
  ns->fetch_add(static_cast<std::uint64_t>(now_ns() - start), std::memory_order_relaxed);
  return s;
}
}  // namespace

template <typename Call>
Status CountingBackend::vmm(VmmOp op, Call call) {
  const auto i = static_cast<std::size_t>(op);
  calls_[i].fetch_add(1, std::memory_order_relaxed);
  std::atomic<std::uint64_t>* ns = nullptr;
  if (CriticalPathScope::active()) {
    critical_[i].fetch_add(1, std::memory_order_relaxed);
    ns = &critical_vmm_ns_;
  }
  if (WorkerThreadScope::active()) {
    worker_[i].fetch_add(1, std::memory_order_relaxed);
    ns = &worker_vmm_ns_;
  }
  const Status s = timed(ns, call);
  if (s != Status::ok)
    refusals_[i][static_cast<std::size_t>(s)].fetch_add(1, std::memory_order_relaxed);
  return s;
}

template <typename Call>
Status CountingBackend::event(Call call) {
  return timed(CriticalPathScope::active() ? &critical_event_ns_ : nullptr, call);
}

std::uint64_t CountingBackend::sum(const Counters& c) {
  std::uint64_t n = 0;
  for (const auto& v : c) n += v.load(std::memory_order_relaxed);
  return n;
}

Status CountingBackend::reserve(std::size_t size, DevicePtr* va) {
  return vmm(VmmOp::reserve, [&] { return BackendAdaptor::reserve(size, va); });
}

Status CountingBackend::unreserve(DevicePtr va, std::size_t size) {
  return vmm(VmmOp::unreserve, [&] { return BackendAdaptor::unreserve(va, size); });
}

Status CountingBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  return vmm(VmmOp::create, [&] { return BackendAdaptor::create_chunk(size, chunk); });
}

Status CountingBackend::release_chunk(ChunkHandle chunk) {
  return vmm(VmmOp::release, [&] { return BackendAdaptor::release_chunk(chunk); });
}

Status CountingBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  return vmm(VmmOp::map, [&] { return BackendAdaptor::map(va, size, chunk); });
}

Status CountingBackend::unmap(DevicePtr va, std::size_t size) {
  return vmm(VmmOp::unmap, [&] { return BackendAdaptor::unmap(va, size); });
}

Status CountingBackend::set_access(DevicePtr va, std::size_t size) {
  return vmm(VmmOp::set_access, [&] { return BackendAdaptor::set_access(va, size); });
}

Status CountingBackend::export_chunk(ChunkHandle chunk, int* fd) {
  return vmm(VmmOp::export_chunk, [&] { return BackendAdaptor::export_chunk(chunk, fd); });
}

Status CountingBackend::import_chunk(int fd, std::size_t size, ChunkHandle* chunk) {
  return vmm(VmmOp::import_chunk, [&] { return BackendAdaptor::import_chunk(fd, size, chunk); });
}

Status CountingBackend::event_record(EventHandle e, StreamHandle stream) {
  return event([&] { return BackendAdaptor::event_record(e, stream); });
}

Status CountingBackend::event_query(EventHandle e) {
  return event([&] { return BackendAdaptor::event_query(e); });
}

Status CountingBackend::stream_wait_event(StreamHandle stream, EventHandle e) {
  return event([&] { return BackendAdaptor::stream_wait_event(stream, e); });
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
std::uint64_t CountingBackend::refusals() const {
  std::uint64_t n = 0;
  for (const auto& by_status : refusals_)
    for (const auto& v : by_status) n += v.load(std::memory_order_relaxed);
  return n;
}
std::uint64_t CountingBackend::refusals(Status status) const {
  std::uint64_t n = 0;
  for (const auto& by_status : refusals_)
    n += by_status[static_cast<std::size_t>(status)].load(std::memory_order_relaxed);
  return n;
}
std::uint64_t CountingBackend::refusals(VmmOp op, Status status) const {
  if (op == VmmOp::count) return 0;
  return refusals_[static_cast<std::size_t>(op)][static_cast<std::size_t>(status)].load(
      std::memory_order_relaxed);
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

Status CountingBackend::device_synchronize() {
  if (CriticalPathScope::active()) host_waits_.fetch_add(1, std::memory_order_relaxed);
  return upstream().device_synchronize();
}

void CountingBackend::reset() {
  for (auto* c : {&calls_, &critical_, &worker_}) {
    for (auto& v : *c) v.store(0, std::memory_order_relaxed);
  }
  for (auto& by_status : refusals_)
    for (auto& v : by_status) v.store(0, std::memory_order_relaxed);
  for (auto* v : {&host_waits_, &critical_vmm_ns_, &worker_vmm_ns_, &critical_event_ns_})
    v->store(0, std::memory_order_relaxed);
}

}  // namespace memlake
