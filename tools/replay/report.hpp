// What memlake-replay reports about one trace: the results of its replays
// (TraceReport), printed as a table for people (report_table.cpp) or as one
// JSON object per line (--json, report_json.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "replay/capacity.hpp"
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
  // The smallest capacity at which the policy replayed fits (--min-capacity's
  // answer, or the bounded search of --needed).
  std::optional<CapacitySearch> needed;

  // Of the policy replayed (memlake, or the GMLake simulation alone).
  std::uint64_t peak_live() const;
  std::uint64_t peak_reserved() const;
  // The live bytes that utilization is measured against for the baselines:
  // the trace's own number when it has one.
  std::uint64_t reference_live() const;
  // Memory taken beyond what was needed: peak reserved minus `needed`, when
  // the policy fits and the search found a capacity (negative when it needed
  // more under a limit than it took without one).
  std::optional<std::int64_t> beyond_needed() const;
};

// Counts the trace's allocations, frees and streams into `r`.
void describe_trace(const Trace& t, TraceReport& r);

void print_table(std::FILE* out, const TraceReport& r);
std::string json_line(const TraceReport& r);

}  // namespace memlake
