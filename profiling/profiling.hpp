// profiling/: observers of the allocator's events. Everything here only
// listens: it is installed as an Observer (include/memlake/observer.hpp) by
// an option and never changes what the allocator does; with nothing
// installed the allocator pays one predictable branch per event.
//
// Files here may include the public headers (include/memlake/), the trace
// format (src/trace/) and the common helpers (src/common/), nothing else of
// the allocator.
//
//   trace_recorder.*   the `record` option: every allocation and free as a
//                      memlake-trace for memlake-replay
#pragma once

#include "profiling/trace_recorder.hpp"
