// Timeline::trace_json_of: the events kept, as Chrome Trace Event JSON.
//
// One process per device (pid = device), with these tracks (tid):
//   1  mapping worker   its jobs as slices
//   2  mappings         map and unmap of virtual ranges as instants
//   3  allocator        reclaim and out of memory as process-wide instants
//   10+ stream N        each allocation as a slice over its time inside
//                       allocate, named by the rung that served it; frees
//                       and GPU-side waits as instants
// and the counters "live bytes", "reserved bytes", "mapped bytes". The state
// before the oldest event kept (worked out backwards from the current state)
// opens the trace: the counters' values then, and the blocks and ranges
// already there as instants. Every track's events come in time order.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiling/json_text.hpp"
#include "profiling/timeline.hpp"

namespace memlake {

namespace {

constexpr int kWorkerTrack = 1, kMappingsTrack = 2, kAllocatorTrack = 3, kFirstStreamTrack = 10;

using Kind = Timeline::Kind;

// The state before the first record: the current state with every record
// undone, newest first.
void rewind(Timeline::Copy& c) {
  for (auto it = c.records.rbegin(); it != c.records.rend(); ++it) {
    const Timeline::Record& r = *it;
    const auto bytes = static_cast<std::int64_t>(r.size);
    switch (r.kind) {
      case Kind::alloc:
        c.live.erase(r.addr);
        c.totals.live -= bytes;
        break;
      case Kind::free:
        c.live[r.addr] = Timeline::Block{r.size, r.requested, r.stream};
        c.totals.live += bytes;
        break;
      case Kind::map:
        interval_remove(c.ranges, r.addr, r.size);
        c.totals.mapped -= bytes;
        break;
      case Kind::unmap:
        interval_add(c.ranges, r.addr, r.size, r.detail != 0);
        c.totals.mapped += bytes;
        break;
      case Kind::chunk_created:
        c.totals.reserved -= bytes;
        break;
      case Kind::chunk_released:
        c.totals.reserved += bytes;
        break;
      default:
        break;
    }
  }
}

// Where a record's mark starts on its track.
std::int64_t start_of(const Timeline::Record& r) {
  return r.kind == Kind::alloc ? std::max<std::int64_t>(r.ns - std::int64_t{r.dur_ns}, 0) : r.ns;
}

class TraceWriter {
 public:
  explicit TraceWriter(int device) : pid_(device) {}

  int stream_track(void* stream) {
    auto [it, fresh] =
        tracks_.try_emplace(stream, kFirstStreamTrack + static_cast<int>(order_.size()));
    if (fresh) order_.push_back(stream);
    return it->second;
  }
  const std::vector<void*>& streams() const { return order_; }

  // {"ph":ph,"pid":..,"tid":..,"name":name,"ts":..  (the caller closes it)
  void open(char ph, int tid, std::string_view name, std::int64_t ns) {
    out_ += first_ ? "\n" : ",\n";
    first_ = false;
    out_ += "{\"ph\":\"";
    out_ += ph;
    out_ += "\",\"pid\":";
    json::number(out_, std::int64_t{pid_});
    out_ += ",\"tid\":";
    json::number(out_, std::int64_t{tid});
    out_ += ",\"name\":";
    json::string(out_, name);
    if (ph != 'M') {
      out_ += ",\"ts\":";
      json::micros(out_, ns);
    }
  }
  void metadata(int tid, std::string_view what, std::string_view name) {
    open('M', tid, what, 0);
    out_ += ",\"args\":{\"name\":";
    json::string(out_, name);
    out_ += "}}";
  }
  void sort_index(int tid, std::string_view what, std::int64_t index) {
    open('M', tid, what, 0);
    out_ += ",\"args\":{\"sort_index\":";
    json::number(out_, index);
    out_ += "}}";
  }
  void counter(std::string_view name, std::int64_t ns, std::int64_t bytes) {
    open('C', 0, name, ns);
    out_ += ",\"args\":{\"bytes\":";
    json::number(out_, bytes);
    out_ += "}}";
  }
  // An instant with the scope 't' (its track) or 'p' (the process); the
  // caller adds ",\"args\":{...}}".
  void instant(int tid, std::string_view name, std::int64_t ns, char scope) {
    open('i', tid, name, ns);
    out_ += ",\"s\":\"";
    out_ += scope;
    out_ += '"';
  }
  void slice(int tid, std::string_view name, std::int64_t ns, std::int64_t dur_ns) {
    open('X', tid, name, ns);
    out_ += ",\"dur\":";
    json::micros(out_, dur_ns);
  }
  std::string& out() { return out_; }

 private:
  int pid_;
  std::string out_;
  bool first_ = true;
  std::unordered_map<void*, int> tracks_;
  std::vector<void*> order_;
};

std::string stream_name(void* stream) {
  if (stream == nullptr) return "stream 0 (default)";
  std::string s = "stream ";
  json::address(s, reinterpret_cast<std::uint64_t>(stream));
  s.erase(std::remove(s.begin(), s.end(), '"'), s.end());
  return s;
}

void block_args(std::string& o, std::uint64_t ptr, std::uint64_t size, std::uint64_t requested) {
  o += ",\"args\":{\"ptr\":";
  json::address(o, ptr);
  o += ",\"size\":";
  json::number(o, size);
  o += ",\"bytes\":";
  json::number(o, requested);
}

}  // namespace

void Timeline::window_fields(std::string& o, const Copy& c) {
  o += "\"device\":";
  json::number(o, std::int64_t{c.device});
  o += ",\"events_kept\":";
  json::number(o, std::uint64_t{c.records.size()});
  o += ",\"events_dropped\":";
  json::number(o, c.recorded - c.records.size());
}

std::string Timeline::trace_json_of(const Copy& current) {
  Copy c = current;
  rewind(c);
  TraceWriter w(c.device);
  std::int64_t t0 = c.now_ns;
  for (const Record& r : c.records) t0 = std::min(t0, start_of(r));

  // Tracks in order of first use: the blocks live before the window, then
  // the events.
  std::vector<std::pair<std::uint64_t, Block>> initial(c.live.begin(), c.live.end());
  std::sort(initial.begin(), initial.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [ptr, b] : initial) w.stream_track(b.stream);
  for (const Record& r : c.records)
    if (r.kind == Kind::alloc || r.kind == Kind::free || r.kind == Kind::stream_wait)
      w.stream_track(r.stream);

  std::string& o = w.out();
  o += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"source\":\"memlake timeline\",";
  window_fields(o, c);
  o += ",\"ring_capacity\":";
  json::number(o, std::uint64_t{c.capacity_events});
  o += "},\"traceEvents\":[";
  const std::string process = "memlake device " + std::to_string(c.device);
  w.metadata(0, "process_name", process);
  w.metadata(kWorkerTrack, "thread_name", "mapping worker");
  w.metadata(kMappingsTrack, "thread_name", "mappings");
  w.metadata(kAllocatorTrack, "thread_name", "allocator");
  for (void* s : w.streams()) w.metadata(w.stream_track(s), "thread_name", stream_name(s));
  for (int tid : {kAllocatorTrack, kWorkerTrack, kMappingsTrack})
    w.sort_index(tid, "thread_sort_index", tid);
  for (void* s : w.streams())
    w.sort_index(w.stream_track(s), "thread_sort_index", w.stream_track(s));

  Totals t = c.totals;
  w.counter("live bytes", t0, t.live);
  w.counter("reserved bytes", t0, t.reserved);
  w.counter("mapped bytes", t0, t.mapped);
  for (const auto& [va, range] : c.ranges) {
    w.instant(kMappingsTrack, "mapped before the window", t0, 't');
    o += ",\"args\":{\"va\":";
    json::address(o, va);
    o += ",\"bytes\":";
    json::number(o, range.bytes);
    o += "}}";
  }
  for (const auto& [ptr, b] : initial) {
    w.instant(w.stream_track(b.stream), "live before the window", t0, 't');
    block_args(o, ptr, b.size, b.requested);
    o += "}}";
  }

  for (const Record& r : c.records) {
    const auto bytes = static_cast<std::int64_t>(r.size);
    switch (r.kind) {
      case Kind::alloc: {
        const Rung rung = static_cast<Rung>(r.detail);
        w.slice(w.stream_track(r.stream), std::string("alloc ") + rung_name(rung), start_of(r),
                r.ns - start_of(r));
        o += ",\"cat\":\"alloc\"";
        block_args(o, r.addr, r.size, r.requested);
        o += ",\"rung\":";
        json::string(o, rung_name(rung));
        o += "}}";
        t.live += bytes;
        w.counter("live bytes", r.ns, t.live);
        break;
      }
      case Kind::free:
        w.instant(w.stream_track(r.stream), "free", r.ns, 't');
        o += ",\"cat\":\"free\"";
        block_args(o, r.addr, r.size, r.requested);
        o += "}}";
        t.live -= bytes;
        w.counter("live bytes", r.ns, t.live);
        break;
      case Kind::map:
      case Kind::unmap:
        w.instant(kMappingsTrack, r.kind == Kind::map ? "map" : "unmap", r.ns, 't');
        o += ",\"cat\":\"mapping\",\"args\":{\"va\":";
        json::address(o, r.addr);
        o += ",\"bytes\":";
        json::number(o, r.size);
        o += r.detail != 0 ? ",\"stitched\":true}}" : ",\"stitched\":false}}";
        t.mapped += r.kind == Kind::map ? bytes : -bytes;
        w.counter("mapped bytes", r.ns, t.mapped);
        break;
      case Kind::chunk_created:
      case Kind::chunk_released:
        t.reserved += r.kind == Kind::chunk_created ? bytes : -bytes;
        w.counter("reserved bytes", r.ns, t.reserved);
        break;
      case Kind::reclaim:
        w.instant(kAllocatorTrack, "reclaim", r.ns, 'p');
        o += ",\"args\":{\"released\":";
        json::number(o, r.size);
        o += "}}";
        break;
      case Kind::oom:
        w.instant(kAllocatorTrack, "out of memory", r.ns, 'p');
        o += ",\"args\":{\"requested\":";
        json::number(o, r.size);
        o += ",\"stream\":";
        json::string(o, stream_name(r.stream));
        o += ",\"live\":";
        json::number(o, t.live);
        o += ",\"reserved\":";
        json::number(o, t.reserved);
        o += "}}";
        break;
      case Kind::stream_wait:
        w.instant(w.stream_track(r.stream), "wait for another stream", r.ns, 't');
        o += ",\"args\":{\"on\":";
        json::string(o, stream_name(reinterpret_cast<void*>(r.addr)));
        o += "}}";
        break;
      case Kind::worker_job:
        w.slice(kWorkerTrack, worker_job_name(static_cast<WorkerJobKind>(r.detail)), r.ns,
                std::int64_t{r.dur_ns});
        o += ",\"cat\":\"worker\",\"args\":{\"bytes\":";
        json::number(o, r.size);
        o += r.failed ? ",\"failed\":true}}" : ",\"failed\":false}}";
        break;
    }
  }
  o += "\n]}\n";
  return std::move(o);
}

}  // namespace memlake
