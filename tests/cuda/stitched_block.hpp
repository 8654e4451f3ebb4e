// A stitched block made on purpose, for the GPU tests: four one-chunk
// blocks in four segments, all freed, then an 8 MiB request. With chunks of
// one granule (max_chunk 2 MiB) and nothing else in the allocator, no
// segment's free space is half of 8 MiB, so none grows: the four chunks are
// mapped into one new range.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "memlake/allocator.hpp"

namespace memlake {

struct StitchedBlock {
  void* ptr = nullptr;  // 8 MiB
  Stats before;         // just before the request
  cudaError_t sync = cudaSuccess;
};

inline StitchedBlock allocate_stitched_block(Allocator& a) {
  constexpr std::size_t kChunk = std::size_t{2} << 20;
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(a.allocate(kChunk));
  for (void* p : ps) a.deallocate(p, kChunk);
  StitchedBlock s;
  s.sync = cudaDeviceSynchronize();
  a.process_pending_frees();
  s.before = a.stats();
  s.ptr = a.allocate(4 * kChunk);
  return s;
}

}  // namespace memlake
