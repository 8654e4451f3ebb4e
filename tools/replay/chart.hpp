// memlake-replay --svg: memory over time of one trace, drawn from its
// report (live bytes, memlake's and the GMLake policy's reserved bytes, the
// baselines' peaks).
#pragma once

#include <cstddef>
#include <string>

#include "replay/report.hpp"

namespace memlake {

// The chart's file: `base` itself for a single trace; with several, the
// trace's name (made safe for a file name) before ".svg".
std::string svg_path(const std::string& base, const std::string& name, bool several);
// The same for any output file whose name ends with `ext` (".html", ".json").
std::string per_trace_path(const std::string& base, const std::string& name, bool several,
                           const std::string& ext);

// Writes the chart of `r` with at most `points` points per series, x being
// the event index or (`x_is_time`) the trace's timestamps. Throws
// std::runtime_error naming the file when it cannot be written.
void write_chart(const std::string& path, const TraceReport& r, bool x_is_time, std::size_t points);

}  // namespace memlake
