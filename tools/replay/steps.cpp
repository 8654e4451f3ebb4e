#include "replay/steps.hpp"

#include <algorithm>
#include <cstdint>

#include "replay/replay.hpp"

namespace memlake {

namespace {

// Within this share of the way from the low to the peak: back at the low.
constexpr double kLowShare = 0.1;
// A step climbs at least this share of the way.
constexpr double kHighShare = 0.5;
constexpr std::size_t kMinSteps = 3;

}  // namespace

std::vector<std::size_t> detect_steps(const Trace& trace) {
  const std::size_t n = trace.events.size();
  if (n < 10) return {};
  const std::vector<std::uint64_t> live = live_series(trace, n);  // one point per event
  const auto middle_begin = live.begin() + static_cast<std::ptrdiff_t>(n / 10);
  const auto middle_end = live.begin() + static_cast<std::ptrdiff_t>(n - n / 10);
  const std::uint64_t low = *std::min_element(middle_begin, middle_end);
  const std::uint64_t peak = *std::max_element(live.begin(), live.end());
  if (peak <= low) return {};
  const double span = static_cast<double>(peak - low);
  const double near_low = static_cast<double>(low) + kLowShare * span;
  const double high = static_cast<double>(low) + kHighShare * span;
  std::vector<std::size_t> starts;
  bool climbed = false;
  for (std::size_t i = 0; i + 1 < n; ++i) {
    const auto v = static_cast<double>(live[i]);
    if (v >= high) climbed = true;
    if (climbed && v <= near_low) {
      starts.push_back(i + 1);
      climbed = false;
    }
  }
  // A return to the low that only frees follow (the end of the run) begins
  // no step.
  const auto last_alloc = std::find_if(trace.events.rbegin(), trace.events.rend(),
                                       [](const Event& e) { return e.op == TraceOp::alloc; });
  const auto allocs_end = static_cast<std::size_t>(trace.events.rend() - last_alloc);
  while (!starts.empty() && starts.back() >= allocs_end) starts.pop_back();
  if (starts.size() + 1 < kMinSteps) return {};
  return starts;
}

}  // namespace memlake
