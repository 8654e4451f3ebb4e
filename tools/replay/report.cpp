// What the table and the JSON of memlake-replay share (see report.hpp).
#include "replay/report.hpp"

#include <unordered_set>

namespace memlake {

std::uint64_t TraceReport::peak_live() const {
  if (memlake_policy && memlake)
    return static_cast<std::uint64_t>(memlake->stats.requested_bytes.peak);
  return gmlake.peak_requested;
}

std::uint64_t TraceReport::peak_reserved() const {
  if (memlake_policy && memlake)
    return static_cast<std::uint64_t>(memlake->stats.reserved_bytes.peak);
  return gmlake.peak_reserved;
}

std::uint64_t TraceReport::reference_live() const {
  return trace->meta.peak_live_bytes.value_or(trace_peak_live);
}

std::optional<std::int64_t> TraceReport::beyond_needed() const {
  const bool fits = memlake_policy && memlake ? memlake->fits : gmlake.fits;
  if (!fits || !needed || !needed->found) return std::nullopt;
  return static_cast<std::int64_t>(peak_reserved()) - static_cast<std::int64_t>(needed->bytes);
}

void describe_trace(const Trace& t, TraceReport& r) {
  r.trace = &t;
  r.trace_peak_live = t.computed_peak_live_bytes();
  std::unordered_set<std::uint64_t> streams;
  for (const Event& e : t.events) {
    (e.op == TraceOp::alloc ? r.allocs : r.frees)++;
    streams.insert(e.stream);
  }
  r.streams = streams.size();
}

}  // namespace memlake
