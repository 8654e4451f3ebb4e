// Allocator statistics: memlake::Stats holds every field of
// MEMLAKE_STAT_FIELDS (memlake/stat_fields.h), gauges with their peak.
#pragma once

#include <cstdint>
#include <string>

#include "memlake/stat_fields.h"

namespace memlake {

struct StatValue {
  std::int64_t current = 0;
  std::int64_t peak = 0;
};

// A snapshot of all statistics. Counters use `current` only (peak == current).
struct Stats {
  static constexpr int kVersion = 7;
#define MEMLAKE_STAT_MEMBER(name, kind, help) StatValue name;
  MEMLAKE_STAT_FIELDS(MEMLAKE_STAT_MEMBER)
#undef MEMLAKE_STAT_MEMBER

  // {"version":1,"live_bytes":{"current":..,"peak":..},...}
  std::string to_json() const;
};

}  // namespace memlake
