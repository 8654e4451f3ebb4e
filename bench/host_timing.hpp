// Host-side timing shared by the GPU probes (vmm_contention.cu,
// vmm_gpu_effects.cu): nanoseconds since a point, and quantiles of samples.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace memlake::bench {

using Clock = std::chrono::steady_clock;

inline double ns_since(Clock::time_point t) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

// The sample of rank q * (n - 1) in sorted order (q in 0..1); 0 for none.
inline double quantile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  return samples[static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1))];
}

}  // namespace memlake::bench
