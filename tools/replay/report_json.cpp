// memlake-replay --json: one object per trace per line, exact bytes and
// nanoseconds (see report.hpp; docs/replay.md lists the fields).
#include <string_view>
#include <type_traits>
#include <vector>

#include "replay/format.hpp"
#include "replay/report.hpp"

namespace memlake {

namespace {

std::string stats_json(const Stats& s) {
  Json j;
#define MEMLAKE_STAT_JSON(name, kind, help)                                                      \
  if (std::string_view(#kind) == "gauge") {                                                      \
    j.key(#name).raw(Json().key("current").i(s.name.current).key("peak").i(s.name.peak).done()); \
  } else {                                                                                       \
    j.key(#name).i(s.name.current);                                                              \
  }
  MEMLAKE_STAT_FIELDS(MEMLAKE_STAT_JSON)
#undef MEMLAKE_STAT_JSON
  return j.done();
}

std::string percentiles_json(const Percentiles& p) {
  Json j;
  j.key("count").u(p.count).key("median").u(p.median).key("p99").u(p.p99).key("max").u(p.max);
  return j.done();
}

std::string slowest_json(const Trace& t, const std::vector<SlowAlloc>& slowest) {
  std::string list;
  for (const SlowAlloc& a : slowest) {
    Json changed;
    for (const auto& [name, delta] : a.changed) changed.key(name).i(delta);
    const Event& e = t.events[a.event];
    Json j;
    j.key("line").u(t.lines[a.event]).key("bytes").u(e.bytes).key("stream").u(e.stream);
    j.key("ns").u(a.ns).key("path").str(rung_name(a.path));
    j.key("changed").raw(changed.done());
    if (!list.empty()) list += ',';
    list += j.done();
  }
  return "[" + list + "]";
}

std::string gmlake_json(const TraceReport& r) {
  const GmlakeResult& g = r.gmlake;
  const GmlakeCounters& c = g.counters;
  Json paths;
  paths.key("small_cached").u(c.path_small_cached).key("small_new").u(c.path_small_new);
  paths.key("block").u(c.path_block).key("sblock").u(c.path_sblock).key("stitch").u(c.path_stitch);
  paths.key("new").u(c.path_new).key("after_release").u(c.path_after_release);
  Json j;
  j.key("peak_reserved_bytes").u(g.peak_reserved).key("peak_live_bytes").u(g.peak_requested);
  j.key("utilization").d(ratio(g.peak_requested, g.peak_reserved));
  j.key("fits").b(g.fits);
  if (g.oom_event) {
    j.key("oom_event").u(*g.oom_event).key("oom_line").u(r.trace->lines[*g.oom_event]);
  }
  j.key("paths").raw(paths.done());
  j.key("stitches").u(c.path_stitch).key("stitched_chunks").u(c.stitched_chunks);
  j.key("sblock_reuses").u(c.path_sblock).key("sblocks_collected").u(c.sblocks_collected);
  j.key("segments_released").u(c.segments_released).key("ooms").u(c.ooms);
  j.key("vmm_calls")
      .u(c.vmm_calls())
      .key("cuda_malloc")
      .u(c.cuda_malloc)
      .key("cuda_free")
      .u(c.cuda_free);
  j.key("mem_create").u(c.mem_create).key("mem_map").u(c.mem_map).key("set_access").u(c.set_access);
  j.key("address_reserve").u(c.address_reserve).key("mem_unmap").u(c.mem_unmap);
  j.key("mem_release").u(c.mem_release).key("address_free").u(c.address_free);
  j.key("frag_limit_bytes")
      .u(r.gmlake_options.frag_limit)
      .key("reuse_limit")
      .d(r.gmlake_options.reuse_limit);
  j.key("seconds").d(g.seconds);
  return j.done();
}

template <class T>
void value_or_null(Json& j, const std::optional<T>& v) {
  if (!v) {
    j.null();
  } else if constexpr (std::is_signed_v<T>) {
    j.i(*v);
  } else {
    j.u(*v);
  }
}

template <class T, class F>
std::string json_array(const std::vector<T>& items, F&& value) {
  std::string list;
  for (const T& item : items) {
    if (!list.empty()) list += ',';
    list += value(item);
  }
  return "[" + list + "]";
}

std::string steps_json(const Trace& t, const std::vector<StepReport>& steps) {
  return json_array(steps, [&](const StepReport& st) {
    Json step;
    step.key("first_event").u(st.first_event).key("first_line").u(t.lines[st.first_event]);
    step.key("critical_path_vmm_calls").i(st.critical_path_vmm_calls);
    step.key("worker_vmm_calls").i(st.worker_vmm_calls);
    step.key("reserve_hits").i(st.reserve_hits).key("reserve_misses").i(st.reserve_misses);
    step.key("stitches").i(st.stitches);
    step.key("alloc_ns").raw(percentiles_json(st.alloc_ns));
    return step.done();
  });
}

// Peaks, utilization and the ratios to the baselines and the GMLake policy.
void add_peaks(Json& j, const TraceReport& r) {
  const Trace& t = *r.trace;
  const std::uint64_t reserved = r.peak_reserved();
  j.key("trace").str(t.name()).key("path").str(t.path);
  j.key("policy").str(r.memlake_policy ? "memlake" : "gmlake");
  j.key("events").u(t.events.size()).key("allocs").u(r.allocs).key("frees").u(r.frees);
  j.key("streams").u(r.streams);
  j.key("peak_live_bytes").u(r.peak_live()).key("peak_reserved_bytes").u(reserved);
  j.key("utilization").d(ratio(r.peak_live(), reserved));
  j.key("trace_peak_live_bytes").u(r.reference_live());
  Json baselines, ratios;
  for (const TraceBaseline& b : t.meta.baselines) {
    baselines.key(b.name).u(b.peak_reserved_bytes);
    ratios.key(b.name).d(ratio(reserved, b.peak_reserved_bytes));
  }
  j.key("baselines").raw(baselines.done()).key("baseline_ratios").raw(ratios.done());
  j.key("gmlake_peak_reserved_bytes").u(r.gmlake.peak_reserved);
  j.key("gmlake_ratio").d(ratio(reserved, r.gmlake.peak_reserved));
  j.key("gmlake").raw(gmlake_json(r));
}

// Nanoseconds per operation: all, by tenth, by step, after warm-up.
void add_memlake_timing(Json& j, const Trace& t, const MemlakeResult& m) {
  j.key("ns_per_op_median").u(m.all_ns.median).key("ns_per_op_p99").u(m.all_ns.p99);
  j.key("alloc_ns_median").u(m.alloc_ns.median).key("alloc_ns_p99").u(m.alloc_ns.p99);
  j.key("free_ns_median").u(m.free_ns.median).key("free_ns_p99").u(m.free_ns.p99);
  j.key("alloc_ns_p99_by_tenth").raw(json_array(m.alloc_ns_by_tenth, [](const Percentiles& p) {
    return std::to_string(p.p99);
  }));
  if (!m.steps.empty()) j.key("steps").raw(steps_json(t, m.steps));
  j.key("alloc_ns_after_warmup").raw(percentiles_json(m.alloc_ns_after_warmup));
  j.key("alloc_ns_p99_after_warmup").u(m.alloc_ns_after_warmup.p99);
  j.key("alloc_ns_max_after_warmup").u(m.alloc_ns_after_warmup.max);
  const std::optional<Percentiles>& less = m.alloc_ns_after_warmup_less_worker;
  j.key("alloc_ns_after_warmup_less_worker");
  if (less)
    j.raw(percentiles_json(*less));
  else
    j.null();
  j.key("alloc_ns_p99_after_warmup_less_worker");
  value_or_null(j, less ? std::optional(less->p99) : std::nullopt);
  j.key("alloc_ns_max_after_warmup_less_worker");
  value_or_null(j, less ? std::optional(less->max) : std::nullopt);
  j.key("allocator_ns_total").u(m.allocator_ns_total);
  j.key("allocator_ns_total_after_warmup");
  value_or_null(j, m.allocator_ns_total_after_warmup);
  Json by_path;
  for (int p = 0; p < kRungCount; ++p)
    by_path.key(rung_name(static_cast<Rung>(p)))
        .raw(percentiles_json(m.alloc_ns_after_warmup_by_path[p]));
  j.key("alloc_ns_after_warmup_by_rung").raw(by_path.done());
  j.key("allocs_mapping_after_warmup").u(m.allocs_mapping_after_warmup);
  j.key("allocs_mapping_reserved_after_warmup").u(m.allocs_mapping_reserved_after_warmup);
  if (!m.slowest.empty()) j.key("slowest_allocs").raw(slowest_json(t, m.slowest));
}

// VMM calls: all, on the critical path, after warm-up, by tenth.
void add_memlake_vmm(Json& j, const MemlakeResult& m) {
  const Stats& s = m.stats;
  j.key("vmm_calls").i(s.vmm_calls.current);
  j.key("critical_path_vmm_calls").i(s.critical_path_vmm_calls.current);
  j.key("critical_path_vmm_calls_after_warmup");
  value_or_null(j, after_warmup(m, &Stats::critical_path_vmm_calls));
  j.key("critical_path_vmm_ns").i(s.critical_path_vmm_ns.current);
  j.key("critical_path_vmm_ns_after_warmup");
  value_or_null(j, after_warmup(m, &Stats::critical_path_vmm_ns));
  j.key("worker_inline").b(m.worker_inline);
  j.key("worker_vmm_ns").i(s.worker_vmm_ns.current);
  j.key("worker_vmm_ns_after_warmup");
  value_or_null(j, after_warmup(m, &Stats::worker_vmm_ns));
  j.key("warmup_events").u(m.warmup_events);
  j.key("critical_path_vmm_calls_by_tenth")
      .raw(json_array(m.critical_path_by_tenth, [](std::int64_t c) { return std::to_string(c); }));
}

void add_memlake(Json& j, const TraceReport& r) {
  const Trace& t = *r.trace;
  const MemlakeResult& m = *r.memlake;
  const Stats& s = m.stats;
  j.key("backend").str(m.backend).key("capacity_bytes").u(m.capacity);
  j.key("granularity_bytes").u(m.granularity);
  add_memlake_timing(j, t, m);
  add_memlake_vmm(j, m);
  j.key("stitches").i(s.stitches.current).key("ooms").i(s.ooms.current);
  Json rungs;
#define MEMLAKE_RUNG_JSON(name, help) rungs.key(#name).i(s.rung_##name.current);
  MEMLAKE_RUNGS(MEMLAKE_RUNG_JSON)
#undef MEMLAKE_RUNG_JSON
  j.key("rungs").raw(rungs.done());
  j.key("fits").b(m.fits).key("events_replayed").u(m.events_replayed);
  if (m.oom_event) {
    j.key("oom_event").u(*m.oom_event).key("oom_line").u(t.lines[*m.oom_event]);
    j.key("oom_message").str(m.oom_message);
  }
  j.key("seconds").d(m.seconds);
  j.key("stats").raw(stats_json(s));
}

// With --policy gmlake the top-level counts describe the simulation.
void add_gmlake_alone(Json& j, const TraceReport& r) {
  const Trace& t = *r.trace;
  const GmlakeCounters& c = r.gmlake.counters;
  j.key("vmm_calls").u(c.vmm_calls()).key("stitches").u(c.path_stitch).key("ooms").u(c.ooms);
  j.key("fits").b(r.gmlake.fits).key("events_replayed").u(r.gmlake.events_replayed);
  if (r.gmlake.oom_event) {
    j.key("oom_event").u(*r.gmlake.oom_event).key("oom_line").u(t.lines[*r.gmlake.oom_event]);
  }
}

void add_search(Json& j, const TraceReport& r, const char* name,
                const std::optional<CapacitySearch>& c) {
  if (!c) return;
  j.key(std::string(name) + "_bytes");
  c->found ? j.u(c->bytes) : j.null();
  j.key(std::string(name) + "_ratio");
  c->found ? j.d(ratio(c->bytes, r.reference_live())) : j.null();
  j.key(std::string(name) + "_tries").u(static_cast<std::uint64_t>(c->tries));
}

}  // namespace

std::string json_line(const TraceReport& r) {
  Json j;
  add_peaks(j, r);
  if (r.memlake_policy && r.memlake) {
    add_memlake(j, r);
  } else {
    add_gmlake_alone(j, r);
  }
  if (r.capacity) j.key("capacity_limit_bytes").u(*r.capacity);
  add_search(j, r, "min_capacity", r.min_capacity);
  add_search(j, r, "gmlake_min_capacity", r.gmlake_min_capacity);
  if (r.needed) {
    add_search(j, r, "needed_capacity", r.needed);
    j.key("beyond_needed_bytes");
    value_or_null(j, r.beyond_needed());
  }
  j.key("read_seconds").d(r.read_seconds);
  return j.done();
}

}  // namespace memlake
