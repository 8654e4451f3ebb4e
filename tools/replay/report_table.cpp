// memlake-replay's table: one block of lines per trace, sizes in GiB with two
// decimals (see report.hpp).
#include <cstdio>
#include <string>
#include <vector>

#include "replay/format.hpp"
#include "replay/report.hpp"

namespace memlake {

namespace {

void line(std::FILE* out, const std::string& label, const std::string& text) {
  std::fprintf(out, "  %s %s\n", pad(label, 16).c_str(), text.c_str());
}

template <class T, class F>
std::string joined(const std::vector<T>& items, F&& value) {
  std::string row;
  for (const T& item : items) {
    if (!row.empty()) row += ' ';
    row += count(static_cast<std::uint64_t>(value(item)));
  }
  return row;
}

// The trace: its name, events, streams, peak live; the backend replayed on.
void print_trace(std::FILE* out, const TraceReport& r) {
  const Trace& t = *r.trace;
  const std::uint64_t live = r.peak_live();
  std::fprintf(out, "%s  (%s)\n", t.name().c_str(), t.path.c_str());
  line(out, "events",
       count(t.events.size()) + ": " + count(r.allocs) + " allocs, " + count(r.frees) + " frees, " +
           count(r.streams) + (r.streams == 1 ? " stream" : " streams"));
  std::string live_text = gib(live) + " (" + count(live) + " bytes";
  if (t.meta.peak_live_bytes) {
    live_text += *t.meta.peak_live_bytes == live
                     ? ", as the trace header says"
                     : "; trace header: " + count(*t.meta.peak_live_bytes);
  }
  line(out, "peak live", live_text + ")");
  if (r.memlake_policy && r.memlake) {
    line(out, "backend",
         r.memlake->backend + ", capacity " + gib(r.memlake->capacity) + ", granularity " +
             mib(r.memlake->granularity));
  }
}

// One row per allocator: the policy replayed, the baselines of the trace
// header, the GMLake policy beside memlake.
void print_peaks(std::FILE* out, const TraceReport& r) {
  const Trace& t = *r.trace;
  const std::uint64_t reserved = r.peak_reserved();
  std::fprintf(
      out, "\n  %s %s %s %s\n", pad("allocator", 26).c_str(),
      pad("peak reserved", 14, true).c_str(), pad("utilization", 12, true).c_str(),
      pad(std::string(r.memlake_policy ? "memlake" : "gmlake") + " / it", 14, true).c_str());
  auto row = [&](const std::string& name, std::uint64_t bytes, std::uint64_t live_bytes,
                 bool with_ratio) {
    std::fprintf(out, "  %s %s %s %s\n", pad(name, 26).c_str(), pad(gib(bytes), 14, true).c_str(),
                 pad(fmt("%.3f", ratio(live_bytes, bytes)), 12, true).c_str(),
                 with_ratio ? pad(fmt("%.3f", ratio(reserved, bytes)), 14, true).c_str() : "");
  };
  row(r.memlake_policy ? "memlake" : "gmlake policy", reserved, r.peak_live(), false);
  for (const TraceBaseline& b : t.meta.baselines) {
    row(b.name + " (trace header)", b.peak_reserved_bytes, r.reference_live(), true);
  }
  if (t.meta.baselines.empty()) std::fprintf(out, "  (the trace header names no baselines)\n");
  if (r.memlake_policy) row("gmlake policy", r.gmlake.peak_reserved, r.gmlake.peak_requested, true);
  std::fprintf(out, "\n");
}

void print_ns_per_op(std::FILE* out, const MemlakeResult& m) {
  std::fprintf(out, "  %s %s %s %s %s\n", pad("ns per op", 16).c_str(),
               pad("count", 10, true).c_str(), pad("median", 8, true).c_str(),
               pad("p99", 10, true).c_str(), pad("max", 12, true).c_str());
  auto ns_row = [&](const char* name, const Percentiles& p) {
    std::fprintf(out, "    %s %s %s %s %s\n", pad(name, 14).c_str(),
                 pad(count(p.count), 10, true).c_str(), pad(count(p.median), 8, true).c_str(),
                 pad(count(p.p99), 10, true).c_str(), pad(count(p.max), 12, true).c_str());
  };
  ns_row("allocate", m.alloc_ns);
  ns_row("deallocate", m.free_ns);
  ns_row("all", m.all_ns);
  ns_row("warm allocate", m.alloc_ns_after_warmup);
}

std::string ms(std::uint64_t ns) {
  return fmt("%.2f ms", static_cast<double>(ns) / 1e6);
}

template <class T>
std::string ms_or_na(const std::optional<T>& ns) {
  return ns ? ms(static_cast<std::uint64_t>(*ns)) : std::string("n/a");
}

// Host time inside the allocator on the replaying thread, the part of it in
// VMM calls, and, with the worker inline, the part in the worker's calls.
void print_allocator_time(std::FILE* out, const MemlakeResult& m) {
  std::string worker;
  if (m.worker_inline) {
    worker = "; " + ms(static_cast<std::uint64_t>(m.stats.worker_vmm_ns.current)) + " (" +
             ms_or_na(after_warmup(m, &Stats::worker_vmm_ns)) +
             " after warm-up) of it in the inline worker's VMM calls (on the worker's own "
             "thread with worker:thread)";
  }
  line(out, "allocator time",
       ms(m.allocator_ns_total) + " in allocate and deallocate (" +
           ms_or_na(m.allocator_ns_total_after_warmup) + " after warm-up), " +
           ms(static_cast<std::uint64_t>(m.stats.critical_path_vmm_ns.current)) +
           " of it in VMM calls (" + ms_or_na(after_warmup(m, &Stats::critical_path_vmm_ns)) +
           " after warm-up)" + worker);
}

// VMM calls in all, after warm-up, in each tenth and each step.
void print_vmm_calls(std::FILE* out, const MemlakeResult& m) {
  const Stats& s = m.stats;
  const std::optional<std::int64_t> after = after_warmup(m, &Stats::critical_path_vmm_calls);
  const std::string warm = after ? count(static_cast<std::uint64_t>(*after)) : std::string("n/a");
  line(out, "VMM calls",
       count(static_cast<std::uint64_t>(s.vmm_calls.current)) + " total, " +
           count(static_cast<std::uint64_t>(s.critical_path_vmm_calls.current)) +
           " on the critical path, " + warm + " of them after warm-up (the first " +
           count(m.warmup_events) + " events)");
  line(out, "  by tenth", joined(m.critical_path_by_tenth, [](std::int64_t c) {
                            return c;
                          }) + " (critical-path VMM calls in each tenth of the events)");
  if (!m.alloc_ns_by_tenth.empty())
    line(out, "  by tenth", joined(m.alloc_ns_by_tenth, [](const Percentiles& p) {
                              return p.p99;
                            }) + " (allocate p99 ns in each tenth)");
  if (m.steps.empty()) return;
  line(out, "  by step",
       joined(m.steps, [](const StepReport& st) { return st.critical_path_vmm_calls; }) +
           " (critical-path VMM calls in each of " + count(m.steps.size()) +
           " steps found from live bytes; the first is all before the first step)");
  line(out, "  by step", joined(m.steps, [](const StepReport& st) {
                           return st.worker_vmm_calls;
                         }) + " (worker VMM calls)");
  line(out, "  by step", joined(m.steps, [](const StepReport& st) {
                           return st.alloc_ns.p99;
                         }) + " (allocate p99 ns)");
}

// Allocations after warm-up by rung, and the slowest of them.
void print_after_warmup(std::FILE* out, const Trace& t, const MemlakeResult& m) {
  if (m.alloc_ns_after_warmup.count) {
    std::string by_path;
    for (int p = 0; p < kRungCount; ++p) {
      const Percentiles& q = m.alloc_ns_after_warmup_by_path[p];
      if (!q.count) continue;
      by_path += std::string(by_path.empty() ? "" : ", ") + rung_name(static_cast<Rung>(p)) + " " +
                 count(q.count) + " x " + count(q.median) + "/" + count(q.p99);
    }
    std::string less_worker;
    if (const auto& q = m.alloc_ns_after_warmup_less_worker)
      less_worker = "; less the inline worker's jobs (on its own thread with worker:thread) " +
                    count(q->median) + "/" + count(q->p99) + "/" + count(q->max);
    const std::string share =
        fmt("%.2f%%", 100.0 * static_cast<double>(m.allocs_mapping_after_warmup) /
                          static_cast<double>(m.alloc_ns_after_warmup.count));
    line(out, "after warm-up",
         "allocate median/p99/max ns " + count(m.alloc_ns_after_warmup.median) + "/" +
             count(m.alloc_ns_after_warmup.p99) + "/" + count(m.alloc_ns_after_warmup.max) +
             less_worker + "; " + count(m.allocs_mapping_after_warmup) + " of " +
             count(m.alloc_ns_after_warmup.count) + " allocations (" + share +
             ") mapped on the allocating thread, " + count(m.allocs_mapping_reserved_after_warmup) +
             " of them over reserved memory only; by rung " + by_path);
  }
  for (const SlowAlloc& a : m.slowest) {
    const Event& e = t.events[a.event];
    std::string changed;
    for (const auto& [name, delta] : a.changed)
      changed += std::string(changed.empty() ? "" : ", ") + name + " " + std::to_string(delta);
    line(out, "  slow",
         count(a.ns) + " ns, line " + count(t.lines[a.event]) + ", " + mib(e.bytes) +
             " on stream " + std::to_string(e.stream) + ", " + rung_name(a.path) +
             (changed.empty() ? "" : ": " + changed));
  }
}

// The worker, the allocation paths, stitches and OOMs.
void print_counters(std::FILE* out, const Stats& s) {
  line(out, "worker",
       count(s.worker_vmm_calls.current) + " VMM calls, " + count(s.evictions.current) +
           " ranges evicted; reserve hits " + count(s.reserve_hits.current) + ", misses " +
           count(s.reserve_misses.current));
  std::string rungs;
#define MEMLAKE_RUNG_COUNT(name, help) \
  if (s.rung_##name.current)           \
    rungs += std::string(rungs.empty() ? "" : ", ") + #name " " + count(s.rung_##name.current);
  MEMLAKE_RUNGS(MEMLAKE_RUNG_COUNT)
#undef MEMLAKE_RUNG_COUNT
  line(out, "rungs", rungs);
  line(out, "stitches",
       count(s.stitches.current) + " (" + count(s.evictions.current) + " cached segments evicted)");
  line(out, "OOMs", count(s.ooms.current));
  if (s.mapping_units_budget.current != 0 || s.backend_refusals.current != 0)
    line(out, "limits",
         "mapping units peak " + count(s.mapping_units.peak) + " of a budget of " +
             (s.mapping_units_budget.current != 0 ? count(s.mapping_units_budget.current)
                                                  : std::string("none")) +
             "; " + count(s.backend_refusals.current) +
             " calls the backend refused for want of a resource");
}

void print_memlake(std::FILE* out, const TraceReport& r) {
  const MemlakeResult& m = *r.memlake;
  print_ns_per_op(out, m);
  print_allocator_time(out, m);
  print_vmm_calls(out, m);
  print_after_warmup(out, *r.trace, m);
  print_counters(out, m.stats);
}

void print_gmlake(std::FILE* out, const TraceReport& r) {
  const GmlakeCounters& gc = r.gmlake.counters;
  line(out, "gmlake policy",
       "stitches " + count(gc.path_stitch) + ", sBlock reuses " + count(gc.path_sblock) +
           ", VMM calls " + count(gc.vmm_calls()) + ", cudaMalloc " + count(gc.cuda_malloc) +
           " (fragLimit " + mib(r.gmlake_options.frag_limit) + ", reuseLimit " +
           fmt("%g", r.gmlake_options.reuse_limit) + ")");
}

// Peak reserved minus the smallest capacity that fits.
void print_beyond_needed(std::FILE* out, const TraceReport& r) {
  if (!r.needed) return;
  const std::optional<std::int64_t> beyond = r.beyond_needed();
  std::string text;
  if (beyond) {
    const std::uint64_t size = static_cast<std::uint64_t>(*beyond < 0 ? -*beyond : *beyond);
    text = (*beyond < 0 ? "-" : "") + gib(size) + " (" + (*beyond < 0 ? "-" : "") + count(size) +
           " bytes): peak reserved " + gib(r.peak_reserved()) + ", fits in " +
           gib(r.needed->bytes) + " (" + count(r.needed->bytes) + " bytes, " +
           count(static_cast<std::uint64_t>(r.needed->tries)) + " tries)";
  } else {
    text = r.needed->found ? "n/a: the trace does not fit in the capacity replayed"
                           : "n/a: no capacity found that fits (" +
                                 count(static_cast<std::uint64_t>(r.needed->tries)) + " tries)";
  }
  line(out, "beyond needed", text);
}

// --capacity: whether each policy fits; --min-capacity: the smallest that does.
void print_capacity(std::FILE* out, const TraceReport& r) {
  const Trace& t = *r.trace;
  if (r.capacity) {
    auto fit_text = [&](bool fits, const std::optional<std::size_t>& oom, const std::string& msg) {
      if (fits) return std::string("fits in ") + gib(*r.capacity);
      std::string s = "does not fit in " + gib(*r.capacity) + ": out of memory at event " +
                      count(*oom) + " (line " + count(t.lines[*oom]) + ")";
      if (!msg.empty()) s += "\n" + std::string(19, ' ') + msg;
      return s;
    };
    if (r.memlake_policy && r.memlake) {
      line(out, "capacity",
           "memlake " + fit_text(r.memlake->fits, r.memlake->oom_event, r.memlake->oom_message));
    }
    line(out, "capacity", "gmlake policy " + fit_text(r.gmlake.fits, r.gmlake.oom_event, ""));
  }
  auto min_text = [&](const CapacitySearch& c) {
    if (!c.found)
      return std::string("not found (") + count(static_cast<std::uint64_t>(c.tries)) + " tries)";
    return gib(c.bytes) + " (" + count(c.bytes) + " bytes), " +
           fmt("%.3f", ratio(c.bytes, r.reference_live())) + " x peak live, " +
           count(static_cast<std::uint64_t>(c.tries)) + " tries";
  };
  if (r.min_capacity) line(out, "min capacity", "memlake " + min_text(*r.min_capacity));
  if (r.gmlake_min_capacity)
    line(out, "min capacity", "gmlake policy " + min_text(*r.gmlake_min_capacity));
  print_beyond_needed(out, r);
}

void print_times(std::FILE* out, const TraceReport& r) {
  std::string times = fmt("%.2f s reading", r.read_seconds);
  if (r.memlake) times += fmt(", %.2f s memlake", r.memlake->seconds);
  times += fmt(", %.2f s gmlake policy", r.gmlake.seconds);
  line(out, "replay", times);
}

}  // namespace

void print_table(std::FILE* out, const TraceReport& r) {
  print_trace(out, r);
  print_peaks(out, r);
  if (r.memlake_policy && r.memlake) print_memlake(out, r);
  print_gmlake(out, r);
  print_capacity(out, r);
  print_times(out, r);
  std::fprintf(out, "\n");
}

}  // namespace memlake
