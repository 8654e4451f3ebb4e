// The C view of memlake::Stats (memlake_stats, memlake.h): both structs are
// made from MEMLAKE_STAT_FIELDS, and this copies one into the other field by
// field.
#pragma once

#include "memlake/memlake.h"
#include "memlake/stats.hpp"

namespace memlake::c_api {

// Fills every statistic of `out`; leaves its version and size alone.
void fill_c_stats(const Stats& stats, memlake_stats* out);

}  // namespace memlake::c_api
