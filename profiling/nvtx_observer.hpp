// NvtxObserver: the `nvtx` option. What the allocator does, as NVTX (domain
// "memlake", registered string names) for Nsight Systems and
// compute-sanitizer:
//
// - ranges (push/pop on the thread doing the work) around slow work: an
//   allocation that found no free memory already mapped ("allocate: map or
//   create", payload: bytes), and a worker job ("mapping worker job");
// - markers for out of memory (payload: bytes asked), reclaim (payload:
//   bytes released), each worker job's kind, and the rung that served an
//   allocation that took the slow path;
// - the NVTX memory API: every mapped range is a sub-allocator heap
//   (nvtxMemHeapRegister over it, unregistered when it is unmapped; an
//   extension replaces the heap by one over the whole range), and every live
//   block a region of its heap (nvtxMemRegionsRegister on allocation,
//   nvtxMemRegionsUnregister on free), for a tool that takes heaps over
//   VMM-mapped ranges (compute-sanitizer 2025.3 refuses them: it takes heaps
//   over cudaMalloc/cuMemAlloc allocations only; docs/profiling.md).
//
// Only this file's .cpp includes the NVTX headers (NVTX3, header-only; the
// calls cost a branch each until a tool injects itself; when the first heap
// registration returns no heap, without a tool or with one that refuses it,
// the observer stops keeping heaps and blocks). Built where the nvtx3 headers are found
// (MEMLAKE_HAVE_NVTX).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "memlake/observer.hpp"
#include "profiling/block_table.hpp"

namespace memlake {

class NvtxObserver final : public Observer {
 public:
  explicit NvtxObserver(int device);
  // Unregisters the heaps still registered (their regions go with them).
  ~NvtxObserver() override;
  NvtxObserver(const NvtxObserver&) = delete;
  NvtxObserver& operator=(const NvtxObserver&) = delete;

  void on_alloc(const AllocEvent& e) override;
  void on_free(const FreeEvent& e) override;
  void on_map(const MapEvent& e) override;
  void on_unmap(const MapEvent& e) override;
  void on_reclaim(std::size_t released) override;
  void on_worker_job(const WorkerJobEvent& e) override;
  void on_oom(std::size_t bytes, void* stream) override;
  void on_slow_begin(SlowWork work, std::size_t bytes, void* stream) override;
  void on_slow_end(SlowWork work) override;

  // Whether this build has NVTX (the option is refused without it).
  static bool available();

 private:
  struct Heap {
    std::uint64_t bytes = 0;
    void* handle = nullptr;  // nvtxMemHeapHandle_t
  };
  // Registers the heap alone: the caller registers the blocks in it.
  void register_heap(std::uint64_t va, std::uint64_t bytes);
  void unregister_heap(std::map<std::uint64_t, Heap>::iterator it);
  // Registers the live blocks inside [va, va + bytes) in `heap` (all live
  // blocks are looked at: it runs when ranges change, not per block).
  void register_blocks(void* heap, std::uint64_t va, std::uint64_t bytes);
  void register_block(void* heap, std::uint64_t ptr, std::uint64_t bytes);
  std::map<std::uint64_t, Heap>::iterator heap_of(std::uint64_t ptr);

  // Guarded by the allocator's lock, under which every callback runs.
  int device_;
  bool memory_api_ = true;               // false once NVTX said no tool listens
  std::map<std::uint64_t, Heap> heaps_;  // by base address, disjoint
  BlockTable<std::uint64_t> live_;       // block -> size
};

}  // namespace memlake
