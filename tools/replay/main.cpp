// memlake-replay: replays recorded allocation traces through memlake and
// through a simulation of GMLake's policy, and reports peaks, utilization
// against the stock allocators' baselines, per-op latency and VMM calls.
// Command line, reading of all traces up front (bad input fails before any
// replay), and the run of each trace; see docs/replay.md.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "memlake/config.hpp"
#include "memlake/errors.hpp"
#include "replay/async_replay.hpp"
#include "replay/gmlake_policy.hpp"
#include "replay/replay.hpp"
#include "replay/report.hpp"
#include "replay/svg.hpp"
#include "trace/trace.hpp"

namespace memlake {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitDoesNotFit = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitAllocator = 3;

constexpr const char* kUsage = R"(usage: memlake-replay [options] TRACE...

Replays memlake-trace v1 files (gzip or plain CSV; see traces/FORMAT.md)
through memlake::Allocator and through a simulation of GMLake's allocator,
and reports, per trace: peak live and peak reserved bytes, utilization, the
ratio to each baseline of the trace header (native, expandable, async) and to
the GMLake policy, median and p99 nanoseconds per allocate/deallocate, VMM
calls (all, on the critical path, and on the critical path after warm-up),
stitches and OOMs.

options:
  --backend host|cuda    memlake's backend (default: host, unless the
                         configuration asks for cuda)
  --conf "key:value,..." allocator options, applied on top of the
                         environment (MEMLAKE_CONF, MEMLAKE_<KEY>); may be
                         repeated; --backend and --capacity apply last
  --capacity BYTES       physical capacity (K, M, G, T suffixes, binary; e.g.
                         15G or 14.5G); reports whether each trace fits, and
                         where it first runs out of memory. The GMLake policy
                         gets the same capacity
  --min-capacity         binary search, in granularity steps with a fresh
                         allocator per try, for the smallest capacity at which
                         the trace fits; for memlake and the GMLake policy
  --allocator cudaMallocAsync
                         also replay the trace through cudaMallocAsync and
                         cudaFreeAsync on the device's default pool (release
                         threshold max) and report its reserved high watermark
                         beside memlake's (needs a GPU)
  --policy memlake|gmlake
                         memlake (default): replay through memlake, with the
                         GMLake policy alongside for comparison. gmlake:
                         replay only the GMLake simulation
  --gmlake-frag-limit BYTES
                         GMLake's fragLimit: only requests of at least this
                         size stitch (default 512M, GMLake's default)
  --gmlake-reuse-limit X GMLake's reuseLimit: a cached stitched block serves a
                         request only if at most X times larger (default 10)
  --gmlake-defrag-level N
                         GMLake's defragLevel: 0 (default) stitches before new
                         memory is taken, 1 only after that failed
  --gmlake-auto-gc GIB   GMLake's autoGC: idle stitched blocks are unmapped
                         once stitched bytes exceed GIB GiB (default 1000)
  --gmlake-no-stitch     GMLake's vmmDefragment=0: its caching path alone
                         (PyTorch's allocator with GMLake's 2 MiB rounding)
  --warmup FRACTION      share of the events counted as warm-up for
                         critical_path_vmm_calls_after_warmup (default 0.3)
  --slowest N            list the N slowest allocations after warm-up, each
                         with the stats it changed (event records and
                         queries, VMM calls, lock waits, bytes retired); a
                         stats snapshot around every allocation after
                         warm-up, outside its timing
  --json                 one JSON object per trace per line, instead of tables
  --svg FILE             memory over time: live bytes, reserved bytes of
                         memlake and of the GMLake policy, the baselines'
                         peaks; with several traces, one file per trace with
                         the trace name before .svg (FILE-NAME.svg)
  --svg-x event|ts       x axis of the chart: event index (default) or the
                         trace's timestamps
  --no-progress          no progress bar (shown on stderr when it is a TTY)
  -h, --help             this text

exit status: 0 done; 1 a trace does not fit in --capacity; 2 bad input or
usage (malformed trace, unknown id, truncated gzip, missing file; reported as
"memlake-replay: FILE:LINE: reason"); 3 the allocator failed otherwise.
)";

struct Options {
  std::vector<std::string> traces;
  std::optional<BackendKind> backend;
  std::vector<std::string> confs;
  std::optional<std::uint64_t> capacity;
  bool min_capacity = false;
  bool gmlake_only = false;
  bool cuda_async = false;  // --allocator cudaMallocAsync
  GmlakeOptions gmlake;
  double warmup = 0.3;
  std::size_t slowest = 0;
  bool json = false;
  std::string svg;
  bool svg_ts = false;
  bool progress = true;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::optional<std::uint64_t> parse_size(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  const std::string number(s.substr(0, i));
  if (std::count(number.begin(), number.end(), '.') > 1) return std::nullopt;
  std::string unit(s.substr(i));
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (unit.ends_with("ib"))
    unit.resize(unit.size() - 2);
  else if (unit.size() > 1 && unit.ends_with("b"))
    unit.pop_back();
  else if (unit == "b")
    unit.clear();
  int shift = 0;
  if (unit.empty())
    shift = 0;
  else if (unit == "k")
    shift = 10;
  else if (unit == "m")
    shift = 20;
  else if (unit == "g")
    shift = 30;
  else if (unit == "t")
    shift = 40;
  else
    return std::nullopt;
  const double v = std::strtod(number.c_str(), nullptr) * std::ldexp(1.0, shift);
  if (!(v >= 0) || v > 1.8e19) return std::nullopt;
  return static_cast<std::uint64_t>(std::llround(v));
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool only_files = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (only_files || arg.empty() || arg[0] != '-' || arg == "-") {
      o.traces.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_files = true;
      continue;
    }
    std::string value;
    bool has_value = false;
    if (const std::size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
      has_value = true;
    }
    auto need = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    auto flag = [&] {
      if (has_value) throw UsageError(arg + " takes no value");
    };
    if (arg == "-h" || arg == "--help") {
      flag();
      std::fputs(kUsage, stdout);
      std::exit(kExitOk);
    } else if (arg == "--backend") {
      const std::string v = need();
      if (v == "host")
        o.backend = BackendKind::host;
      else if (v == "cuda")
        o.backend = BackendKind::cuda;
      else
        throw UsageError("--backend: expected host or cuda, got '" + v + "'");
    } else if (arg == "--conf") {
      o.confs.push_back(need());
    } else if (arg == "--capacity") {
      const std::string v = need();
      o.capacity = parse_size(v);
      if (!o.capacity || *o.capacity == 0) throw UsageError("--capacity: bad size '" + v + "'");
    } else if (arg == "--min-capacity") {
      flag();
      o.min_capacity = true;
    } else if (arg == "--policy") {
      const std::string v = need();
      if (v == "memlake")
        o.gmlake_only = false;
      else if (v == "gmlake")
        o.gmlake_only = true;
      else
        throw UsageError("--policy: expected memlake or gmlake, got '" + v + "'");
    } else if (arg == "--allocator") {
      const std::string v = need();
      if (v != "cudaMallocAsync")
        throw UsageError("--allocator: the only stock allocator is cudaMallocAsync, got '" + v +
                         "'");
      o.cuda_async = true;
    } else if (arg == "--gmlake-frag-limit") {
      const std::string v = need();
      const auto size = parse_size(v);
      if (!size) throw UsageError("--gmlake-frag-limit: bad size '" + v + "'");
      o.gmlake.frag_limit = *size;
    } else if (arg == "--gmlake-reuse-limit") {
      const std::string v = need();
      char* end = nullptr;
      o.gmlake.reuse_limit = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.gmlake.reuse_limit > 0)) {
        throw UsageError("--gmlake-reuse-limit: expected a positive number, got '" + v + "'");
      }
    } else if (arg == "--gmlake-defrag-level") {
      const std::string v = need();
      if (v != "0" && v != "1" && v != "2") {
        throw UsageError("--gmlake-defrag-level: expected 0, 1 or 2, got '" + v + "'");
      }
      o.gmlake.defrag_level = v[0] - '0';
    } else if (arg == "--gmlake-auto-gc") {
      const std::string v = need();
      char* end = nullptr;
      const double gib = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(gib >= 0) || gib > 1e9) {
        throw UsageError("--gmlake-auto-gc: expected a number of GiB, got '" + v + "'");
      }
      o.gmlake.auto_gc_bytes = static_cast<std::uint64_t>(gib * static_cast<double>(1ull << 30));
    } else if (arg == "--gmlake-no-stitch") {
      flag();
      o.gmlake.defragment = false;
    } else if (arg == "--warmup") {
      const std::string v = need();
      char* end = nullptr;
      o.warmup = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.warmup >= 0 && o.warmup <= 1)) {
        throw UsageError("--warmup: expected a fraction between 0 and 1, got '" + v + "'");
      }
    } else if (arg == "--slowest") {
      const std::string v = need();
      char* end = nullptr;
      const unsigned long long k = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || v[0] == '-' || k > 100000) {
        throw UsageError("--slowest: expected a count from 0 to 100000, got '" + v + "'");
      }
      o.slowest = static_cast<std::size_t>(k);
    } else if (arg == "--json") {
      flag();
      o.json = true;
    } else if (arg == "--svg") {
      o.svg = need();
      if (o.svg.empty()) throw UsageError("--svg needs a file name");
    } else if (arg == "--svg-x") {
      const std::string v = need();
      if (v == "event")
        o.svg_ts = false;
      else if (v == "ts")
        o.svg_ts = true;
      else
        throw UsageError("--svg-x: expected event or ts, got '" + v + "'");
    } else if (arg == "--no-progress") {
      flag();
      o.progress = false;
    } else {
      throw UsageError("unknown option " + arg);
    }
  }
  if (o.traces.empty()) throw UsageError("no trace given");
  return o;
}

struct Loaded {
  Trace trace;
  std::vector<std::uint32_t> alloc_of;
  double seconds = 0;
};

std::string svg_path(const std::string& base, const std::string& name, bool several) {
  if (!several) return base;
  std::string safe = name;
  for (char& c : safe) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  if (base.size() > 4 && base.ends_with(".svg")) {
    return base.substr(0, base.size() - 4) + "-" + safe + ".svg";
  }
  return base + "-" + safe + ".svg";
}

void write_chart(const std::string& path, const Loaded& l, const TraceReport& r, const Options& o,
                 std::size_t points) {
  const Trace& t = l.trace;
  const std::size_t n = t.events.size();
  Sampler shape(n, points);
  const std::size_t bucket = shape.bucket_size();
  SvgChart chart;
  chart.title = t.name() + ": memory over time";
  chart.x_label = o.svg_ts ? "time (s)" : "event";
  chart.x_scale = o.svg_ts ? 1e-6 : 1.0;
  chart.x_min = o.svg_ts && n ? static_cast<double>(t.events.front().ts_us) : 0.0;
  for (std::size_t k = 0; k < shape.values().size(); ++k) {
    const std::size_t last = std::min(n, (k + 1) * bucket) - 1;
    chart.x.push_back(o.svg_ts ? static_cast<double>(t.events[last].ts_us)
                               : static_cast<double>(last));
  }
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

int run(const Options& o) {
  Config config;
  try {
    config = Config::from_env();
    // A replay must be reproducible: the worker's jobs run inline, at the
    // same points as the thread would be nudged, unless asked otherwise.
    if (!std::getenv("MEMLAKE_WORKER") && !std::getenv("MEMLAKE_CONF"))
      config.worker = WorkerMode::inline_jobs;
  } catch (const config_error& e) {
    std::fprintf(stderr, "memlake-replay: environment: %s\n", e.what());
    return kExitBadInput;
  }
  for (const std::string& c : o.confs) {
    try {
      config.apply(c);
    } catch (const config_error& e) {
      std::fprintf(stderr, "memlake-replay: --conf: %s\n", e.what());
      return kExitBadInput;
    }
  }
  if (o.backend) config.backend = *o.backend;
  if (config.backend == BackendKind::automatic) config.backend = BackendKind::host;
  if (o.capacity) config.capacity = static_cast<std::size_t>(*o.capacity);

  // Every input is read and checked before anything is replayed.
  std::vector<Loaded> loaded;
  bool bad = false;
  for (const std::string& path : o.traces) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      Loaded l;
      l.trace = read_trace(path);
      l.alloc_of = match_frees(l.trace);
      l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      loaded.push_back(std::move(l));
    } catch (const TraceError& e) {
      std::fprintf(stderr, "memlake-replay: %s\n", e.what());
      bad = true;
    }
  }
  if (bad) return kExitBadInput;

  const bool tty = o.progress && ::isatty(STDERR_FILENO);
  constexpr std::size_t kSvgPoints = 2000;
  int status = kExitOk;
  std::set<std::string> svg_names;
  for (std::size_t ti = 0; ti < loaded.size(); ++ti) {
    const Loaded& l = loaded[ti];
    const Trace& t = l.trace;
    TraceReport r;
    r.trace = &t;
    r.memlake_policy = !o.gmlake_only;
    r.read_seconds = l.seconds;
    r.trace_peak_live = t.computed_peak_live_bytes();
    std::unordered_set<std::uint64_t> streams;
    for (const Event& e : t.events) {
      (e.op == TraceOp::alloc ? r.allocs : r.frees)++;
      streams.insert(e.stream);
    }
    r.streams = streams.size();
    r.capacity = o.capacity;
    r.gmlake_options = o.gmlake;
    r.gmlake_options.capacity = o.capacity.value_or(0);

    ReplaySetup setup;
    setup.trace = &t;
    setup.alloc_of = &l.alloc_of;
    setup.warmup_fraction = o.warmup;
    setup.slowest = o.slowest;
    setup.series_points = o.svg.empty() ? 0 : kSvgPoints;
    setup.progress.enabled = tty;
    ReplaySetup quiet = setup;
    quiet.timing = false;
    quiet.series_points = 0;

    try {
      if (!o.gmlake_only) {
        setup.progress.label = t.name() + " memlake";
        r.memlake = replay_memlake(setup, config);
      }
      setup.progress.label = t.name() + " gmlake policy";
      r.gmlake = replay_gmlake(setup, r.gmlake_options);

      if (o.min_capacity) {
        const std::uint64_t live = r.trace_peak_live;
        if (!o.gmlake_only) {
          // Start from the peak of a run without a capacity limit.
          std::uint64_t start = static_cast<std::uint64_t>(r.memlake->stats.reserved_bytes.peak);
          std::uint64_t limit = r.memlake->capacity;
          if (o.capacity) {
            Config unlimited = config;
            unlimited.capacity = 0;
            const MemlakeResult m = replay_memlake(quiet, unlimited);
            start = static_cast<std::uint64_t>(m.stats.reserved_bytes.peak);
            limit = m.capacity;
          }
          r.min_capacity =
              find_min_capacity(start, limit, live, r.memlake->granularity, [&](std::uint64_t cap) {
                Config c = config;
                c.capacity = static_cast<std::size_t>(cap);
                quiet.progress.label = t.name() + " memlake at " + gib(cap);
                return replay_memlake(quiet, c).fits;
              });
        }
        GmlakeOptions unlimited = o.gmlake;
        unlimited.capacity = 0;
        const std::uint64_t start =
            o.capacity ? replay_gmlake(quiet, unlimited).peak_reserved : r.gmlake.peak_reserved;
        r.gmlake_min_capacity = find_min_capacity(
            start, start * 4, live, GmlakePolicy::kGranularity, [&](std::uint64_t cap) {
              GmlakeOptions g = o.gmlake;
              g.capacity = cap;
              return replay_gmlake(quiet, g).fits;
            });
      }
    } catch (const ReplayError& e) {
      std::fprintf(stderr, "memlake-replay: %s\n", e.what());
      return kExitAllocator;
    } catch (const error& e) {
      std::fprintf(stderr, "memlake-replay: %s: cannot run the allocator: %s\n", t.path.c_str(),
                   e.what());
      return kExitAllocator;
    }

    if (!o.svg.empty()) {
      std::string path = svg_path(o.svg, t.name(), loaded.size() > 1);
      if (!svg_names.insert(path).second)
        path = svg_path(o.svg, t.name() + "-" + std::to_string(ti), true);
      svg_names.insert(path);
      try {
        write_chart(path, l, r, o, kSvgPoints);
      } catch (const std::runtime_error& e) {
        std::fprintf(stderr, "memlake-replay: %s\n", e.what());
        return kExitBadInput;
      }
    }

    AsyncResult async;
    if (o.cuda_async) async = replay_cuda_async(setup, config.device);
    const double async_ratio = async.ran && async.reserved_high && r.memlake
                                   ? static_cast<double>(r.memlake->stats.reserved_bytes.peak) /
                                         static_cast<double>(async.reserved_high)
                                   : 0;
    if (o.json) {
      std::string line = json_line(r);
      if (o.cuda_async) {
        char extra[512];
        if (async.ran)
          std::snprintf(
              extra, sizeof extra,
              ",\"cuda_async_measured\":{\"peak_reserved_bytes\":%llu,\"used_high_bytes\":%llu,"
              "\"memlake_ratio\":%.6f,\"alloc_ns_median\":%llu,\"free_ns_median\":%llu,"
              "\"alloc_ns_p99\":%llu,\"free_ns_p99\":%llu,"
              "\"alloc_ns_after_warmup_median\":%llu,\"alloc_ns_after_warmup_p99\":%llu}",
              static_cast<unsigned long long>(async.reserved_high),
              static_cast<unsigned long long>(async.used_high), async_ratio,
              static_cast<unsigned long long>(async.alloc_ns.median),
              static_cast<unsigned long long>(async.free_ns.median),
              static_cast<unsigned long long>(async.alloc_ns.p99),
              static_cast<unsigned long long>(async.free_ns.p99),
              static_cast<unsigned long long>(async.alloc_ns_after_warmup.median),
              static_cast<unsigned long long>(async.alloc_ns_after_warmup.p99));
        else
          std::snprintf(extra, sizeof extra, ",\"cuda_async_measured\":null");
        line.insert(line.size() - 1, extra);
      }
      std::printf("%s\n", line.c_str());
    } else {
      print_table(stdout, r);
      if (o.cuda_async && async.ran)
        std::printf(
            "  cudaMallocAsync  measured here: peak reserved %s, used high %s; memlake / it %.3f; "
            "ns per alloc median/p99 %llu/%llu (after warm-up %llu/%llu), free %llu/%llu\n\n",
            gib(async.reserved_high).c_str(), gib(async.used_high).c_str(), async_ratio,
            static_cast<unsigned long long>(async.alloc_ns.median),
            static_cast<unsigned long long>(async.alloc_ns.p99),
            static_cast<unsigned long long>(async.alloc_ns_after_warmup.median),
            static_cast<unsigned long long>(async.alloc_ns_after_warmup.p99),
            static_cast<unsigned long long>(async.free_ns.median),
            static_cast<unsigned long long>(async.free_ns.p99));
      else if (o.cuda_async)
        std::printf("  cudaMallocAsync  not run: %s\n\n", async.why_not.c_str());
    }
    std::fflush(stdout);
    const bool fits = o.gmlake_only ? r.gmlake.fits : r.memlake->fits;
    if (o.capacity && !fits) status = kExitDoesNotFit;
  }
  return status;
}

}  // namespace
}  // namespace memlake

int main(int argc, char** argv) {
  try {
    return memlake::run(memlake::parse_args(argc, argv));
  } catch (const memlake::UsageError& e) {
    std::fprintf(stderr, "memlake-replay: %s\n(memlake-replay --help lists the options)\n",
                 e.what());
    return memlake::kExitBadInput;
  }
}
