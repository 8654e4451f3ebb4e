// memlake-replay's options (see cli_options.hpp): the usage text and the
// parser, one function per group of options.
#include "replay/cli_options.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace memlake {

const char* const kReplayUsage = R"(usage: memlake-replay [options] TRACE...

Replays memlake-trace v1 files (gzip or plain CSV; see traces/FORMAT.md)
through memlake::Allocator and through a simulation of GMLake's allocator,
and reports, per trace: peak live and peak reserved bytes, utilization, the
ratio to each baseline of the trace header (native, expandable, async) and to
the GMLake policy, median, p99 and maximum nanoseconds per allocate/deallocate
(and per allocate after warm-up), the host time inside the allocator and in
its VMM calls on the replaying thread (all and after warm-up), VMM calls (all,
on the critical path, and on the critical path after warm-up), stitches and
OOMs.

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
  --needed               memory taken beyond what was needed: peak reserved
                         minus the smallest capacity at which the trace fits,
                         found by bisection in granularity steps between peak
                         live and peak reserved (a fresh allocator per try,
                         about log2((reserved - live) / granularity) tries).
                         Not on by default: on the bundled traces it makes
                         memlake-replay about 6 times slower. --min-capacity
                         reports it too, from its own answer
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
  --warmup FRACTION      share of the events counted as warm-up for the
                         "after warm-up" numbers (default 0.3)
  --slowest N            list the N slowest allocations after warm-up, each
                         with the stats it changed (event records and
                         queries, VMM calls, lock waits, bytes retired); a
                         stats snapshot around every allocation after
                         warm-up, outside its timing
  --pace FACTOR          between two events the replaying thread spins for
                         FACTOR times the trace's gap between them (at most
                         1 s): the host work of the recorded program (kernel
                         launches) between its allocations, so a worker on its
                         thread gets the gaps it gets in training; "seconds"
                         then stands for the allocating thread's time, host
                         work and allocator together (default 0: back to back)
  --json                 one JSON object per trace per line, instead of tables
  --svg FILE             memory over time: live bytes, reserved bytes of
                         memlake and of the GMLake policy, the baselines'
                         peaks; with several traces, one file per trace with
                         the trace name before .svg (FILE-NAME.svg)
  --svg-x event|ts       x axis of the chart: event index (default) or the
                         trace's timestamps
  --html FILE            the HTML report of memlake's replay (one page, no
                         network; docs/profiling.md): memory over time with
                         zoom and hover, fragmentation, the largest blocks at
                         the peak, streams, rungs, the slowest allocations and
                         what they did; times are the replay's. With several
                         traces, FILE-NAME.html per trace
  --timeline FILE        the replay's timeline as Chrome Trace Event JSON
                         (ui.perfetto.dev, chrome://tracing, memlake-report);
                         with several traces, FILE-NAME.json per trace
  --no-progress          no progress bar (shown on stderr when it is a TTY)
  -h, --help             this text

exit status (each failure is one line on stderr, "memlake-replay: " and the
trace, and its line where there is one, then the cause):
  0  every trace was replayed (and fits)
  1  a trace does not fit in the capacity (--capacity, or the configuration's
     capacity): an allocation ran out of memory; the report still comes
  2  bad input or usage: a malformed trace (unknown id, truncated gzip, ...;
     "FILE:LINE: reason"), a missing file, a bad option, --conf value or
     environment variable, an --svg, --html or --timeline file that cannot
     be written
  3  the allocator failed other than by running out of memory: its
     constructor, an allocate or a deallocate threw (misuse, a backend error,
     std::bad_alloc, any exception), it returned an address still live, or
     an exception left one of its threads; the replay stops there
  4  memlake-replay itself failed (host memory for its own bookkeeping, or
     an exception it does not know); the replay stops there
)";

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

namespace {

// Walks the arguments; an option's value comes after "=" or as the next
// argument.
class ArgReader {
 public:
  explicit ArgReader(const std::vector<std::string>& args) : args_(args) {}

  // The next argument, split into name and "=value"; false at the end.
  bool next() {
    if (i_ >= args_.size()) return false;
    arg_ = args_[i_++];
    has_value_ = false;
    value_.clear();
    if (const std::size_t eq = arg_.find('='); arg_.starts_with("--") && eq != std::string::npos) {
      value_ = arg_.substr(eq + 1);
      arg_.resize(eq);
      has_value_ = true;
    }
    return true;
  }
  const std::string& arg() const { return arg_; }
  std::string value() {
    if (has_value_) return value_;
    if (i_ >= args_.size()) throw UsageError(arg_ + " needs a value");
    return args_[i_++];
  }
  void no_value() const {
    if (has_value_) throw UsageError(arg_ + " takes no value");
  }
  // A size in bytes, at least `least`.
  std::uint64_t size(std::uint64_t least = 0) {
    const std::string v = value();
    const auto bytes = parse_size(v);
    if (!bytes || *bytes < least) throw UsageError(arg_ + ": bad size '" + v + "'");
    return *bytes;
  }
  // A number in [lo, hi], or in (lo, hi] when `above_lo`.
  double number(double lo, double hi, const char* expected, bool above_lo = false) {
    const std::string v = value();
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    const bool in_range = (above_lo ? x > lo : x >= lo) && x <= hi;
    if (v.empty() || *end != '\0' || !in_range)
      throw UsageError(arg_ + ": expected " + expected + ", got '" + v + "'");
    return x;
  }

 private:
  const std::vector<std::string>& args_;
  std::size_t i_ = 0;
  std::string arg_;
  std::string value_;
  bool has_value_ = false;
};

// --backend, --conf, --capacity, --min-capacity, --needed, --policy,
// --allocator, --warmup, --slowest, --pace. False: not one of them.
bool parse_replay_option(ArgReader& a, ToolOptions& o) {
  const std::string& arg = a.arg();
  if (arg == "--backend") {
    const std::string v = a.value();
    if (v != "host" && v != "cuda")
      throw UsageError("--backend: expected host or cuda, got '" + v + "'");
    o.backend = v == "host" ? BackendKind::host : BackendKind::cuda;
  } else if (arg == "--conf") {
    o.confs.push_back(a.value());
  } else if (arg == "--capacity") {
    o.capacity = a.size(1);
  } else if (arg == "--min-capacity") {
    a.no_value();
    o.min_capacity = true;
  } else if (arg == "--needed") {
    a.no_value();
    o.needed = true;
  } else if (arg == "--policy") {
    const std::string v = a.value();
    if (v != "memlake" && v != "gmlake")
      throw UsageError("--policy: expected memlake or gmlake, got '" + v + "'");
    o.gmlake_only = v == "gmlake";
  } else if (arg == "--allocator") {
    const std::string v = a.value();
    if (v != "cudaMallocAsync")
      throw UsageError("--allocator: the only stock allocator is cudaMallocAsync, got '" + v + "'");
    o.cuda_async = true;
  } else if (arg == "--warmup") {
    o.warmup = a.number(0, 1, "a fraction between 0 and 1");
  } else if (arg == "--pace") {
    o.pace = a.number(0, 1000, "a factor from 0 to 1000");
  } else if (arg == "--slowest") {
    const std::string v = a.value();
    char* end = nullptr;
    const unsigned long long k = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || v[0] == '-' || k > 100000)
      throw UsageError("--slowest: expected a count from 0 to 100000, got '" + v + "'");
    o.slowest = static_cast<std::size_t>(k);
  } else {
    return false;
  }
  return true;
}

// The GMLake simulation's knobs (--gmlake-*).
bool parse_gmlake_option(ArgReader& a, GmlakeOptions& g) {
  const std::string& arg = a.arg();
  if (arg == "--gmlake-frag-limit") {
    g.frag_limit = a.size();
  } else if (arg == "--gmlake-reuse-limit") {
    g.reuse_limit = a.number(0, HUGE_VAL, "a positive number", true);
  } else if (arg == "--gmlake-defrag-level") {
    const std::string v = a.value();
    if (v != "0" && v != "1" && v != "2")
      throw UsageError("--gmlake-defrag-level: expected 0, 1 or 2, got '" + v + "'");
    g.defrag_level = v[0] - '0';
  } else if (arg == "--gmlake-auto-gc") {
    const double gib = a.number(0, 1e9, "a number of GiB");
    g.auto_gc_bytes = static_cast<std::uint64_t>(gib * static_cast<double>(1ull << 30));
  } else if (arg == "--gmlake-no-stitch") {
    a.no_value();
    g.defragment = false;
  } else {
    return false;
  }
  return true;
}

// --json, --svg, --svg-x, --html, --timeline, --no-progress.
bool parse_output_option(ArgReader& a, ToolOptions& o) {
  const std::string& arg = a.arg();
  if (arg == "--json") {
    a.no_value();
    o.json = true;
  } else if (arg == "--svg") {
    o.svg = a.value();
    if (o.svg.empty()) throw UsageError("--svg needs a file name");
  } else if (arg == "--html") {
    o.html = a.value();
    if (o.html.empty()) throw UsageError("--html needs a file name");
  } else if (arg == "--timeline") {
    o.timeline = a.value();
    if (o.timeline.empty()) throw UsageError("--timeline needs a file name");
  } else if (arg == "--svg-x") {
    const std::string v = a.value();
    if (v != "event" && v != "ts")
      throw UsageError("--svg-x: expected event or ts, got '" + v + "'");
    o.svg_ts = v == "ts";
  } else if (arg == "--no-progress") {
    a.no_value();
    o.progress = false;
  } else {
    return false;
  }
  return true;
}

}  // namespace

ToolOptions parse_args(const std::vector<std::string>& args) {
  ToolOptions o;
  ArgReader a(args);
  bool only_files = false;
  while (a.next()) {
    const std::string& arg = a.arg();
    if (only_files || arg.empty() || arg[0] != '-' || arg == "-") {
      o.traces.push_back(arg);
    } else if (arg == "--") {
      only_files = true;
    } else if (arg == "-h" || arg == "--help") {
      a.no_value();
      return ToolOptions{.help = true};
    } else if (!parse_replay_option(a, o) && !parse_gmlake_option(a, o.gmlake) &&
               !parse_output_option(a, o)) {
      throw UsageError("unknown option " + arg);
    }
  }
  if (o.traces.empty()) throw UsageError("no trace given");
  return o;
}

}  // namespace memlake
