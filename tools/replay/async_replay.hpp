// The same trace through cudaMallocAsync/cudaFreeAsync on the device's
// default pool (release threshold at its maximum, so the pool keeps what it
// gets), trace streams mapped to streams of their own: the stock
// stream-ordered allocator measured in the same run as memlake.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "replay/replay.hpp"

namespace memlake {

struct AsyncResult {
  bool ran = false;
  std::string why_not;              // when !ran
  std::uint64_t reserved_high = 0;  // cudaMemPoolAttrReservedMemHigh
  std::uint64_t used_high = 0;      // cudaMemPoolAttrUsedMemHigh
  Percentiles alloc_ns, free_ns;
  Percentiles alloc_ns_after_warmup;  // allocations after the warm-up events, as memlake's
};

AsyncResult replay_cuda_async(const ReplaySetup& setup, int device);

// What the table and the JSON say about it beside memlake's peak reserved
// (0: memlake was not replayed).
void print_cuda_async(std::FILE* out, const AsyncResult& a, std::uint64_t memlake_peak);
// ,"cuda_async_measured":{...} (or null when it did not run), to append to
// the trace's JSON object.
std::string cuda_async_json_member(const AsyncResult& a, std::uint64_t memlake_peak);

}  // namespace memlake
