// Replay loops of memlake-replay (see replay.hpp). Only the allocate and
// deallocate calls sit between the two clock reads; stream lookups, stats
// snapshots and sampling happen outside them.
#include "replay/replay.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string_view>
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
      : enabled_(p.enabled && total > 0), label_(p.label), total_(total) {
    step_ = std::max<std::size_t>(1, total / 100);  // one redraw per percent
    if (enabled_) draw(0);
  }
  ~ProgressBar() {
    if (enabled_) std::fprintf(stderr, "\r\033[K");
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
    std::fprintf(stderr, "\r\033[K%s [%s] %3d%%", label_.c_str(), bar, static_cast<int>(f * 100));
    std::fflush(stderr);
  }

  bool enabled_;
  std::string label_;
  std::size_t total_;
  std::size_t step_ = 1;
};

// Remembers the path of the last allocation, so each timed call can be
// attributed to the rung of the ladder that served it.
class PathRecorder final : public Observer {
 public:
  void on_alloc(void*, std::size_t, void*, AllocPath path) override { last = path; }
  AllocPath last = AllocPath::stream_cache;
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

std::string where(const Trace& t, std::size_t i) {
  return t.path + ":" + std::to_string(t.lines[i]) + ": ";
}

}  // namespace

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
  return p;
}

MemlakeResult replay_memlake(const ReplaySetup& setup, const Config& config) {
  const Trace& t = *setup.trace;
  const std::vector<std::uint32_t>& alloc_of = *setup.alloc_of;
  const std::size_t n = t.events.size();
  MemlakeResult r;
  Allocator alloc(config);
  r.backend = alloc.backend_name();
  r.capacity = alloc.capacity();
  r.granularity = alloc.granularity();

  // Trace stream ids become the allocator's streams; 0 is the default stream.
  std::unordered_map<std::uint64_t, Stream> streams;
  std::vector<Stream> created;
  std::vector<Stream> stream_of(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto [it, inserted] = streams.try_emplace(t.events[i].stream, nullptr);
    if (inserted && t.events[i].stream != 0) {
      it->second = alloc.create_stream();
      created.push_back(it->second);
    }
    stream_of[i] = it->second;
  }

  std::vector<void*> ptr(n, nullptr);
  std::unordered_map<void*, std::size_t> live;
  live.reserve(4096);
  std::vector<std::uint32_t> alloc_ns;
  std::vector<std::uint32_t> free_ns;
  std::vector<std::uint8_t> alloc_path;
  PathRecorder recorder;
  if (setup.timing) {
    alloc.add_observer(&recorder);
    alloc_path.reserve(n / 2 + 1);
    alloc_ns.reserve(n / 2 + 1);
    free_ns.reserve(n / 2 + 1);
  }
  const std::size_t warm =
      std::min(n, static_cast<std::size_t>(static_cast<double>(n) *
                                           std::clamp(setup.warmup_fraction, 0.0, 1.0)));
  r.warmup_events = warm;
  Sampler sampler(n, std::max<std::size_t>(setup.series_points, 1));
  SlowestAllocs slowest(setup.timing ? setup.slowest : 0);
  Stats before;
  ProgressBar bar(setup.progress, n);

  const Clock::time_point start = Clock::now();
  std::size_t i = 0;
  std::int64_t critical_at_tenth = 0;
  std::size_t allocs_at_tenth = 0;
  std::size_t allocs_at_warmup = 0;
  const std::vector<std::size_t> step_starts = detect_steps(t);
  std::size_t next_step = 0;
  Stats at_step;
  std::size_t allocs_at_step = 0;
  auto close_step = [&](std::size_t first_event) {
    const Stats now = alloc.stats();
    StepReport step;
    step.first_event = first_event;
    step.critical_path_vmm_calls =
        now.critical_path_vmm_calls.current - at_step.critical_path_vmm_calls.current;
    step.worker_vmm_calls = now.worker_vmm_calls.current - at_step.worker_vmm_calls.current;
    step.reserve_hits = now.reserve_hits.current - at_step.reserve_hits.current;
    step.reserve_misses = now.reserve_misses.current - at_step.reserve_misses.current;
    step.prestitch_hits = now.prestitch_hits.current - at_step.prestitch_hits.current;
    step.prestitch_misses = now.prestitch_misses.current - at_step.prestitch_misses.current;
    step.alloc_ns = percentiles(std::vector<std::uint32_t>(
        alloc_ns.begin() + static_cast<std::ptrdiff_t>(allocs_at_step), alloc_ns.end()));
    r.steps.push_back(step);
    at_step = now;
    allocs_at_step = alloc_ns.size();
  };
  std::size_t step_began = 0;
  auto close_tenth = [&] {
    const std::int64_t now = alloc.stats().critical_path_vmm_calls.current;
    r.critical_path_by_tenth.push_back(now - critical_at_tenth);
    critical_at_tenth = now;
    r.alloc_ns_by_tenth.push_back(percentiles(std::vector<std::uint32_t>(
        alloc_ns.begin() + static_cast<std::ptrdiff_t>(allocs_at_tenth), alloc_ns.end())));
    allocs_at_tenth = alloc_ns.size();
  };
  for (; i < n; ++i) {
    if (i == warm) {
      r.warmup = alloc.stats();
      allocs_at_warmup = alloc_ns.size();
    }
    if (i > 0 && i * 10 / n != (i - 1) * 10 / n) close_tenth();
    if (next_step < step_starts.size() && i == step_starts[next_step]) {
      close_step(step_began);
      step_began = i;
      ++next_step;
    }
    const Event& e = t.events[i];
    if (e.op == TraceOp::alloc) {
      void* p = nullptr;
      const bool explain = setup.slowest != 0 && setup.timing && i >= warm;
      if (explain) before = alloc.stats();
      const Clock::time_point t0 = Clock::now();
      try {
        p = alloc.allocate(e.bytes, stream_of[i]);
      } catch (const out_of_memory& ex) {
        r.fits = false;
        r.oom_event = i;
        r.oom_message = ex.what();
        break;
      } catch (const error& ex) {
        throw ReplayError(where(t, i) + "allocate(" + std::to_string(e.bytes) +
                          ") failed: " + ex.what());
      }
      const Clock::time_point t1 = Clock::now();
      ptr[i] = p;
      if (setup.timing) {
        alloc_ns.push_back(ns_between(t0, t1));
        alloc_path.push_back(static_cast<std::uint8_t>(recorder.last));
        if (explain && slowest.wants(alloc_ns.back()))
          slowest.add({i, alloc_ns.back(), recorder.last, stats_changed(before, alloc.stats())});
      }
      // An allocator that hands out a live address is broken; say so here
      // rather than at some later free.
      if (auto [it, fresh] = live.try_emplace(p, i); !fresh) {
        char addr[32];
        std::snprintf(addr, sizeof addr, "%p", p);
        throw ReplayError(where(t, i) + "allocate(" + std::to_string(e.bytes) + ") returned " +
                          addr + ", which is live since line " +
                          std::to_string(t.lines[it->second]));
      }
    } else {
      void*& slot = ptr[alloc_of[i]];
      void* p = slot;
      slot = nullptr;
      live.erase(p);
      const Clock::time_point t0 = Clock::now();
      try {
        alloc.deallocate(p, e.bytes, stream_of[i]);
      } catch (const error& ex) {
        throw ReplayError(where(t, i) + "deallocate(" + std::to_string(e.bytes) +
                          ") failed: " + ex.what());
      }
      const Clock::time_point t1 = Clock::now();
      if (setup.timing) free_ns.push_back(ns_between(t0, t1));
    }
    if (setup.series_points)
      sampler.add(i, static_cast<std::uint64_t>(alloc.stats().reserved_bytes.current));
    bar.tick(i);
  }
  r.seconds = seconds_since(start);
  r.slowest = slowest.slowest_first();
  if (n > 0) close_tenth();
  if (!step_starts.empty()) close_step(step_began);
  r.events_replayed = i;
  r.stats = alloc.stats();
  if (!r.warmup && i == warm) r.warmup = r.stats;

  // What the trace left live goes back, so that teardown is clean.
  for (std::size_t k = 0; k < n; ++k) {
    if (!ptr[k]) continue;
    try {
      alloc.deallocate(ptr[k], t.events[k].bytes, stream_of[k]);
    } catch (const error& ex) {
      throw ReplayError(where(t, k) + "deallocate at the end of the trace failed: " + ex.what());
    }
  }
  for (Stream s : created) alloc.destroy_stream(s);

  if (setup.timing) alloc.remove_observer(&recorder);
  if (warm >= i) allocs_at_warmup = alloc_ns.size();  // warm-up never ended
  std::array<std::vector<std::uint32_t>, kAllocPathCount> by_path;
  for (std::size_t k = allocs_at_warmup; k < alloc_ns.size(); ++k)
    by_path[alloc_path[k]].push_back(alloc_ns[k]);
  for (int p = 0; p < kAllocPathCount; ++p)
    r.alloc_ns_after_warmup_by_path[p] = percentiles(std::move(by_path[p]));
  r.alloc_ns_after_warmup = percentiles(std::vector<std::uint32_t>(
      alloc_ns.begin() + static_cast<std::ptrdiff_t>(allocs_at_warmup), alloc_ns.end()));
  std::vector<std::uint32_t> all = alloc_ns;
  all.insert(all.end(), free_ns.begin(), free_ns.end());
  r.alloc_ns = percentiles(std::move(alloc_ns));
  r.free_ns = percentiles(std::move(free_ns));
  r.all_ns = percentiles(std::move(all));
  if (setup.series_points) r.reserved_series = sampler.values();
  return r;
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

std::uint64_t min_capacity_search(std::uint64_t known_fail, std::uint64_t known_fit,
                                  std::uint64_t step,
                                  const std::function<bool(std::uint64_t)>& fits, int* tries) {
  std::uint64_t lo = known_fail / step;
  std::uint64_t hi = (known_fit + step - 1) / step;
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    ++*tries;
    if (fits(mid * step)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi * step;
}

CapacitySearch find_min_capacity(std::uint64_t start, std::uint64_t limit, std::uint64_t live,
                                 std::uint64_t step,
                                 const std::function<bool(std::uint64_t)>& fits) {
  CapacitySearch c;
  const auto up = [step](std::uint64_t v) { return (std::max(v, step) + step - 1) / step * step; };
  std::uint64_t hi = up(start);
  for (;;) {
    ++c.tries;
    if (fits(hi)) {
      c.found = true;
      break;
    }
    if (hi >= limit) return c;
    hi = std::min(up(limit), up(hi + hi / 4));
  }
  const std::uint64_t fail = live > step ? up(live) - step : 0;
  c.bytes = fail < hi ? min_capacity_search(fail, hi, step, fits, &c.tries) : hi;
  return c;
}

}  // namespace memlake
