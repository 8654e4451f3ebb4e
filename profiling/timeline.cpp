// The timeline's recording side (timeline.hpp): the ring, the state the
// events lead to, and writing at exit.
#include "profiling/timeline.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "common/timing.hpp"
#include "memlake/errors.hpp"
#include "profiling/trace_recorder.hpp"

namespace memlake {

void interval_add(std::map<std::uint64_t, Timeline::Range>& ranges, std::uint64_t va,
                  std::uint64_t bytes, bool stitched) {
  if (bytes == 0) return;
  auto after = ranges.lower_bound(va);
  if (after != ranges.begin()) {
    auto before = std::prev(after);
    if (before->first + before->second.bytes == va) {  // an extension at its end
      before->second.bytes += bytes;
      before->second.stitched = before->second.stitched || stitched;
      return;
    }
  }
  ranges[va] = Timeline::Range{bytes, stitched};
}

void interval_remove(std::map<std::uint64_t, Timeline::Range>& ranges, std::uint64_t va,
                     std::uint64_t bytes) {
  const std::uint64_t end = va + bytes;
  auto it = ranges.upper_bound(va);
  if (it != ranges.begin()) --it;
  while (it != ranges.end() && it->first < end) {
    const std::uint64_t first = it->first, last = it->first + it->second.bytes;
    const bool stitched = it->second.stitched;
    if (last <= va) {
      ++it;
      continue;
    }
    it = ranges.erase(it);
    if (first < va) ranges[first] = Timeline::Range{va - first, stitched};
    if (last > end) {
      ranges[end] = Timeline::Range{last - end, stitched};
      break;
    }
  }
}

namespace {
std::uint32_t clamped_duration(std::int64_t ns) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(ns, 0, UINT32_MAX));
}
}  // namespace

Timeline::Timeline(int device, std::size_t max_events, const std::string& path,
                   std::uint64_t capacity_bytes)
    : device_(device),
      max_events_(std::max<std::size_t>(max_events, 1)),
      path_(path.empty() ? path : TraceRecorder::expand(path, device)),
      capacity_bytes_(capacity_bytes),
      start_ns_(now_ns()) {
  // The ring's address space up front (up to 2M events, 96 MiB): pages are
  // only touched as events fill them, and no growth copies the ring on the
  // allocating thread. Larger rings grow past that.
  ring_.reserve(std::min<std::size_t>(max_events_, std::size_t{1} << 21));
  if (!path_.empty()) close_at_exit_register(this);
}

Timeline::~Timeline() {
  if (path_.empty()) return;
  close_at_exit_unregister(this);
  close_at_exit();
}

std::int64_t Timeline::now() const {
  return now_ns() - start_ns_;
}

void Timeline::push(const Record& r) {
  ++recorded_;
  if (ring_.size() < max_events_) {
    ring_.push_back(r);
    return;
  }
  ring_[next_] = r;
  next_ = next_ + 1 == max_events_ ? 0 : next_ + 1;
}

void Timeline::on_alloc(const AllocEvent& e) {
  const auto ptr = reinterpret_cast<std::uint64_t>(e.ptr);
  std::lock_guard lock(lock_);
  Record r;
  r.ns = now();
  r.dur_ns = clamped_duration(e.ns);
  r.addr = ptr;
  r.size = e.size;
  r.requested = e.bytes;
  r.stream = e.stream;
  r.kind = Kind::alloc;
  r.detail = static_cast<std::uint8_t>(e.rung);
  push(r);
  live_.put(ptr, Block{e.size, e.bytes, e.stream});
  totals_.live += static_cast<std::int64_t>(e.size);
}

void Timeline::on_free(const FreeEvent& e) {
  const auto ptr = reinterpret_cast<std::uint64_t>(e.ptr);
  std::lock_guard lock(lock_);
  const Block* b = live_.find(ptr);
  if (b == nullptr) return;  // allocated before the timeline began
  Record r;
  r.ns = now();
  r.addr = ptr;
  r.size = b->size;
  r.requested = b->requested;
  r.stream = e.stream;
  r.kind = Kind::free;
  push(r);
  totals_.live -= static_cast<std::int64_t>(b->size);
  live_.erase(ptr);
}

void Timeline::push_mapping(Kind kind, const MapEvent& e) {
  Record r;
  r.ns = now();
  r.addr = e.va;
  r.size = e.bytes;
  r.kind = kind;
  r.detail = e.stitched ? 1 : 0;
  push(r);
}

void Timeline::on_map(const MapEvent& e) {
  std::lock_guard lock(lock_);
  push_mapping(Kind::map, e);
  interval_add(ranges_, e.va, e.bytes, e.stitched);
  totals_.mapped += static_cast<std::int64_t>(e.bytes);
}

void Timeline::on_unmap(const MapEvent& e) {
  std::lock_guard lock(lock_);
  push_mapping(Kind::unmap, e);
  interval_remove(ranges_, e.va, e.bytes);
  totals_.mapped -= static_cast<std::int64_t>(e.bytes);
}

void Timeline::on_chunk_created(std::size_t bytes) {
  std::lock_guard lock(lock_);
  Record r;
  r.ns = now();
  r.size = bytes;
  r.kind = Kind::chunk_created;
  push(r);
  totals_.reserved += static_cast<std::int64_t>(bytes);
}

void Timeline::on_chunk_released(std::size_t bytes) {
  std::lock_guard lock(lock_);
  Record r;
  r.ns = now();
  r.size = bytes;
  r.kind = Kind::chunk_released;
  push(r);
  totals_.reserved -= static_cast<std::int64_t>(bytes);
}

void Timeline::on_reclaim(std::size_t released) {
  std::lock_guard lock(lock_);
  Record r;
  r.ns = now();
  r.size = released;
  r.kind = Kind::reclaim;
  push(r);
}

void Timeline::on_stream_wait(void* stream, void* source) {
  std::lock_guard lock(lock_);
  Record r;
  r.ns = now();
  r.addr = reinterpret_cast<std::uint64_t>(source);
  r.stream = stream;
  r.kind = Kind::stream_wait;
  push(r);
}

void Timeline::on_worker_job(const WorkerJobEvent& e) {
  std::lock_guard lock(lock_);
  Record r;
  r.ns = std::max<std::int64_t>(e.start_ns - start_ns_, 0);
  r.dur_ns = clamped_duration(e.end_ns - start_ns_ - r.ns);
  r.size = e.bytes;
  r.kind = Kind::worker_job;
  r.detail = static_cast<std::uint8_t>(e.kind);
  r.failed = e.failed;
  push(r);
}

void Timeline::on_oom(std::size_t bytes, void* stream) {
  std::lock_guard lock(lock_);
  Record r;
  r.ns = now();
  r.size = bytes;
  r.stream = stream;
  r.kind = Kind::oom;
  push(r);
}

Timeline::Copy Timeline::copy() const {
  Copy c;
  std::lock_guard lock(lock_);
  c.device = device_;
  c.capacity_events = max_events_;
  c.recorded = recorded_;
  c.now_ns = now();
  c.records.reserve(ring_.size());
  c.records.insert(c.records.end(), ring_.begin() + static_cast<std::ptrdiff_t>(next_),
                   ring_.end());
  c.records.insert(c.records.end(), ring_.begin(),
                   ring_.begin() + static_cast<std::ptrdiff_t>(next_));
  c.live.reserve(live_.size());
  live_.each([&](std::uint64_t ptr, const Block& b) { c.live.emplace(ptr, b); });
  c.ranges = ranges_;
  c.totals = totals_;
  c.capacity_bytes = capacity_bytes_;
  return c;
}

Timeline::Totals Timeline::totals() const {
  std::lock_guard lock(lock_);
  return totals_;
}

void Timeline::write(const std::string& path) const {
  const std::string json = trace_json();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(json.data(), static_cast<std::streamsize>(json.size()));
  if (out) out.close();
  if (!out) throw error("memlake: cannot write the timeline to " + path);
}

void Timeline::close_at_exit() {
  {
    std::lock_guard lock(lock_);
    if (written_) return;
    written_ = true;
  }
  try {
    write(path_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memlake: timeline: %s\n", e.what());
  }
}

}  // namespace memlake
