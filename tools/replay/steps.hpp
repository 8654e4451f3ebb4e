// Where a trace's training steps begin, found from its live bytes alone
// (traces carry no step markers): a step ends where live bytes come back
// down near their low after climbing at least halfway to their peak. The
// low is taken between the first and the last tenth of the trace, so that
// neither the model's construction nor the frees at the end set it.
#pragma once

#include <cstddef>
#include <vector>

#include "trace/trace.hpp"

namespace memlake {

// Event indices at which a step begins (the event after each return to the
// low), ascending; empty when fewer than three steps are found, which is no
// repeating pattern to speak of.
std::vector<std::size_t> detect_steps(const Trace& trace);

}  // namespace memlake
