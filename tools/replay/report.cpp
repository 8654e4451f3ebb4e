// Formatting of memlake-replay's results (see report.hpp): sizes in GiB with
// two decimals for people, exact bytes in the JSON.
#include "replay/report.hpp"

#include <cmath>
#include <string_view>
#include <vector>

namespace memlake {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// 1234567 -> "1,234,567"
std::string count(std::uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string mib(std::uint64_t bytes) {
  const double m = static_cast<double>(bytes) / (1 << 20);
  return m == std::floor(m) ? count(static_cast<std::uint64_t>(m)) + " MiB" : fmt("%.2f MiB", m);
}

double ratio(std::uint64_t a, std::uint64_t b) {
  return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

std::string pad(std::string s, std::size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::uint64_t peak_live(const TraceReport& r) {
  if (r.memlake_policy && r.memlake)
    return static_cast<std::uint64_t>(r.memlake->stats.requested_bytes.peak);
  return r.gmlake.peak_requested;
}

std::uint64_t peak_reserved(const TraceReport& r) {
  if (r.memlake_policy && r.memlake)
    return static_cast<std::uint64_t>(r.memlake->stats.reserved_bytes.peak);
  return r.gmlake.peak_reserved;
}

// The live bytes that utilization is measured against for the baselines:
// the trace's own number when it has one.
std::uint64_t reference_live(const TraceReport& r) {
  return r.trace->meta.peak_live_bytes.value_or(r.trace_peak_live);
}

std::int64_t after_warmup(const MemlakeResult& m) {
  if (!m.warmup) return -1;
  return m.stats.critical_path_vmm_calls.current - m.warmup->critical_path_vmm_calls.current;
}

class Json {
 public:
  Json& key(std::string_view k) {
    s_ += first_ ? "" : ",";
    first_ = false;
    str(k);
    s_ += ':';
    return *this;
  }
  Json& u(std::uint64_t v) {
    s_ += std::to_string(v);
    return *this;
  }
  Json& i(std::int64_t v) {
    s_ += std::to_string(v);
    return *this;
  }
  Json& d(double v) {
    s_ += std::isfinite(v) ? fmt("%.6g", v) : "null";
    return *this;
  }
  Json& b(bool v) {
    s_ += v ? "true" : "false";
    return *this;
  }
  Json& null() {
    s_ += "null";
    return *this;
  }
  Json& str(std::string_view v) {
    s_ += '"';
    for (char c : v) {
      switch (c) {
        case '"':
          s_ += "\\\"";
          break;
        case '\\':
          s_ += "\\\\";
          break;
        case '\n':
          s_ += "\\n";
          break;
        case '\t':
          s_ += "\\t";
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            s_ += buf;
          } else {
            s_ += c;
          }
      }
    }
    s_ += '"';
    return *this;
  }
  Json& raw(const std::string& json) {
    s_ += json;
    return *this;
  }
  std::string done() { return "{" + s_ + "}"; }

 private:
  std::string s_;
  bool first_ = true;
};

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
  return Json().key("count").u(p.count).key("median").u(p.median).key("p99").u(p.p99).done();
}

std::string slowest_json(const Trace& t, const std::vector<SlowAlloc>& slowest) {
  std::string list;
  for (const SlowAlloc& a : slowest) {
    Json changed;
    for (const auto& [name, delta] : a.changed) changed.key(name).i(delta);
    const Event& e = t.events[a.event];
    Json j;
    j.key("line").u(t.lines[a.event]).key("bytes").u(e.bytes).key("stream").u(e.stream);
    j.key("ns").u(a.ns).key("path").str(alloc_path_name(a.path));
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

void line(std::FILE* out, const std::string& label, const std::string& text) {
  std::fprintf(out, "  %s %s\n", pad(label, 16).c_str(), text.c_str());
}

}  // namespace

std::string gib(std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30) || bytes == 0) return fmt("%.2f GiB", b / (1 << 30));
  if (bytes >= (std::uint64_t{1} << 20)) return fmt("%.2f MiB", b / (1 << 20));
  return fmt("%.2f KiB", b / (1 << 10));
}

void print_table(std::FILE* out, const TraceReport& r) {
  const Trace& t = *r.trace;
  const std::uint64_t live = peak_live(r);
  const std::uint64_t reserved = peak_reserved(r);
  const std::uint64_t ref_live = reference_live(r);
  const char* who = r.memlake_policy ? "memlake" : "gmlake policy";
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
  row(who, reserved, live, false);
  for (const TraceBaseline& b : t.meta.baselines) {
    row(b.name + " (trace header)", b.peak_reserved_bytes, ref_live, true);
  }
  if (t.meta.baselines.empty()) std::fprintf(out, "  (the trace header names no baselines)\n");
  if (r.memlake_policy) row("gmlake policy", r.gmlake.peak_reserved, r.gmlake.peak_requested, true);
  std::fprintf(out, "\n");

  if (r.memlake_policy && r.memlake) {
    const MemlakeResult& m = *r.memlake;
    const Stats& s = m.stats;
    std::fprintf(out, "  %s %s %s %s\n", pad("ns per op", 16).c_str(),
                 pad("count", 10, true).c_str(), pad("median", 8, true).c_str(),
                 pad("p99", 10, true).c_str());
    auto ns_row = [&](const char* name, const Percentiles& p) {
      std::fprintf(out, "    %s %s %s %s\n", pad(name, 14).c_str(),
                   pad(count(p.count), 10, true).c_str(), pad(count(p.median), 8, true).c_str(),
                   pad(count(p.p99), 10, true).c_str());
    };
    ns_row("allocate", m.alloc_ns);
    ns_row("deallocate", m.free_ns);
    ns_row("all", m.all_ns);
    const std::int64_t warm = after_warmup(m);
    line(out, "VMM calls",
         count(static_cast<std::uint64_t>(s.vmm_calls.current)) + " total, " +
             count(static_cast<std::uint64_t>(s.critical_path_vmm_calls.current)) +
             " on the critical path, " +
             (warm >= 0 ? count(static_cast<std::uint64_t>(warm)) : std::string("n/a")) +
             " of them after warm-up (the first " + count(m.warmup_events) + " events)");
    std::string tenths;
    for (std::int64_t c : m.critical_path_by_tenth) {
      if (!tenths.empty()) tenths += ' ';
      tenths += count(static_cast<std::uint64_t>(c));
    }
    line(out, "  by tenth", tenths + " (critical-path VMM calls in each tenth of the events)");
    std::string p99s;
    for (const Percentiles& p : m.alloc_ns_by_tenth) {
      if (!p99s.empty()) p99s += ' ';
      p99s += count(p.p99);
    }
    if (!m.alloc_ns_by_tenth.empty())
      line(out, "  by tenth", p99s + " (allocate p99 ns in each tenth)");
    if (!m.steps.empty()) {
      auto per_step = [&](auto value) {
        std::string row;
        for (const StepReport& step : m.steps) {
          if (!row.empty()) row += ' ';
          row += count(static_cast<std::uint64_t>(value(step)));
        }
        return row;
      };
      line(out, "  by step",
           per_step([](const StepReport& st) { return st.critical_path_vmm_calls; }) +
               " (critical-path VMM calls in each of " + count(m.steps.size()) +
               " steps found from live bytes; the first is all before the first step)");
      line(out, "  by step", per_step([](const StepReport& st) {
                               return st.worker_vmm_calls;
                             }) + " (worker VMM calls)");
      line(out, "  by step",
           per_step([](const StepReport& st) { return st.alloc_ns.p99; }) + " (allocate p99 ns)");
    }
    if (m.alloc_ns_after_warmup.count) {
      std::string by_path;
      for (int p = 0; p < kAllocPathCount; ++p) {
        const Percentiles& q = m.alloc_ns_after_warmup_by_path[p];
        if (!q.count) continue;
        by_path += std::string(by_path.empty() ? "" : ", ") +
                   alloc_path_name(static_cast<AllocPath>(p)) + " " + count(q.count) + " x " +
                   count(q.median) + "/" + count(q.p99);
      }
      line(out, "after warm-up",
           "allocate median/p99 ns " + count(m.alloc_ns_after_warmup.median) + "/" +
               count(m.alloc_ns_after_warmup.p99) + "; by path " + by_path);
    }
    for (const SlowAlloc& a : m.slowest) {
      const Event& e = t.events[a.event];
      std::string changed;
      for (const auto& [name, delta] : a.changed)
        changed += std::string(changed.empty() ? "" : ", ") + name + " " + std::to_string(delta);
      line(out, "  slow",
           count(a.ns) + " ns, line " + count(t.lines[a.event]) + ", " + mib(e.bytes) +
               " on stream " + std::to_string(e.stream) + ", " + alloc_path_name(a.path) +
               (changed.empty() ? "" : ": " + changed));
    }
    line(out, "worker",
         count(s.worker_vmm_calls.current) + " VMM calls, " + count(s.worker_stitches.current) +
             " ranges stitched ahead; pre-stitch hits " + count(s.prestitch_hits.current) +
             ", misses " + count(s.prestitch_misses.current) + ", wasted " +
             mib(static_cast<std::uint64_t>(s.prestitch_wasted_bytes.current)) + "; reserve hits " +
             count(s.reserve_hits.current) + ", misses " + count(s.reserve_misses.current));
    line(out, "paths",
         "stream_cache " + count(s.path_stream_cache.current) + ", exact " +
             count(s.path_exact.current) + " (" + count(s.remembered_hits.current) +
             " at a remembered place), split " + count(s.path_split.current) + ", stitch " +
             count(s.path_stitch.current) + ", new " + count(s.path_new.current) + ", reclaim " +
             count(s.path_reclaim.current));
    line(out, "stitches",
         count(s.stitches.current) + " (" + count(s.evictions.current) +
             " cached segments evicted)");
    line(out, "OOMs", count(s.ooms.current));
  }
  const GmlakeCounters& gc = r.gmlake.counters;
  line(out, "gmlake policy",
       "stitches " + count(gc.path_stitch) + ", sBlock reuses " + count(gc.path_sblock) +
           ", VMM calls " + count(gc.vmm_calls()) + ", cudaMalloc " + count(gc.cuda_malloc) +
           " (fragLimit " + mib(r.gmlake_options.frag_limit) + ", reuseLimit " +
           fmt("%g", r.gmlake_options.reuse_limit) + ")");
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
           fmt("%.3f", ratio(c.bytes, reference_live(r))) + " x peak live, " +
           count(static_cast<std::uint64_t>(c.tries)) + " tries";
  };
  if (r.min_capacity) line(out, "min capacity", "memlake " + min_text(*r.min_capacity));
  if (r.gmlake_min_capacity)
    line(out, "min capacity", "gmlake policy " + min_text(*r.gmlake_min_capacity));
  std::string times = fmt("%.2f s reading", r.read_seconds);
  if (r.memlake) times += fmt(", %.2f s memlake", r.memlake->seconds);
  times += fmt(", %.2f s gmlake policy", r.gmlake.seconds);
  line(out, "replay", times);
  std::fprintf(out, "\n");
}

std::string json_line(const TraceReport& r) {
  const Trace& t = *r.trace;
  const std::uint64_t reserved = peak_reserved(r);
  Json j;
  j.key("trace").str(t.name()).key("path").str(t.path);
  j.key("policy").str(r.memlake_policy ? "memlake" : "gmlake");
  j.key("events").u(t.events.size()).key("allocs").u(r.allocs).key("frees").u(r.frees);
  j.key("streams").u(r.streams);
  j.key("peak_live_bytes").u(peak_live(r)).key("peak_reserved_bytes").u(reserved);
  j.key("utilization").d(ratio(peak_live(r), reserved));
  j.key("trace_peak_live_bytes").u(reference_live(r));
  Json baselines, ratios;
  for (const TraceBaseline& b : t.meta.baselines) {
    baselines.key(b.name).u(b.peak_reserved_bytes);
    ratios.key(b.name).d(ratio(reserved, b.peak_reserved_bytes));
  }
  j.key("baselines").raw(baselines.done()).key("baseline_ratios").raw(ratios.done());
  j.key("gmlake_peak_reserved_bytes").u(r.gmlake.peak_reserved);
  j.key("gmlake_ratio").d(ratio(reserved, r.gmlake.peak_reserved));
  j.key("gmlake").raw(gmlake_json(r));
  if (r.memlake_policy && r.memlake) {
    const MemlakeResult& m = *r.memlake;
    const Stats& s = m.stats;
    j.key("backend").str(m.backend).key("capacity_bytes").u(m.capacity);
    j.key("granularity_bytes").u(m.granularity);
    j.key("ns_per_op_median").u(m.all_ns.median).key("ns_per_op_p99").u(m.all_ns.p99);
    j.key("alloc_ns_median").u(m.alloc_ns.median).key("alloc_ns_p99").u(m.alloc_ns.p99);
    j.key("free_ns_median").u(m.free_ns.median).key("free_ns_p99").u(m.free_ns.p99);
    j.key("vmm_calls").i(s.vmm_calls.current);
    j.key("critical_path_vmm_calls").i(s.critical_path_vmm_calls.current);
    const std::int64_t warm = after_warmup(m);
    j.key("critical_path_vmm_calls_after_warmup");
    warm >= 0 ? j.i(warm) : j.null();
    j.key("warmup_events").u(m.warmup_events);
    std::string tenths;
    for (std::int64_t c : m.critical_path_by_tenth) {
      if (!tenths.empty()) tenths += ',';
      tenths += std::to_string(c);
    }
    j.key("critical_path_vmm_calls_by_tenth").raw("[" + tenths + "]");
    std::string p99s;
    for (const Percentiles& p : m.alloc_ns_by_tenth) {
      if (!p99s.empty()) p99s += ',';
      p99s += std::to_string(p.p99);
    }
    j.key("alloc_ns_p99_by_tenth").raw("[" + p99s + "]");
    if (!m.steps.empty()) {
      std::string steps;
      for (const StepReport& st : m.steps) {
        Json step;
        step.key("first_event").u(st.first_event).key("first_line").u(t.lines[st.first_event]);
        step.key("critical_path_vmm_calls").i(st.critical_path_vmm_calls);
        step.key("worker_vmm_calls").i(st.worker_vmm_calls);
        step.key("reserve_hits").i(st.reserve_hits).key("reserve_misses").i(st.reserve_misses);
        step.key("prestitch_hits").i(st.prestitch_hits);
        step.key("prestitch_misses").i(st.prestitch_misses);
        step.key("alloc_ns").raw(percentiles_json(st.alloc_ns));
        if (!steps.empty()) steps += ',';
        steps += step.done();
      }
      j.key("steps").raw("[" + steps + "]");
    }
    j.key("alloc_ns_after_warmup").raw(percentiles_json(m.alloc_ns_after_warmup));
    Json by_path;
    for (int p = 0; p < kAllocPathCount; ++p)
      by_path.key(alloc_path_name(static_cast<AllocPath>(p)))
          .raw(percentiles_json(m.alloc_ns_after_warmup_by_path[p]));
    j.key("alloc_ns_after_warmup_by_path").raw(by_path.done());
    if (!m.slowest.empty()) j.key("slowest_allocs").raw(slowest_json(t, m.slowest));
    j.key("stitches").i(s.stitches.current).key("ooms").i(s.ooms.current);
    Json paths;
    paths.key("stream_cache").i(s.path_stream_cache.current).key("exact").i(s.path_exact.current);
    paths.key("split").i(s.path_split.current).key("stitch").i(s.path_stitch.current);
    paths.key("new").i(s.path_new.current).key("reclaim").i(s.path_reclaim.current);
    j.key("paths").raw(paths.done());
    j.key("fits").b(m.fits).key("events_replayed").u(m.events_replayed);
    if (m.oom_event) {
      j.key("oom_event").u(*m.oom_event).key("oom_line").u(t.lines[*m.oom_event]);
      j.key("oom_message").str(m.oom_message);
    }
    j.key("seconds").d(m.seconds);
    j.key("stats").raw(stats_json(s));
  } else {
    const GmlakeCounters& c = r.gmlake.counters;
    j.key("vmm_calls").u(c.vmm_calls()).key("stitches").u(c.path_stitch).key("ooms").u(c.ooms);
    j.key("fits").b(r.gmlake.fits).key("events_replayed").u(r.gmlake.events_replayed);
    if (r.gmlake.oom_event) {
      j.key("oom_event").u(*r.gmlake.oom_event).key("oom_line").u(t.lines[*r.gmlake.oom_event]);
    }
  }
  if (r.capacity) j.key("capacity_limit_bytes").u(*r.capacity);
  auto search = [&](const char* name, const std::optional<CapacitySearch>& c) {
    if (!c) return;
    j.key(std::string(name) + "_bytes");
    c->found ? j.u(c->bytes) : j.null();
    j.key(std::string(name) + "_ratio");
    c->found ? j.d(ratio(c->bytes, reference_live(r))) : j.null();
    j.key(std::string(name) + "_tries").u(static_cast<std::uint64_t>(c->tries));
  };
  search("min_capacity", r.min_capacity);
  search("gmlake_min_capacity", r.gmlake_min_capacity);
  j.key("read_seconds").d(r.read_seconds);
  return j.done();
}

}  // namespace memlake
