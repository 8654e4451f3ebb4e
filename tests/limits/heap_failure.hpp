// A heap that fails on demand, for tests of what happens when the process
// cannot allocate: this test binary replaces operator new, which throws
// std::bad_alloc on the calling thread while a HeapFailure is in scope
// there (after `allow` more successful allocations), or on the mapping
// worker's thread (a WorkerThreadScope) while fail_heap_on_worker_threads is
// on. malloc itself is left alone.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memlake::test {

class HeapFailure {
 public:
  explicit HeapFailure(std::size_t allow = 0);
  ~HeapFailure();
  HeapFailure(const HeapFailure&) = delete;
  HeapFailure& operator=(const HeapFailure&) = delete;
};

void fail_heap_on_worker_threads(bool on);
// std::bad_alloc thrown by the replaced operator new so far, on any thread.
std::uint64_t heap_failures();

}  // namespace memlake::test
