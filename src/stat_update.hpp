// Updating Stats fields (the allocator and the lake update them under the
// allocator's lock), and the kinds of MEMLAKE_STAT_FIELDS as types, so that
// X-macro expansions can pick an overload by kind: stat_kind::gauge{}.
#pragma once

#include <cstdint>

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

}  // namespace memlake
