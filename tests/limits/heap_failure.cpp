// The replaced operator new behind HeapFailure (see heap_failure.hpp).
#include "heap_failure.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

#include "backend/adaptors/counting_backend.hpp"

namespace memlake::test {
namespace {

thread_local int t_failing = 0;          // HeapFailure scopes alive on this thread
thread_local std::size_t t_allowed = 0;  // allocations left before the first failure
std::atomic<bool> g_worker_failing{false};
std::atomic<std::uint64_t> g_failures{0};

bool should_fail() {
  if (t_failing > 0) {
    if (t_allowed == 0) return true;
    --t_allowed;
    return false;
  }
  return g_worker_failing.load(std::memory_order_relaxed) && WorkerThreadScope::active();
}

void* allocate(std::size_t n) {
  if (should_fail()) {
    g_failures.fetch_add(1, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}

void* allocate_aligned(std::size_t n, std::align_val_t a) {
  if (should_fail()) {
    g_failures.fetch_add(1, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
  void* p = nullptr;
  const auto alignment = std::max(static_cast<std::size_t>(a), sizeof(void*));
  if (::posix_memalign(&p, alignment, n != 0 ? n : 1) == 0) return p;
  throw std::bad_alloc();
}

}  // namespace

HeapFailure::HeapFailure(std::size_t allow) {
  ++t_failing;
  t_allowed = allow;
}

HeapFailure::~HeapFailure() {
  --t_failing;
}

void fail_heap_on_worker_threads(bool on) {
  g_worker_failing.store(on, std::memory_order_relaxed);
}

std::uint64_t heap_failures() {
  return g_failures.load(std::memory_order_relaxed);
}

}  // namespace memlake::test

void* operator new(std::size_t n) {
  return memlake::test::allocate(n);
}
void* operator new[](std::size_t n) {
  return memlake::test::allocate(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return memlake::test::allocate_aligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return memlake::test::allocate_aligned(n, a);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return memlake::test::allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return memlake::test::allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
