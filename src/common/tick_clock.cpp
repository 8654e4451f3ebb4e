// The time-stamp counter's rate against steady_clock, and whether to use it.
#include "common/tick_clock.hpp"

#include <cmath>
#include <fstream>
#include <string>

namespace memlake {

namespace tick_clock_detail {

namespace {

// The kernel's clock source is "tsc" only where it found the counter
// invariant and synchronized across cores.
bool kernel_keeps_time_by_tsc() {
#if defined(__x86_64__)
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  return static_cast<bool>(in >> source) && source == "tsc";
#else
  return false;
#endif
}

}  // namespace

const bool uses_tsc = kernel_keeps_time_by_tsc();

namespace {

struct Origin {
  std::int64_t ticks;
  std::int64_t ns;
};

// Both clocks at load, after uses_tsc (defined above, so initialized
// first): the far end of the interval the rate is taken over.
const Origin origin{now_ticks(), now_ns()};

}  // namespace

}  // namespace tick_clock_detail

std::int64_t ticks_to_ns(std::int64_t ticks) {
  using namespace tick_clock_detail;
  if (!uses_tsc) return ticks;
  static const double ns_per_tick = [] {
    constexpr std::int64_t kInterval = 2'000'000;
    std::int64_t ns = now_ns();
    while (ns - origin.ns < kInterval) ns = now_ns();
    const std::int64_t elapsed_ticks = now_ticks() - origin.ticks;
    return elapsed_ticks > 0 ? static_cast<double>(ns - origin.ns) / elapsed_ticks : 1.0;
  }();
  return std::llround(static_cast<double>(ticks) * ns_per_tick);
}

}  // namespace memlake
