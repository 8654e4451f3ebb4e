// The replays of memlake-replay: a trace through memlake::Allocator (timed,
// with stats snapshots at the end of warm-up and at the end) and through the
// GMLake policy simulation, and memory-over-time sampling for the chart.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "memlake/config.hpp"
#include "memlake/observer.hpp"
#include "memlake/stats.hpp"
#include "replay/gmlake_policy.hpp"
#include "trace/trace.hpp"

namespace memlake {

// The allocator failed in a way that is not out of memory: its constructor,
// an allocate or a deallocate threw something other than
// memlake::out_of_memory (misuse, a backend error, std::bad_alloc, anything),
// or it handed out an address that was still live. what() is one line that
// names the trace (and the line of the event, where there is one) and the
// cause.
class ReplayError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One line describing an exception caught from the allocator: its kind
// (out of memory, misuse, backend error, host memory, ...) and what() with
// line breaks flattened.
std::string describe_exception(const std::exception& e);
// The same for the exception being handled; only inside a catch block.
std::string current_exception_text();

// Makes the backend of an allocator: lets a caller (a test) put adaptors or
// a faulty backend under a replay. Empty: the configuration's backend.
using BackendFactory = std::function<std::unique_ptr<Backend>(const Config&)>;

// Memory over time with at most `points` points: each point is the maximum
// over a run of consecutive events (x is the bucket's last event).
class Sampler {
 public:
  Sampler(std::size_t events, std::size_t points);
  void add(std::size_t event, std::uint64_t value);
  const std::vector<std::uint64_t>& values() const { return values_; }
  std::size_t bucket_size() const { return bucket_; }

 private:
  std::size_t bucket_;
  std::vector<std::uint64_t> values_;
};

struct Percentiles {
  std::uint64_t count = 0;
  std::uint64_t median = 0;
  std::uint64_t p99 = 0;
  std::uint64_t max = 0;
};
Percentiles percentiles(std::vector<std::uint32_t> ns);

struct Progress {
  bool enabled = false;
  std::string label;
  std::FILE* stream = stderr;
};

struct ReplaySetup {
  const Trace* trace = nullptr;
  const std::vector<std::uint32_t>* alloc_of = nullptr;  // from match_frees()
  double warmup_fraction = 0.3;
  bool timing = true;
  std::size_t series_points = 0;  // 0: no series
  // Keep the this many slowest allocations after warm-up, each with what it
  // changed in the stats (a stats snapshot around every one of them).
  std::size_t slowest = 0;
  // Before each event after the first, spin for this many times the trace's
  // gap since the previous event (at most 1 s): the recorded program's own
  // host work. 0: events back to back.
  double pace = 0;
  Progress progress;
  BackendFactory backend;
  // Also told every event of the replay (added before the first event,
  // removed before the blocks the trace left live go back): the timeline of
  // --html and --timeline.
  Observer* observer = nullptr;
};

// One of the slowest allocations after warm-up, and the stats it moved:
// events recorded and queried, VMM calls, lock waits, bytes retired.
struct SlowAlloc {
  std::size_t event = 0;  // index into the trace's events
  std::uint32_t ns = 0;
  Rung path = Rung::fragment;                                 // the rung that served it
  std::vector<std::pair<const char*, std::int64_t>> changed;  // stat name, change of current
};

// One training step of the trace (detect_steps): what the allocator did in it.
struct StepReport {
  std::size_t first_event = 0;
  std::int64_t critical_path_vmm_calls = 0;
  std::int64_t worker_vmm_calls = 0;
  std::int64_t reserve_hits = 0, reserve_misses = 0;
  std::int64_t stitches = 0;  // stitched ranges built
  Percentiles alloc_ns;
};

struct MemlakeResult {
  std::string backend;
  std::size_t capacity = 0;
  std::size_t granularity = 0;
  std::size_t events_replayed = 0;
  bool fits = true;
  std::optional<std::size_t> oom_event;  // index of the allocation that failed
  std::string oom_message;
  Stats stats;                  // after the last event replayed
  std::optional<Stats> warmup;  // after the first warmup_fraction of the events
  std::size_t warmup_events = 0;
  // Critical-path VMM calls in each tenth of the events: where they happen
  // (a new phase of the training run, or its steady state).
  std::vector<std::int64_t> critical_path_by_tenth;
  std::vector<Percentiles> alloc_ns_by_tenth;
  // The same per training step, where the trace shows steps (detect_steps);
  // the first entry is everything before the first step's start.
  std::vector<StepReport> steps;
  // Allocations after warm-up, all and by the path that served them: which
  // rung of the ladder the slow tail comes from.
  Percentiles alloc_ns_after_warmup;
  // With the worker inline (and warm-up ended): the same less the time of
  // the worker's jobs that ran inside each call, which a worker on its own
  // thread runs beside the allocating thread instead.
  std::optional<Percentiles> alloc_ns_after_warmup_less_worker;
  std::array<Percentiles, kRungCount> alloc_ns_after_warmup_by_path{};
  // Allocations after warm-up that mapped or extended a range on the
  // allocating thread (the inline worker's jobs left out). Unlike the
  // percentiles it does not move with the host's noise: with every VMM call
  // costing more than 20 us (host_simulate_latency), allocate p99 after
  // warm-up stays under 20 us only while this is under 1% of them.
  std::size_t allocs_mapping_after_warmup = 0;
  // Of them, those that created no chunk: served from reserved memory, and
  // still mapping on the allocating thread.
  std::size_t allocs_mapping_reserved_after_warmup = 0;
  Percentiles alloc_ns, free_ns, all_ns;
  // Host ns inside allocate and deallocate on the replaying thread: the sum
  // of the timed calls, all and after warm-up (none when warm-up never
  // ended). 0 without timing.
  std::uint64_t allocator_ns_total = 0;
  std::optional<std::uint64_t> allocator_ns_total_after_warmup;
  // The mapping worker ran its jobs inline (memlake-replay's default): its
  // VMM calls (stats worker_vmm_ns) are then part of the allocator's time
  // above, where with the worker on its own thread they are not.
  bool worker_inline = false;
  std::vector<SlowAlloc> slowest;  // slowest first
  double seconds = 0;
  std::vector<std::uint64_t> reserved_series;  // max reserved per Sampler bucket
};

struct GmlakeResult {
  std::size_t events_replayed = 0;
  bool fits = true;
  std::optional<std::size_t> oom_event;
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_requested = 0;
  GmlakeCounters counters;
  double seconds = 0;
  std::vector<std::uint64_t> reserved_series;
};

// Throws ReplayError when the allocator fails other than by running out of
// memory (which ends the replay with fits = false); anything else that
// escapes is the replay's own failure (host memory for its bookkeeping).
MemlakeResult replay_memlake(const ReplaySetup& setup, const Config& config);

// What the stat `field` (a counter) gained after warm-up; nullopt when
// warm-up never ended.
std::optional<std::int64_t> after_warmup(const MemlakeResult& m, StatValue Stats::*field);
GmlakeResult replay_gmlake(const ReplaySetup& setup, const GmlakeOptions& options);

// Requested live bytes over time, sampled like the replays.
std::vector<std::uint64_t> live_series(const Trace& trace, std::size_t points);

}  // namespace memlake
