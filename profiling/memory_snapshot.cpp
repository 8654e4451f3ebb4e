// Timeline::snapshot_json_of: the current state and the events kept, in the
// form of PyTorch's memory snapshot (torch.cuda.memory._snapshot()), which
// pytorch.org/memory_viz and torch.cuda._memory_viz read once pickled
// (python/memlake/memory_snapshot.py does that):
//
//   segments       one per mapped range (an extension joins its range), with
//                  "stitched" telling a range over chunks that existed
//                  before it; its blocks tile it: live blocks as
//                  "active_allocated", the gaps as "inactive"
//   device_traces  one list per device up to this one: alloc,
//                  free_requested + free_completed (a free goes back to the
//                  lake at once), segment_map / segment_unmap, oom
//
// Addresses and sizes are JSON integers. A chunk mapped in several ranges
// appears in each, so the segments add up to mapped bytes, not reserved.
#include <algorithm>
#include <string>
#include <vector>

#include "profiling/json_text.hpp"
#include "profiling/timeline.hpp"

namespace memlake {

namespace {

using Kind = Timeline::Kind;
constexpr std::uint64_t kLargeSegment = std::uint64_t{1} << 20;  // PyTorch's "large"

void key(std::string& o, std::string_view k) {
  json::string(o, k);
  o += ':';
}

void frames_and_time(std::string& o, std::int64_t ns) {
  o += ",\"frames\":[],\"time_us\":";
  json::number(o, ns / 1000);
}

void event(std::string& o, bool& first, std::string_view action, std::uint64_t addr,
           std::uint64_t size, void* stream, std::int64_t ns) {
  o += first ? "\n{" : ",\n{";
  first = false;
  key(o, "action");
  json::string(o, action);
  o += ",\"addr\":";
  json::number(o, addr);
  o += ",\"size\":";
  json::number(o, size);
  o += ",\"stream\":";
  json::number(o, reinterpret_cast<std::uint64_t>(stream));
  frames_and_time(o, ns);
}

std::int64_t reserved_before(const Timeline::Copy& c) {
  std::int64_t reserved = c.totals.reserved;
  for (const Timeline::Record& r : c.records) {
    if (r.kind == Kind::chunk_created) reserved -= static_cast<std::int64_t>(r.size);
    if (r.kind == Kind::chunk_released) reserved += static_cast<std::int64_t>(r.size);
  }
  return reserved;
}

}  // namespace

std::string Timeline::snapshot_json_of(const Copy& c) {
  std::vector<std::pair<std::uint64_t, Block>> blocks(c.live.begin(), c.live.end());
  std::sort(blocks.begin(), blocks.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string o = "{\"segments\":[";
  std::size_t next = 0;  // the first block not yet placed
  std::vector<std::uint64_t> unplaced;
  bool first_segment = true;
  for (const auto& [va, range] : c.ranges) {
    const std::uint64_t end = va + range.bytes;
    while (next < blocks.size() && blocks[next].first < va)
      unplaced.push_back(blocks[next++].first);
    std::size_t last = next;
    std::uint64_t allocated = 0, requested = 0;
    while (last < blocks.size() && blocks[last].first + blocks[last].second.size <= end) {
      allocated += blocks[last].second.size;
      requested += blocks[last].second.requested;
      ++last;
    }
    o += first_segment ? "\n{" : ",\n{";
    first_segment = false;
    o += "\"device\":";
    json::number(o, std::int64_t{c.device});
    o += ",\"address\":";
    json::number(o, va);
    o += ",\"total_size\":";
    json::number(o, range.bytes);
    o += ",\"allocated_size\":";
    json::number(o, allocated);
    o += ",\"active_size\":";
    json::number(o, allocated);
    o += ",\"requested_size\":";
    json::number(o, requested);
    o += ",\"stream\":0,\"segment_type\":";
    json::string(o, range.bytes > kLargeSegment ? "large" : "small");
    o += ",\"segment_pool_id\":[0,0],\"is_expandable\":false,\"stitched\":";
    o += range.stitched ? "true" : "false";
    o += ",\"frames\":[],\"blocks\":[";
    std::uint64_t at = va;
    bool first_block = true;
    auto block = [&](std::uint64_t addr, std::uint64_t size, std::uint64_t req, bool live) {
      o += first_block ? "{" : ",{";
      first_block = false;
      o += "\"address\":";
      json::number(o, addr);
      o += ",\"size\":";
      json::number(o, size);
      o += ",\"requested_size\":";
      json::number(o, req);
      o += live ? ",\"state\":\"active_allocated\",\"frames\":[]}"
                : ",\"state\":\"inactive\",\"frames\":[]}";
    };
    for (std::size_t i = next; i < last; ++i) {
      const auto& [ptr, b] = blocks[i];
      if (ptr > at) block(at, ptr - at, 0, false);
      block(ptr, b.size, b.requested, true);
      at = ptr + b.size;
    }
    if (at < end) block(at, end - at, 0, false);
    o += "]}";
    next = last;
  }
  while (next < blocks.size()) unplaced.push_back(blocks[next++].first);

  o += "],\n\"device_traces\":[";
  for (int d = 0; d < c.device; ++d) o += "[],";
  o += '[';
  bool first = true;
  std::int64_t reserved = reserved_before(c);
  for (const Record& r : c.records) {
    switch (r.kind) {
      case Kind::alloc:
        event(o, first, "alloc", r.addr, r.size, r.stream, r.ns);
        o += ",\"memlake_rung\":";
        json::string(o, rung_name(static_cast<Rung>(r.detail)));
        o += '}';
        break;
      case Kind::free:
        event(o, first, "free_requested", r.addr, r.size, r.stream, r.ns);
        o += '}';
        event(o, first, "free_completed", r.addr, r.size, r.stream, r.ns);
        o += '}';
        break;
      case Kind::map:
      case Kind::unmap:
        event(o, first, r.kind == Kind::map ? "segment_map" : "segment_unmap", r.addr, r.size,
              nullptr, r.ns);
        o += '}';
        break;
      case Kind::chunk_created:
        reserved += static_cast<std::int64_t>(r.size);
        break;
      case Kind::chunk_released:
        reserved -= static_cast<std::int64_t>(r.size);
        break;
      case Kind::oom: {
        o += first ? "\n{" : ",\n{";
        first = false;
        o += "\"action\":\"oom\",\"size\":";
        json::number(o, r.size);
        o += ",\"device_free\":";
        json::number(
            o, std::max<std::int64_t>(static_cast<std::int64_t>(c.capacity_bytes) - reserved, 0));
        o += ",\"stream\":";
        json::number(o, reinterpret_cast<std::uint64_t>(r.stream));
        frames_and_time(o, r.ns);
        o += '}';
        break;
      }
      default:
        break;
    }
  }
  o += "]],\n\"memlake\":{";
  window_fields(o, c);
  o += ",\"live_bytes\":";
  json::number(o, c.totals.live);
  o += ",\"reserved_bytes\":";
  json::number(o, c.totals.reserved);
  o += ",\"mapped_bytes\":";
  json::number(o, c.totals.mapped);
  o += ",\"blocks_outside_ranges\":[";
  for (std::size_t i = 0; i < unplaced.size(); ++i) {
    if (i) o += ',';
    json::number(o, unplaced[i]);
  }
  o += "]}}\n";
  return o;
}

}  // namespace memlake
