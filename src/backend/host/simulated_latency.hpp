// What each VMM call costs on an H200 (traces/vmm_costs.txt, medians for
// handles of 2, 16 and 64 MiB), for HostBackendOptions::simulate_latency.
//
// SetAccess, unmap and release cost more for a larger handle, though far
// less per byte: SetAccess over one 64 MiB handle takes 42 us where 32
// handles of 2 MiB take 735 us. So a run on the CPU weighs few large handles
// against many small ones as the GPU does. Between the measured sizes the
// cost is interpolated; past 64 MiB it grows on the 16-64 MiB slope (a
// 1 GiB cudaMalloc, 106 us, and cudaFree, 544 us, are of that order); below
// 2 MiB it is the 2 MiB cost.
#pragma once

#include <chrono>
#include <cstddef>

#include "backend/backend.hpp"

namespace memlake::detail {

std::chrono::nanoseconds simulated_cost(VmmOp op, std::size_t handle_bytes);

}  // namespace memlake::detail
