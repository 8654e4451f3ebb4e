// Updating Stats fields (the allocator and the lake update them under the
// allocator's lock), and the kinds of MEMLAKE_STAT_FIELDS as types, so that
// X-macro expansions can pick an overload by kind: stat_kind::gauge{}.
#pragma once

#include <cstddef>
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

// A block handed out (`sign` 1) or freed (-1), in the totals that count
// every block, graph pools' included: allocs or frees, live and requested
// bytes, live blocks.
inline void count_block(Stats& s, int sign, std::size_t size, std::size_t requested) {
  ++(sign > 0 ? s.allocs : s.frees).current;
  gauge(s.live_bytes, sign * static_cast<std::int64_t>(size));
  gauge(s.requested_bytes, sign * static_cast<std::int64_t>(requested));
  gauge(s.live_blocks, sign);
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
