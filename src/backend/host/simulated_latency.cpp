#include "backend/host/simulated_latency.hpp"

#include <array>
#include <cmath>

namespace memlake::detail {

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::array<double, 3> kSizesMiB = {2, 16, 64};

struct Costs {
  std::array<double, 3> us;  // at kSizesMiB
};

Costs costs_of(VmmOp op) {
  switch (op) {
    case VmmOp::create:
      return {{9.64, 9.66, 11.76}};
    case VmmOp::release:
      return {{11.61, 22.55, 57.08}};
    case VmmOp::map:
      return {{0.67, 0.68, 0.80}};
    case VmmOp::set_access:
      return {{22.97, 23.42, 41.98}};
    case VmmOp::unmap:
      return {{15.61, 16.00, 25.08}};
    case VmmOp::reserve:
    case VmmOp::unreserve:
      return {{0.5, 0.5, 0.5}};  // address space: independent of the handles in it
    case VmmOp::export_chunk:
    case VmmOp::import_chunk:
    case VmmOp::count:
      break;
  }
  return {{0, 0, 0}};
}

}  // namespace

std::chrono::nanoseconds simulated_cost(VmmOp op, std::size_t handle_bytes) {
  const Costs c = costs_of(op);
  const double mib = static_cast<double>(handle_bytes) / static_cast<double>(kMiB);
  double us = c.us[0];
  if (mib > kSizesMiB[0]) {
    // The segment of the measured sizes `mib` falls in, or the last one
    // extended past 64 MiB.
    const std::size_t i = mib <= kSizesMiB[1] ? 0 : 1;
    const double slope = (c.us[i + 1] - c.us[i]) / (kSizesMiB[i + 1] - kSizesMiB[i]);
    us = c.us[i] + slope * (mib - kSizesMiB[i]);
  }
  return std::chrono::nanoseconds(std::llround(us * 1000.0));
}

}  // namespace memlake::detail
