// Capacity searches of memlake-replay (see capacity.hpp).
#include "replay/capacity.hpp"

#include <algorithm>

namespace memlake {

namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t step) {
  return (std::max(v, step) + step - 1) / step * step;
}

// The largest whole step below `live`: the most that cannot fit.
std::uint64_t below(std::uint64_t live, std::uint64_t step) {
  return live > step ? round_up(live, step) - step : 0;
}

}  // namespace

std::uint64_t min_capacity_search(std::uint64_t known_fail, std::uint64_t known_fit,
                                  std::uint64_t step, const FitsAt& fits, int* tries) {
  std::uint64_t lo = known_fail / step;
  std::uint64_t hi = (known_fit + step - 1) / step;
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    ++*tries;
    if (fits(mid * step)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi * step;
}

CapacitySearch find_min_capacity(std::uint64_t start, std::uint64_t limit, std::uint64_t live,
                                 std::uint64_t step, const FitsAt& fits) {
  CapacitySearch c;
  std::uint64_t hi = round_up(start, step);
  for (;;) {
    ++c.tries;
    if (fits(hi)) {
      c.found = true;
      break;
    }
    if (hi >= limit) return c;
    hi = std::min(round_up(limit, step), round_up(hi + hi / 4, step));
  }
  const std::uint64_t fail = below(live, step);
  c.bytes = fail < hi ? min_capacity_search(fail, hi, step, fits, &c.tries) : hi;
  return c;
}

CapacitySearch find_needed_capacity(std::uint64_t live, std::uint64_t reserved, std::uint64_t limit,
                                    std::uint64_t step, const FitsAt& fits) {
  CapacitySearch c;
  const std::uint64_t top = round_up(reserved, step);
  const std::uint64_t fail = below(live, step);
  if (fail < top) {
    c.bytes = min_capacity_search(fail, top, step, fits, &c.tries);
    // Every capacity the bisection settled on below the top was replayed.
    if (c.bytes < top) {
      c.found = true;
      return c;
    }
  }
  ++c.tries;
  if (fits(top)) {
    c.found = true;
    c.bytes = top;
    return c;
  }
  // Under a limit the allocator needed more than it took without one.
  CapacitySearch above = find_min_capacity(top + step, limit, top + 1, step, fits);
  above.tries += c.tries;
  return above;
}

}  // namespace memlake
