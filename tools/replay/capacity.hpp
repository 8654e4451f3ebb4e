// The smallest capacity at which a trace fits, found by replaying it at
// several capacities (each try a fresh allocator): the full search of
// --min-capacity, and the bounded one behind "memory taken beyond what was
// needed". Both assume that more capacity never hurts, and the capacity they
// report was itself replayed and fits.
#pragma once

#include <cstdint>
#include <functional>

namespace memlake {

using FitsAt = std::function<bool(std::uint64_t capacity)>;

struct CapacitySearch {
  std::uint64_t bytes = 0;  // smallest capacity found that fits
  int tries = 0;
  bool found = false;
};

// The smallest capacity that fits: from `start` (rounded up to `step`) grow
// by 25% until it fits or passes `limit`, then bisect down to just below
// `live` (which cannot fit).
CapacitySearch find_min_capacity(std::uint64_t start, std::uint64_t limit, std::uint64_t live,
                                 std::uint64_t step, const FitsAt& fits);

// Smallest capacity, in steps of `step`, at which `fits` holds, by binary
// search between `known_fail` (does not fit; may be 0) and `known_fit`
// (fits). `tries` counts the runs.
std::uint64_t min_capacity_search(std::uint64_t known_fail, std::uint64_t known_fit,
                                  std::uint64_t step, const FitsAt& fits, int* tries);

// The smallest capacity that fits, knowing that the trace once held at most
// `reserved` bytes and never more than `live` of them were live: a bisection
// in steps of `step` between `live` (rounded up to a step, the least that
// can fit) and `reserved`, about log2((reserved - live) / step) tries. The
// upper end is replayed too when nothing below it fits; if it does not fit
// either (a limit changed what the allocator did), the search grows from
// there like find_min_capacity, up to `limit`.
CapacitySearch find_needed_capacity(std::uint64_t live, std::uint64_t reserved, std::uint64_t limit,
                                    std::uint64_t step, const FitsAt& fits);

}  // namespace memlake
