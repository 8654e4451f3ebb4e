// What memlake-replay prints about one trace: the readable table and the
// one-line JSON object (--json), both made from a TraceReport.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "replay/replay.hpp"

namespace memlake {

struct TraceReport {
  const Trace* trace = nullptr;
  bool memlake_policy = true;  // false: --policy gmlake (the simulation alone)
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t streams = 0;
  std::uint64_t trace_peak_live = 0;  // from the events
  double read_seconds = 0;
  std::optional<MemlakeResult> memlake;
  GmlakeResult gmlake;
  GmlakeOptions gmlake_options;
  std::optional<std::uint64_t> capacity;  // --capacity
  std::optional<CapacitySearch> min_capacity;
  std::optional<CapacitySearch> gmlake_min_capacity;
};

// "13.14 GiB"; MiB or KiB below a GiB, so that small traces read well.
std::string gib(std::uint64_t bytes);
void print_table(std::FILE* out, const TraceReport& r);
std::string json_line(const TraceReport& r);

}  // namespace memlake
