// The memory-over-time chart of memlake-replay (see chart.hpp).
#include "replay/chart.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <vector>

#include "replay/format.hpp"
#include "replay/svg.hpp"

namespace memlake {

std::string per_trace_path(const std::string& base, const std::string& name, bool several,
                           const std::string& ext) {
  if (!several) return base;
  std::string safe = name;
  for (char& c : safe) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  if (base.size() > ext.size() && base.ends_with(ext)) {
    return base.substr(0, base.size() - ext.size()) + "-" + safe + ext;
  }
  return base + "-" + safe + ext;
}

std::string svg_path(const std::string& base, const std::string& name, bool several) {
  return per_trace_path(base, name, several, ".svg");
}

void write_chart(const std::string& path, const TraceReport& r, bool x_is_time,
                 std::size_t points) {
  const Trace& t = *r.trace;
  const std::size_t n = t.events.size();
  const std::size_t bucket = Sampler(n, points).bucket_size();
  const std::size_t buckets = (n + bucket - 1) / bucket;
  SvgChart chart;
  chart.title = t.name() + ": memory over time";
  chart.x_label = x_is_time ? "time (s)" : "event";
  chart.x_scale = x_is_time ? 1e-6 : 1.0;
  chart.x_min = x_is_time && n ? static_cast<double>(t.events.front().ts_us) : 0.0;
  for (std::size_t k = 0; k < buckets; ++k) {
    const std::size_t last = std::min(n, (k + 1) * bucket) - 1;
    chart.x.push_back(x_is_time ? static_cast<double>(t.events[last].ts_us)
                                : static_cast<double>(last));
  }
  // A replay that ran out of memory has no points past its last event.
  auto cut = [&](std::vector<std::uint64_t> v, std::size_t replayed) {
    v.resize(std::min(v.size(), (replayed + bucket - 1) / bucket));
    return v;
  };
  chart.series.push_back({"live (requested) bytes", "#444444", live_series(t, points)});
  if (r.memlake) {
    chart.series.push_back({"memlake reserved", "#2ca02c",
                            cut(r.memlake->reserved_series, r.memlake->events_replayed)});
  }
  chart.series.push_back({"GMLake policy reserved", "#ff7f0e",
                          cut(r.gmlake.reserved_series, r.gmlake.events_replayed)});
  const char* colors[] = {"#d62728", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#e377c2"};
  std::size_t ci = 0;
  for (const TraceBaseline& b : t.meta.baselines) {
    chart.lines.push_back({b.name + " peak reserved (" + gib(b.peak_reserved_bytes) + ")",
                           colors[ci++ % std::size(colors)], b.peak_reserved_bytes});
  }
  write_svg(path, chart);
}

}  // namespace memlake
