// Replay loops of memlake-replay (see replay.hpp). Only the allocate and
// deallocate calls sit between the two clock reads; stream lookups, stats
// snapshots and sampling happen outside them.
#include "replay/replay.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <numeric>
#include <string_view>
#include <typeinfo>
#include <unordered_map>
#include <utility>

#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "replay/steps.hpp"

namespace memlake {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::uint32_t ns_between(Clock::time_point a, Clock::time_point b) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(ns, 0, UINT32_MAX));
}

class ProgressBar {
 public:
  ProgressBar(const Progress& p, std::size_t total)
      : enabled_(p.enabled && total > 0), stream_(p.stream), label_(p.label), total_(total) {
    step_ = std::max<std::size_t>(1, total / 100);  // one redraw per percent
    if (enabled_) draw(0);
  }
  ~ProgressBar() {
    if (enabled_) std::fprintf(stream_, "\r\033[K");
  }
  void tick(std::size_t done) {
    if (enabled_ && done % step_ == 0) draw(done);
  }

 private:
  void draw(std::size_t done) {
    constexpr int kWidth = 40;
    const double f = static_cast<double>(done) / static_cast<double>(total_);
    const int filled = static_cast<int>(f * kWidth);
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
    bar[kWidth] = '\0';
    std::fprintf(stream_, "\r\033[K%s [%s] %3d%%", label_.c_str(), bar, static_cast<int>(f * 100));
    std::fflush(stream_);
  }

  bool enabled_;
  std::FILE* stream_;
  std::string label_;
  std::size_t total_;
  std::size_t step_ = 1;
};

// Remembers the path of the last allocation, so each timed call can be
// attributed to the rung of the ladder that served it, and, with the worker
// inline, adds up the time of its jobs (they run inside the calls, on the
// replaying thread; on its own thread the worker's reports would race).
class PathRecorder final : public Observer {
 public:
  void on_alloc(const AllocEvent& e) override { last = e.rung; }
  void on_worker_job(const WorkerJobEvent& e) override {
    if (inline_jobs) worker_ns += static_cast<std::uint64_t>(e.end_ns - e.start_ns);
  }
  // Ranges the caller's own requests mapped or extended: an inline worker
  // job nests inside an allocation, and its mappings are the worker's.
  void on_slow_begin(SlowWork w, std::size_t, void*) override {
    if (w == SlowWork::worker_job) ++in_worker_job;
  }
  void on_slow_end(SlowWork w) override {
    if (w == SlowWork::worker_job) --in_worker_job;
  }
  void on_map(const MapEvent&) override {
    if (in_worker_job == 0) ++caller_maps;
  }
  void on_chunk_created(std::size_t) override {
    if (in_worker_job == 0) ++caller_creates;
  }
  Rung last = Rung::fragment;
  bool inline_jobs = false;
  std::uint64_t worker_ns = 0;
  int in_worker_job = 0;
  std::uint64_t caller_maps = 0;
  std::uint64_t caller_creates = 0;
};

// The stats an allocation changed, other than the ones every allocation does.
std::vector<std::pair<const char*, std::int64_t>> stats_changed(const Stats& before,
                                                                const Stats& after) {
  std::vector<std::pair<const char*, std::int64_t>> changed;
#define MEMLAKE_STAT_DELTA(name, kind, help)     \
  if (after.name.current != before.name.current) \
    changed.emplace_back(#name, after.name.current - before.name.current);
  MEMLAKE_STAT_FIELDS(MEMLAKE_STAT_DELTA)
#undef MEMLAKE_STAT_DELTA
  std::erase_if(changed, [](const auto& c) {
    const std::string_view name = c.first;
    return name == "allocs" || name == "live_bytes" || name == "requested_bytes" ||
           name.starts_with("path_");
  });
  return changed;
}

// Keeps the `keep` slowest allocations seen (a min-heap on time).
class SlowestAllocs {
 public:
  explicit SlowestAllocs(std::size_t keep) : keep_(keep) {}
  bool wants(std::uint32_t ns) const {
    return keep_ != 0 && (heap_.size() < keep_ || ns > heap_.front().ns);
  }
  void add(SlowAlloc a) {
    heap_.push_back(std::move(a));
    std::push_heap(heap_.begin(), heap_.end(), faster);
    if (heap_.size() > keep_) {
      std::pop_heap(heap_.begin(), heap_.end(), faster);
      heap_.pop_back();
    }
  }
  std::vector<SlowAlloc> slowest_first() {
    std::sort_heap(heap_.begin(), heap_.end(), faster);
    return std::move(heap_);
  }

 private:
  static bool faster(const SlowAlloc& a, const SlowAlloc& b) { return a.ns > b.ns; }
  std::size_t keep_;
  std::vector<SlowAlloc> heap_;
};

}  // namespace

std::string describe_exception(const std::exception& e) {
  std::string kind;
  if (dynamic_cast<const out_of_memory*>(&e)) {
    kind = "out of memory";
  } else if (dynamic_cast<const misuse*>(&e)) {
    kind = "misuse";
  } else if (dynamic_cast<const backend_error*>(&e)) {
    kind = "backend error";
  } else if (dynamic_cast<const config_error*>(&e)) {
    kind = "configuration error";
  } else if (dynamic_cast<const error*>(&e)) {
    kind = "error";
  } else if (dynamic_cast<const std::bad_alloc*>(&e)) {
    kind = "a host memory request failed";
  } else {
    kind = "exception";
  }
  std::string what = e.what();
  for (char& c : what) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  // The type says what a bare what() (such as "std::bad_alloc") may not.
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  const std::string type = status == 0 && name ? name : typeid(e).name();
  std::free(name);
  return kind + " (" + type + "): " + what;
}

std::string current_exception_text() {
  try {
    throw;
  } catch (const std::exception& e) {
    return describe_exception(e);
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

Sampler::Sampler(std::size_t events, std::size_t points) {
  points = std::max<std::size_t>(points, 1);
  bucket_ = std::max<std::size_t>(1, (events + points - 1) / points);
  values_.assign((events + bucket_ - 1) / bucket_, 0);
}

void Sampler::add(std::size_t event, std::uint64_t value) {
  std::uint64_t& v = values_[event / bucket_];
  v = std::max(v, value);
}

Percentiles percentiles(std::vector<std::uint32_t> ns) {
  Percentiles p;
  p.count = ns.size();
  if (ns.empty()) return p;
  const std::size_t mid = ns.size() / 2;
  std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(mid), ns.end());
  p.median = ns[mid];
  // Nearest rank: the smallest value with at least 99% of samples <= it.
  const std::size_t rank = std::max<std::size_t>(1, (ns.size() * 99 + 99) / 100) - 1;
  std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(rank), ns.end());
  p.p99 = ns[rank];
  p.max = *std::max_element(ns.begin(), ns.end());
  return p;
}

namespace {

// The allocator of a replay, with the streams standing for the trace's
// stream ids (0 is the default stream), made before the first event.
class ReplayAllocator {
 public:
  ReplayAllocator(const ReplaySetup& setup, const Config& config) : trace_(*setup.trace) {
    try {
      alloc_ = setup.backend ? std::make_unique<Allocator>(config, setup.backend(config))
                             : std::make_unique<Allocator>(config);
    } catch (...) {
      throw ReplayError(trace_.path + ": cannot build the allocator: " + current_exception_text());
    }
    stream_of_.resize(trace_.events.size());
    std::unordered_map<std::uint64_t, Stream> streams;
    for (std::size_t i = 0; i < trace_.events.size(); ++i) {
      const std::uint64_t id = trace_.events[i].stream;
      auto [it, inserted] = streams.try_emplace(id, nullptr);
      if (inserted && id != 0) {
        it->second = guarded(i, "create_stream", 0, "", [&] { return alloc_->create_stream(); });
        created_.push_back(it->second);
      }
      stream_of_[i] = it->second;
    }
  }
  ReplayAllocator(const ReplayAllocator&) = delete;
  ReplayAllocator& operator=(const ReplayAllocator&) = delete;

  Allocator& operator*() { return *alloc_; }
  Allocator* operator->() { return alloc_.get(); }

  // allocate() for event i; out_of_memory passes through, any other failure
  // becomes a ReplayError naming the trace line. Nothing but the call runs
  // unless it throws: the caller times it.
  void* allocate(std::size_t i) {
    const Event& e = trace_.events[i];
    try {
      return alloc_->allocate(e.bytes, stream_of_[i]);
    } catch (const out_of_memory&) {
      throw;
    } catch (...) {
      throw failure(i, call_text("allocate", e.bytes, ""), current_exception_text());
    }
  }
  // deallocate() of block `p` with the size and stream of event i (its free,
  // or its alloc when the trace left it live).
  void deallocate(std::size_t i, void* p, const char* when = "") {
    const Event& e = trace_.events[i];
    guarded(i, "deallocate", e.bytes, when, [&] { alloc_->deallocate(p, e.bytes, stream_of_[i]); });
  }
  // The streams go back once the trace's blocks have.
  void destroy_streams() {
    for (Stream s : created_)
      guarded(0, "destroy_stream", 0, "", [&] { alloc_->destroy_stream(s); });
    created_.clear();
  }
  ReplayError failure(std::size_t i, const std::string& call, const std::string& cause) const {
    return ReplayError(where(i) + call + " failed: " + cause);
  }
  static std::string call_text(const char* call, std::size_t bytes, const char* when) {
    return std::string(call) + (bytes ? "(" + std::to_string(bytes) + ")" : "") + when;
  }

 private:
  std::string where(std::size_t i) const {
    if (trace_.lines.empty()) return trace_.path + ": ";
    return trace_.path + ":" + std::to_string(trace_.lines[i]) + ": ";
  }
  template <class F>
  auto guarded(std::size_t i, const char* call, std::size_t bytes, const char* when, F&& f)
      -> decltype(f()) {
    try {
      return f();
    } catch (...) {
      throw failure(i, call_text(call, bytes, when), current_exception_text());
    }
  }

  const Trace& trace_;
  std::unique_ptr<Allocator> alloc_;
  std::vector<Stream> stream_of_;
  std::vector<Stream> created_;
};

// One replay of a trace through memlake::Allocator: the event loop, and what
// it measures at each boundary (end of warm-up, each tenth, each step).
class MemlakeReplay {
 public:
  MemlakeReplay(const ReplaySetup& setup, const Config& config)
      : setup_(setup),
        trace_(*setup.trace),
        n_(trace_.events.size()),
        alloc_(setup, config),
        warm_(std::min(n_, static_cast<std::size_t>(static_cast<double>(n_) *
                                                    std::clamp(setup.warmup_fraction, 0.0, 1.0)))),
        sampler_(n_, std::max<std::size_t>(setup.series_points, 1)),
        slowest_(setup.timing ? setup.slowest : 0),
        step_starts_(detect_steps(trace_)) {
    r_.backend = alloc_->backend_name();
    r_.capacity = alloc_->capacity();
    r_.granularity = alloc_->granularity();
    r_.warmup_events = warm_;
    r_.worker_inline = config.worker == WorkerMode::inline_jobs;
    recorder_.inline_jobs = r_.worker_inline;
    ptr_.assign(n_, nullptr);
    live_.reserve(4096);
    if (setup_.observer) alloc_->add_observer(setup_.observer);
    if (setup_.timing) {
      alloc_->add_observer(&recorder_);
      alloc_path_.reserve(n_ / 2 + 1);
      alloc_ns_.reserve(n_ / 2 + 1);
      free_ns_.reserve(n_ / 2 + 1);
      if (r_.worker_inline) alloc_less_worker_ns_.reserve(n_ / 2 + 1);
    }
  }

  MemlakeResult run() {
    replay_events();
    give_back_live_blocks();
    summarize_timings();
    return std::move(r_);
  }

 private:
  void replay_events() {
    ProgressBar bar(setup_.progress, n_);
    const Clock::time_point start = Clock::now();
    std::size_t i = 0;
    for (; i < n_; ++i) {
      if (setup_.pace > 0 && i > 0) spin_for_gap(i);
      at_boundaries(i);
      if (trace_.events[i].op == TraceOp::alloc) {
        if (!replay_alloc(i)) break;
      } else {
        replay_free(i);
      }
      if (setup_.series_points)
        sampler_.add(i, static_cast<std::uint64_t>(alloc_->stats().reserved_bytes.current));
      bar.tick(i);
    }
    r_.seconds = seconds_since(start);
    if (n_ > 0) close_tenth();
    if (!step_starts_.empty()) close_step();
    r_.events_replayed = i;
    r_.stats = alloc_->stats();
    if (!r_.warmup && i == warm_) r_.warmup = r_.stats;
    if (warm_ >= i) {  // warm-up never ended
      allocs_at_warmup_ = alloc_ns_.size();
      frees_at_warmup_ = free_ns_.size();
    }
  }

  // The recorded program's host work between events i-1 and i, as a busy
  // thread: the worker gets the other cores, as beside a training thread.
  void spin_for_gap(std::size_t i) const {
    const std::uint64_t a = trace_.events[i - 1].ts_us, b = trace_.events[i].ts_us;
    if (b <= a) return;
    const double ns = std::min(1e9, static_cast<double>(b - a) * 1000.0 * setup_.pace);
    const Clock::time_point until =
        Clock::now() + std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
    while (Clock::now() < until) {
    }
  }

  // Snapshots before event i: the end of warm-up, of a tenth, of a step.
  void at_boundaries(std::size_t i) {
    if (i == warm_) {
      r_.warmup = alloc_->stats();
      allocs_at_warmup_ = alloc_ns_.size();
      frees_at_warmup_ = free_ns_.size();
    }
    if (i > 0 && i * 10 / n_ != (i - 1) * 10 / n_) close_tenth();
    if (next_step_ < step_starts_.size() && i == step_starts_[next_step_]) {
      close_step();
      step_began_ = i;
      ++next_step_;
    }
  }

  // False when the allocation ran out of memory: the replay ends there.
  bool replay_alloc(std::size_t i) {
    const bool explain = setup_.slowest != 0 && setup_.timing && i >= warm_;
    if (explain) before_ = alloc_->stats();
    void* p = nullptr;
    const std::uint64_t worker_before = recorder_.worker_ns;
    const std::uint64_t maps_before = recorder_.caller_maps;
    const std::uint64_t creates_before = recorder_.caller_creates;
    const Clock::time_point t0 = Clock::now();
    try {
      p = alloc_.allocate(i);
    } catch (const out_of_memory& ex) {
      r_.fits = false;
      r_.oom_event = i;
      r_.oom_message = ex.what();
      return false;
    }
    const Clock::time_point t1 = Clock::now();
    ptr_[i] = p;
    if (setup_.timing) {
      alloc_ns_.push_back(ns_between(t0, t1));
      alloc_path_.push_back(static_cast<std::uint8_t>(recorder_.last));
      alloc_mapped_.push_back(recorder_.caller_maps == maps_before         ? Mapped::no
                              : recorder_.caller_creates == creates_before ? Mapped::reserved
                                                                           : Mapped::new_memory);
      if (r_.worker_inline) {
        const std::uint32_t call = alloc_ns_.back();
        const std::uint64_t worker = recorder_.worker_ns - worker_before;
        alloc_less_worker_ns_.push_back(
            call - static_cast<std::uint32_t>(std::min<std::uint64_t>(worker, call)));
      }
      if (explain && slowest_.wants(alloc_ns_.back()))
        slowest_.add(
            {i, alloc_ns_.back(), recorder_.last, stats_changed(before_, alloc_->stats())});
    }
    check_not_live(i, p);
    return true;
  }

  // An allocator that hands out a live address is broken; say so here
  // rather than at some later free.
  void check_not_live(std::size_t i, void* p) {
    auto [it, fresh] = live_.try_emplace(p, i);
    if (fresh) return;
    char addr[32];
    std::snprintf(addr, sizeof addr, "%p", p);
    throw alloc_.failure(i, ReplayAllocator::call_text("allocate", trace_.events[i].bytes, ""),
                         std::string("it returned ") + addr + ", which is live since line " +
                             std::to_string(trace_.lines[it->second]));
  }

  void replay_free(std::size_t i) {
    void*& slot = ptr_[(*setup_.alloc_of)[i]];
    void* p = slot;
    slot = nullptr;
    live_.erase(p);
    const Clock::time_point t0 = Clock::now();
    alloc_.deallocate(i, p);
    const Clock::time_point t1 = Clock::now();
    if (setup_.timing) free_ns_.push_back(ns_between(t0, t1));
  }

  void close_tenth() {
    const std::int64_t now = alloc_->stats().critical_path_vmm_calls.current;
    r_.critical_path_by_tenth.push_back(now - critical_at_tenth_);
    critical_at_tenth_ = now;
    r_.alloc_ns_by_tenth.push_back(since(allocs_at_tenth_));
    allocs_at_tenth_ = alloc_ns_.size();
  }

  // Ends the step that began at step_began_.
  void close_step() {
    const Stats now = alloc_->stats();
    auto delta = [&](StatValue Stats::*field) {
      return (now.*field).current - (at_step_.*field).current;
    };
    StepReport step;
    step.first_event = step_began_;
    step.critical_path_vmm_calls = delta(&Stats::critical_path_vmm_calls);
    step.worker_vmm_calls = delta(&Stats::worker_vmm_calls);
    step.reserve_hits = delta(&Stats::reserve_hits);
    step.reserve_misses = delta(&Stats::reserve_misses);
    step.stitches = delta(&Stats::stitches);
    step.alloc_ns = since(allocs_at_step_);
    r_.steps.push_back(step);
    at_step_ = now;
    allocs_at_step_ = alloc_ns_.size();
  }

  // Percentiles of the allocations timed since the first `from` (of `ns`,
  // one entry per timed allocation: alloc_ns_ unless named).
  Percentiles since(std::size_t from) const { return since(alloc_ns_, from); }
  static Percentiles since(const std::vector<std::uint32_t>& ns, std::size_t from) {
    return percentiles(
        std::vector<std::uint32_t>(ns.begin() + static_cast<std::ptrdiff_t>(from), ns.end()));
  }

  // What the trace left live goes back, so that teardown is clean.
  void give_back_live_blocks() {
    if (setup_.observer) alloc_->remove_observer(setup_.observer);
    for (std::size_t k = 0; k < n_; ++k) {
      if (ptr_[k]) alloc_.deallocate(k, ptr_[k], " at the end of the trace");
    }
    alloc_.destroy_streams();
    if (setup_.timing) alloc_->remove_observer(&recorder_);
  }

  static std::uint64_t sum_from(const std::vector<std::uint32_t>& ns, std::size_t from) {
    return std::accumulate(ns.begin() + static_cast<std::ptrdiff_t>(from), ns.end(),
                           std::uint64_t{0});
  }

  void summarize_timings() {
    r_.allocator_ns_total = sum_from(alloc_ns_, 0) + sum_from(free_ns_, 0);
    if (r_.warmup)
      r_.allocator_ns_total_after_warmup =
          sum_from(alloc_ns_, allocs_at_warmup_) + sum_from(free_ns_, frees_at_warmup_);
    std::array<std::vector<std::uint32_t>, kRungCount> by_path;
    for (std::size_t k = allocs_at_warmup_; k < alloc_ns_.size(); ++k) {
      by_path[alloc_path_[k]].push_back(alloc_ns_[k]);
      r_.allocs_mapping_after_warmup += alloc_mapped_[k] != Mapped::no;
      r_.allocs_mapping_reserved_after_warmup += alloc_mapped_[k] == Mapped::reserved;
    }
    for (int p = 0; p < kRungCount; ++p)
      r_.alloc_ns_after_warmup_by_path[p] = percentiles(std::move(by_path[p]));
    r_.alloc_ns_after_warmup = since(allocs_at_warmup_);
    if (r_.worker_inline && r_.warmup)
      r_.alloc_ns_after_warmup_less_worker = since(alloc_less_worker_ns_, allocs_at_warmup_);
    std::vector<std::uint32_t> all = alloc_ns_;
    all.insert(all.end(), free_ns_.begin(), free_ns_.end());
    r_.alloc_ns = percentiles(std::move(alloc_ns_));
    r_.free_ns = percentiles(std::move(free_ns_));
    r_.all_ns = percentiles(std::move(all));
    r_.slowest = slowest_.slowest_first();
    if (setup_.series_points) r_.reserved_series = sampler_.values();
  }

  const ReplaySetup& setup_;
  const Trace& trace_;
  const std::size_t n_;
  PathRecorder recorder_;  // outlives the allocator it observes
  ReplayAllocator alloc_;
  const std::size_t warm_;
  MemlakeResult r_;
  std::vector<void*> ptr_;                       // per alloc event, while live
  std::unordered_map<void*, std::size_t> live_;  // address -> alloc event
  std::vector<std::uint32_t> alloc_ns_, free_ns_;
  std::vector<std::uint32_t> alloc_less_worker_ns_;  // with the worker inline: less its jobs
  std::vector<std::uint8_t> alloc_path_;
  // Whether an allocation mapped or extended a range itself, and over what.
  enum class Mapped : std::uint8_t { no, reserved, new_memory };
  std::vector<Mapped> alloc_mapped_;
  Sampler sampler_;
  SlowestAllocs slowest_;
  Stats before_;
  std::size_t allocs_at_warmup_ = 0;
  std::size_t frees_at_warmup_ = 0;
  std::int64_t critical_at_tenth_ = 0;
  std::size_t allocs_at_tenth_ = 0;
  const std::vector<std::size_t> step_starts_;
  std::size_t next_step_ = 0;
  std::size_t step_began_ = 0;
  Stats at_step_;
  std::size_t allocs_at_step_ = 0;
};

}  // namespace

MemlakeResult replay_memlake(const ReplaySetup& setup, const Config& config) {
  return MemlakeReplay(setup, config).run();
}

std::optional<std::int64_t> after_warmup(const MemlakeResult& m, StatValue Stats::*field) {
  if (!m.warmup) return std::nullopt;
  return (m.stats.*field).current - ((*m.warmup).*field).current;
}

GmlakeResult replay_gmlake(const ReplaySetup& setup, const GmlakeOptions& options) {
  const Trace& t = *setup.trace;
  const std::size_t n = t.events.size();
  GmlakeResult r;
  GmlakePolicy policy(options);
  Sampler sampler(n, std::max<std::size_t>(setup.series_points, 1));
  ProgressBar bar(setup.progress, n);
  const Clock::time_point start = Clock::now();
  std::size_t i = 0;
  for (; i < n; ++i) {
    const Event& e = t.events[i];
    if (e.op == TraceOp::alloc) {
      if (!policy.allocate(e.id, e.bytes, e.stream)) {
        r.fits = false;
        r.oom_event = i;
        break;
      }
    } else {
      policy.free(e.id);
    }
    if (setup.series_points) sampler.add(i, policy.reserved());
    bar.tick(i);
  }
  r.seconds = seconds_since(start);
  r.events_replayed = i;
  r.peak_reserved = policy.peak_reserved();
  r.peak_requested = policy.peak_requested();
  r.counters = policy.counters();
  if (setup.series_points) r.reserved_series = sampler.values();
  return r;
}

std::vector<std::uint64_t> live_series(const Trace& trace, std::size_t points) {
  Sampler sampler(trace.events.size(), points);
  std::uint64_t live = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    live = e.op == TraceOp::alloc ? live + e.bytes : live - e.bytes;
    sampler.add(i, live);
  }
  return sampler.values();
}

}  // namespace memlake
