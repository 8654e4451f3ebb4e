// memlake-replay's run (see cli.hpp): configuration, reading of all traces up
// front (bad input fails before any replay), then per trace its replays and
// its report; see docs/replay.md.
#include "replay/cli.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <set>
#include <utility>

#include "memlake/errors.hpp"
#include "profiling/timeline.hpp"
#include "replay/async_replay.hpp"
#include "replay/capacity.hpp"
#include "replay/chart.hpp"
#include "replay/cli_options.hpp"
#include "replay/format.hpp"
#include "replay/report.hpp"
#include "report/html_report.hpp"

namespace memlake {

namespace {

constexpr std::size_t kSvgPoints = 2000;

// The path of the trace being replayed, for the terminate handler; it points
// into a Trace that outlives the replay.
std::atomic<const char*> g_replaying{nullptr};

class Replaying {
 public:
  explicit Replaying(const Trace& t) { g_replaying = t.path.c_str(); }
  ~Replaying() { g_replaying = nullptr; }
  Replaying(const Replaying&) = delete;
  Replaying& operator=(const Replaying&) = delete;
};

void say(std::FILE* err, const std::string& message) {
  std::fprintf(err, "memlake-replay: %s\n", message.c_str());
}

struct Loaded {
  Trace trace;
  std::vector<std::uint32_t> alloc_of;
  double seconds = 0;
};

// The environment's configuration, then --conf, --backend and --capacity;
// nullopt (with the message said) when a value is bad.
std::optional<Config> make_config(const ToolOptions& o, std::FILE* err) {
  Config config;
  try {
    config = Config::from_env();
    // A replay must be reproducible: the worker's jobs run inline, at the
    // same points as the thread would be nudged, unless asked otherwise.
    if (!std::getenv("MEMLAKE_WORKER") && !std::getenv("MEMLAKE_CONF"))
      config.worker = WorkerMode::inline_jobs;
  } catch (const config_error& e) {
    say(err, std::string("environment: ") + e.what());
    return std::nullopt;
  }
  for (const std::string& c : o.confs) {
    try {
      config.apply(c);
    } catch (const config_error& e) {
      say(err, std::string("--conf: ") + e.what());
      return std::nullopt;
    }
  }
  if (o.backend) config.backend = *o.backend;
  if (config.backend == BackendKind::automatic) config.backend = BackendKind::host;
  if (o.capacity) config.capacity = static_cast<std::size_t>(*o.capacity);
  return config;
}

// Every input is read and checked before anything is replayed; false (with
// each bad file said) when one is bad.
bool load_traces(const std::vector<std::string>& paths, std::vector<Loaded>& loaded,
                 std::FILE* err) {
  bool bad = false;
  for (const std::string& path : paths) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      Loaded l;
      l.trace = read_trace(path);
      l.alloc_of = match_frees(l.trace);
      l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      loaded.push_back(std::move(l));
    } catch (const TraceError& e) {
      say(err, e.what());
      bad = true;
    }
  }
  return !bad;
}

// The replays of one trace and the capacity searches asked for.
class TraceReplays {
 public:
  TraceReplays(const Loaded& l, const ToolOptions& o, const Config& config,
               const ToolContext& context, bool progress)
      : o_(o), config_(config), t_(l.trace) {
    describe_trace(t_, r_);
    r_.memlake_policy = !o.gmlake_only;
    r_.read_seconds = l.seconds;
    r_.capacity = o.capacity;
    r_.gmlake_options = o.gmlake;
    r_.gmlake_options.capacity = o.capacity.value_or(0);
    setup_.trace = &t_;
    setup_.alloc_of = &l.alloc_of;
    setup_.warmup_fraction = o.warmup;
    setup_.slowest = o.slowest;
    setup_.pace = o.pace;
    setup_.series_points = o.svg.empty() ? 0 : kSvgPoints;
    setup_.progress.enabled = progress;
    setup_.progress.stream = context.err;
    setup_.backend = context.backend;
    // --html and --timeline: memlake's replay recorded whole (the ring
    // holds every event it makes).
    if (!o.gmlake_only && (!o.html.empty() || !o.timeline.empty())) {
      timeline_ = std::make_unique<Timeline>(
          config.device, std::max<std::size_t>(std::size_t{1} << 20, 8 * t_.events.size()));
      setup_.observer = timeline_.get();
    }
    quiet_ = setup_;
    quiet_.timing = false;
    quiet_.series_points = 0;
    quiet_.observer = nullptr;
  }

  TraceReport run() {
    Replaying replaying(t_);
    if (!o_.gmlake_only) {
      setup_.progress.label = t_.name() + " memlake";
      r_.memlake = replay_memlake(setup_, config_);
    }
    setup_.progress.label = t_.name() + " gmlake policy";
    r_.gmlake = replay_gmlake(setup_, r_.gmlake_options);
    if (o_.min_capacity) {
      if (!o_.gmlake_only) r_.min_capacity = memlake_min_capacity();
      r_.gmlake_min_capacity = gmlake_min_capacity();
      r_.needed = o_.gmlake_only ? r_.gmlake_min_capacity : r_.min_capacity;
    } else if (o_.needed) {
      r_.needed = o_.gmlake_only ? gmlake_needed() : memlake_needed();
    }
    return std::move(r_);
  }
  const ReplaySetup& setup() const { return setup_; }
  // The timeline of memlake's replay; nullptr without --html or --timeline.
  const Timeline* timeline() const { return timeline_.get(); }

 private:
  // Whether the trace fits in `capacity`, replayed quietly; a failure names
  // the capacity it was replayed at.
  bool memlake_fits(std::uint64_t capacity, const char* search) {
    Config c = config_;
    c.capacity = static_cast<std::size_t>(capacity);
    quiet_.progress.label = t_.name() + " memlake at " + gib(capacity);
    try {
      return replay_memlake(quiet_, c).fits;
    } catch (const ReplayError& e) {
      throw ReplayError(std::string(e.what()) + " (replaying at a capacity of " +
                        std::to_string(capacity) + " bytes for " + search + ")");
    }
  }

  // Starts from the peak of a run without a capacity limit.
  CapacitySearch memlake_min_capacity() {
    std::uint64_t start = static_cast<std::uint64_t>(r_.memlake->stats.reserved_bytes.peak);
    std::uint64_t limit = r_.memlake->capacity;
    if (o_.capacity) {
      Config unlimited = config_;
      unlimited.capacity = 0;
      const MemlakeResult m = replay_memlake(quiet_, unlimited);
      start = static_cast<std::uint64_t>(m.stats.reserved_bytes.peak);
      limit = m.capacity;
    }
    return find_min_capacity(
        start, limit, r_.trace_peak_live, r_.memlake->granularity,
        [&](std::uint64_t cap) { return memlake_fits(cap, "--min-capacity"); });
  }

  // Bounded by the replay's own peaks; nothing when it did not fit.
  std::optional<CapacitySearch> memlake_needed() {
    const MemlakeResult& m = *r_.memlake;
    if (!m.fits) return std::nullopt;
    return find_needed_capacity(
        r_.trace_peak_live, static_cast<std::uint64_t>(m.stats.reserved_bytes.peak), m.capacity,
        m.granularity, [&](std::uint64_t cap) { return memlake_fits(cap, "--needed"); });
  }

  std::optional<CapacitySearch> gmlake_needed() {
    if (!r_.gmlake.fits) return std::nullopt;
    const std::uint64_t reserved = r_.gmlake.peak_reserved;
    return find_needed_capacity(r_.trace_peak_live, reserved, reserved * 4,
                                GmlakePolicy::kGranularity, [&](std::uint64_t cap) {
                                  GmlakeOptions g = o_.gmlake;
                                  g.capacity = cap;
                                  return replay_gmlake(quiet_, g).fits;
                                });
  }

  CapacitySearch gmlake_min_capacity() {
    GmlakeOptions unlimited = o_.gmlake;
    unlimited.capacity = 0;
    const std::uint64_t start =
        o_.capacity ? replay_gmlake(quiet_, unlimited).peak_reserved : r_.gmlake.peak_reserved;
    return find_min_capacity(start, start * 4, r_.trace_peak_live, GmlakePolicy::kGranularity,
                             [&](std::uint64_t cap) {
                               GmlakeOptions g = o_.gmlake;
                               g.capacity = cap;
                               return replay_gmlake(quiet_, g).fits;
                             });
  }

  const ToolOptions& o_;
  const Config& config_;
  const Trace& t_;
  TraceReport r_;
  ReplaySetup setup_;
  ReplaySetup quiet_;  // no timing, no series, no timeline: for the searches
  std::unique_ptr<Timeline> timeline_;
};

// The chart, the cudaMallocAsync replay and the report of one trace.
class TraceOutput {
 public:
  TraceOutput(const ToolOptions& o, const Config& config, const ToolContext& context,
              std::size_t traces)
      : o_(o), config_(config), context_(context), several_(traces > 1) {}

  // kExitOk, or kExitBadInput when the chart, the report or the timeline
  // cannot be written.
  int write(const TraceReport& r, const ReplaySetup& setup, std::size_t index,
            const Timeline* timeline) {
    if (!o_.svg.empty() && !write_svg_file(r, index)) return kExitBadInput;
    if (timeline != nullptr && !write_timeline_files(r, *timeline, index)) return kExitBadInput;
    AsyncResult async;
    if (o_.cuda_async) async = replay_cuda_async(setup, config_.device);
    const std::uint64_t memlake_peak =
        r.memlake ? static_cast<std::uint64_t>(r.memlake->stats.reserved_bytes.peak) : 0;
    if (o_.json) {
      std::string line = json_line(r);
      if (o_.cuda_async) line.insert(line.size() - 1, cuda_async_json_member(async, memlake_peak));
      std::fprintf(context_.out, "%s\n", line.c_str());
    } else {
      print_table(context_.out, r);
      if (o_.cuda_async) print_cuda_async(context_.out, async, memlake_peak);
    }
    std::fflush(context_.out);
    return kExitOk;
  }

 private:
  bool write_svg_file(const TraceReport& r, std::size_t index) {
    const std::string name = r.trace->name();
    std::string path = svg_path(o_.svg, name, several_);
    if (!svg_names_.insert(path).second)
      path = svg_path(o_.svg, name + "-" + std::to_string(index), true);
    svg_names_.insert(path);
    try {
      write_chart(path, r, o_.svg_ts, kSvgPoints);
    } catch (const std::runtime_error& e) {
      say(context_.err, e.what());
      return false;
    }
    return true;
  }

  // A file name of its own for each trace (`taken` holds those used).
  std::string unique_path(const std::string& base, const TraceReport& r, std::size_t index,
                          const std::string& ext, std::set<std::string>& taken) const {
    const std::string name = r.trace->name();
    std::string path = per_trace_path(base, name, several_, ext);
    if (!taken.insert(path).second)
      path = per_trace_path(base, name + "-" + std::to_string(index), true, ext);
    taken.insert(path);
    return path;
  }

  bool write_timeline_files(const TraceReport& r, const Timeline& timeline, std::size_t index) {
    const std::string json = timeline.trace_json();
    try {
      if (!o_.timeline.empty()) {
        const std::string path = unique_path(o_.timeline, r, index, ".json", json_names_);
        std::FILE* f = std::fopen(path.c_str(), "wb");
        const bool ok = f != nullptr && std::fwrite(json.data(), 1, json.size(), f) == json.size();
        if (f != nullptr && std::fclose(f) != 0) throw std::runtime_error("cannot write " + path);
        if (!ok) throw std::runtime_error("cannot write the timeline " + path);
      }
      if (!o_.html.empty())
        write_html_report(unique_path(o_.html, r, index, ".html", html_names_), json, html_info(r));
    } catch (const std::runtime_error& e) {
      say(context_.err, e.what());
      return false;
    }
    return true;
  }

  static HtmlReportInfo html_info(const TraceReport& r) {
    HtmlReportInfo info;
    info.title = "memlake replay: " + r.trace->name();
    const MemlakeResult& m = *r.memlake;
    info.subtitle = "memlake on the " + m.backend + " backend: peak live " +
                    gib(static_cast<std::uint64_t>(m.stats.live_bytes.peak)) + ", peak reserved " +
                    gib(static_cast<std::uint64_t>(m.stats.reserved_bytes.peak)) +
                    " (utilization " +
                    fmt("%.3f", ratio(static_cast<std::uint64_t>(m.stats.live_bytes.peak),
                                      static_cast<std::uint64_t>(m.stats.reserved_bytes.peak))) +
                    ")";
    std::string baselines;
    for (const TraceBaseline& b : r.trace->meta.baselines)
      baselines += (baselines.empty() ? "" : ", ") + b.name + " " + gib(b.peak_reserved_bytes);
    if (!baselines.empty())
      info.notes.push_back(
          "PyTorch's allocators reserved at their peak on this trace: " + baselines + ".");
    info.notes.push_back(
        "Times are this replay's on this machine (memory-over-time follows the replay's clock), "
        "not "
        "the training run's; the memory is the same.");
    if (!m.fits) info.notes.push_back("The replay ran out of memory: " + m.oom_message);
    return info;
  }

  const ToolOptions& o_;
  const Config& config_;
  const ToolContext& context_;
  const bool several_;
  std::set<std::string> svg_names_, json_names_, html_names_;
};

// Whether the policy replayed ran out of memory.
bool does_not_fit(const TraceReport& r) {
  return r.memlake_policy ? !r.memlake->fits : !r.gmlake.fits;
}

int replay_all(const ToolOptions& o, const ToolContext& context) {
  const std::optional<Config> config = make_config(o, context.err);
  if (!config) return kExitBadInput;
  std::vector<Loaded> loaded;
  if (!load_traces(o.traces, loaded, context.err)) return kExitBadInput;

  const bool progress = o.progress && ::isatty(::fileno(context.err));
  TraceOutput output(o, *config, context, loaded.size());
  int status = kExitOk;
  for (std::size_t ti = 0; ti < loaded.size(); ++ti) {
    const Trace& t = loaded[ti].trace;
    try {
      TraceReplays replays(loaded[ti], o, *config, context, progress);
      const TraceReport r = replays.run();
      if (const int s = output.write(r, replays.setup(), ti, replays.timeline()); s != kExitOk)
        return s;
      if (does_not_fit(r)) status = kExitDoesNotFit;
    } catch (const ReplayError& e) {
      say(context.err, e.what());
      return kExitAllocator;
    } catch (...) {
      say(context.err, t.path + ": memlake-replay failed: " + current_exception_text());
      return kExitTool;
    }
  }
  return status;
}

[[noreturn]] void on_terminate() {
  const char* trace = g_replaying.load();
  std::string cause = "std::terminate was called";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      cause = "an uncaught exception ended the run: " + describe_exception(ex);
    } catch (...) {
      cause = "an uncaught exception ended the run (not a std::exception)";
    }
  }
  std::fprintf(stderr, "memlake-replay: %s%s\n", trace ? (std::string(trace) + ": ").c_str() : "",
               cause.c_str());
  std::_Exit(trace ? kExitAllocator : kExitTool);
}

}  // namespace

int run_replay_tool(const std::vector<std::string>& args, const ToolContext& context) {
  try {
    const ToolOptions o = parse_args(args);
    if (o.help) {
      std::fputs(kReplayUsage, context.out);
      return kExitOk;
    }
    return replay_all(o, context);
  } catch (const UsageError& e) {
    std::fprintf(context.err, "memlake-replay: %s\n(memlake-replay --help lists the options)\n",
                 e.what());
    return kExitBadInput;
  } catch (...) {
    say(context.err, "failed: " + current_exception_text());
    return kExitTool;
  }
}

void install_terminate_handler() {
  std::set_terminate(on_terminate);
}

int replay_tool_main(int argc, char** argv) {
  install_terminate_handler();
  return run_replay_tool(std::vector<std::string>(argv + 1, argv + argc));
}

}  // namespace memlake
