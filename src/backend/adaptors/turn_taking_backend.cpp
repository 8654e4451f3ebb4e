// TurnTakingBackend: background VMM calls wait for the allocating thread's
// turn to end (see turn_taking_backend.hpp).
#include "backend/adaptors/turn_taking_backend.hpp"

#include "common/timing.hpp"

namespace memlake {

// Both sides use sequentially consistent operations on `held_` and
// `waiting_`: a releaser that reads no waiter was ordered before the waiter's
// own read of `held_`, which then sees the release.
void DriverTurns::wait_for_turn() {
  if (held_.load(std::memory_order_seq_cst) == 0) return;
  const std::int64_t start = now_ns();
  waiting_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock lock(mutex_);
    free_.wait(lock, [&] { return held_.load(std::memory_order_seq_cst) == 0; });
  }
  waiting_.fetch_sub(1, std::memory_order_seq_cst);
  waits_.fetch_add(1, std::memory_order_relaxed);
  wait_ns_.fetch_add(static_cast<std::uint64_t>(now_ns() - start), std::memory_order_relaxed);
}

void DriverTurns::release() {
  if (held_.fetch_sub(1, std::memory_order_seq_cst) != 1) return;
  if (waiting_.load(std::memory_order_seq_cst) == 0) return;
  // Taking the mutex orders this notification after the waiter's check of
  // `held_` (made under it), so the wake-up cannot be lost.
  std::lock_guard lock(mutex_);
  free_.notify_all();
}

TurnTakingBackend::TurnTakingBackend(std::unique_ptr<Backend> upstream)
    : BackendAdaptor(std::move(upstream), "turn-taking") {}

Status TurnTakingBackend::reserve(std::size_t size, DevicePtr* va) {
  give_way();
  return BackendAdaptor::reserve(size, va);
}

Status TurnTakingBackend::unreserve(DevicePtr va, std::size_t size) {
  give_way();
  return BackendAdaptor::unreserve(va, size);
}

Status TurnTakingBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  give_way();
  return BackendAdaptor::create_chunk(size, chunk);
}

Status TurnTakingBackend::release_chunk(ChunkHandle chunk) {
  give_way();
  return BackendAdaptor::release_chunk(chunk);
}

Status TurnTakingBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  give_way();
  return BackendAdaptor::map(va, size, chunk);
}

Status TurnTakingBackend::unmap(DevicePtr va, std::size_t size) {
  give_way();
  return BackendAdaptor::unmap(va, size);
}

Status TurnTakingBackend::set_access(DevicePtr va, std::size_t size) {
  give_way();
  return BackendAdaptor::set_access(va, size);
}

}  // namespace memlake
