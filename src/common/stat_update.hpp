// Updating Stats fields (the allocator and the lake update them under the
// allocator's lock), and the kinds of MEMLAKE_STAT_FIELDS as types, so that
// X-macro expansions can pick an overload by kind: stat_kind::gauge{}.
#pragma once

#include <cstdint>

#include "memlake/observer.hpp"
#include "memlake/stats.hpp"

namespace memlake {

namespace stat_kind {
struct gauge {};
struct counter {};
}  // namespace stat_kind

// A gauge moves by `delta`; its peak is the highest value it reached.
inline void gauge(StatValue& v, std::int64_t delta) {
  v.current += delta;
  if (v.current > v.peak) v.peak = v.current;
}

// The rung_<name> counter of a rung.
inline StatValue& rung_stat(Stats& s, Rung r) {
  switch (r) {
#define MEMLAKE_RUNG_STAT(name, help) \
  case Rung::name:                    \
    return s.rung_##name;
    MEMLAKE_RUNGS(MEMLAKE_RUNG_STAT)
#undef MEMLAKE_RUNG_STAT
  }
  return s.rung_reclaim_retry;
}

}  // namespace memlake
