// Allocator::memory_snapshot_json: PyTorch's snapshot shape (segments with
// blocks that tile them, device_traces) holding exactly the allocator's
// state: a segment per mapped range adding up to mapped bytes, the live
// blocks with their sizes adding up to live bytes; the trace undone from the
// end, as pytorch.org/memory_viz does to draw any earlier point, never meets
// a block outside its segments or a free of a block not live.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "json_value.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

using test::JsonReader;
using test::JsonValue;

constexpr std::size_t MiB = std::size_t{1} << 20;

Config snapshot_config(int device) {
  Config c = Config::parse("backend:host,capacity:256M,worker:inline,max_chunk:2M");
  c.device = device;
  c.timeline = testing::TempDir() + "memlake-snapshot-unused.json";
  return c;
}

std::uint64_t as_u64(const JsonValue& v) {
  return static_cast<std::uint64_t>(v.integer());
}

// Segments by address; true when [addr, addr + size) lies inside one.
bool inside(const std::map<std::uint64_t, std::uint64_t>& segments, std::uint64_t addr,
            std::uint64_t size) {
  auto it = segments.upper_bound(addr);
  if (it == segments.begin()) return false;
  --it;
  return addr + size <= it->first + it->second;
}

TEST(MemorySnapshot, HoldsTheAllocatorsStateInPyTorchsShape) {
  constexpr int kDevice = 2;
  Allocator a(snapshot_config(kDevice));
  Stream side = a.create_stream();
  std::map<std::uint64_t, std::size_t> held;  // ptr -> bytes asked
  std::vector<void*> order;
  for (int i = 0; i < 16; ++i) {
    void* p = a.allocate(2 * MiB);
    a.deallocate(p, 2 * MiB);
  }
  a.process_pending_frees();
  for (int i = 0; i < 24; ++i) {
    const std::size_t bytes = i == 3 ? 8 * MiB : (i % 5 + 1) * MiB / 3 + 1000 * i;
    void* p = a.allocate(bytes, i % 3 ? nullptr : side);
    held[reinterpret_cast<std::uint64_t>(p)] = bytes;
    order.push_back(p);
  }
  for (std::size_t i = 0; i < order.size(); i += 3) {
    const auto key = reinterpret_cast<std::uint64_t>(order[i]);
    a.deallocate(order[i], held[key], i % 3 ? nullptr : side);
    held.erase(key);
  }
  const Stats s = a.stats();
  const JsonValue snap = JsonReader::parse(a.memory_snapshot_json());

  // Segments: one per range, blocks tiling each exactly.
  std::map<std::uint64_t, std::uint64_t> segments;
  std::map<std::uint64_t, std::uint64_t> active;  // ptr -> size
  std::int64_t mapped = 0, allocated = 0;
  for (const JsonValue& seg : snap["segments"].items) {
    EXPECT_EQ(seg["device"].integer(), kDevice);
    for (const char* key :
         {"address", "total_size", "allocated_size", "active_size", "requested_size", "stream"})
      EXPECT_TRUE(seg[key].is(JsonValue::Type::number)) << key;
    EXPECT_TRUE(seg["segment_type"].str() == "large" || seg["segment_type"].str() == "small");
    EXPECT_EQ(seg["segment_pool_id"].items.size(), 2u);
    const std::uint64_t base = as_u64(seg["address"]), total = as_u64(seg["total_size"]);
    segments[base] = total;
    mapped += static_cast<std::int64_t>(total);
    std::uint64_t at = base, seg_allocated = 0;
    for (const JsonValue& b : seg["blocks"].items) {
      EXPECT_EQ(as_u64(b["address"]), at) << "blocks tile their segment";
      EXPECT_TRUE(b["frames"].is(JsonValue::Type::array));
      const std::string& state = b["state"].str();
      if (state == "active_allocated") {
        active[as_u64(b["address"])] = as_u64(b["size"]);
        seg_allocated += as_u64(b["size"]);
        EXPECT_EQ(as_u64(b["requested_size"]), held[as_u64(b["address"])]);
      } else {
        EXPECT_EQ(state, "inactive");
      }
      at += as_u64(b["size"]);
    }
    EXPECT_EQ(at, base + total) << "blocks cover their segment";
    EXPECT_EQ(as_u64(seg["allocated_size"]), seg_allocated);
    allocated += static_cast<std::int64_t>(seg_allocated);
  }
  EXPECT_EQ(mapped, s.mapped_bytes.current);
  EXPECT_EQ(allocated, s.live_bytes.current);
  ASSERT_EQ(active.size(), held.size());
  for (const auto& [ptr, bytes] : held) {
    ASSERT_EQ(active.count(ptr), 1u);
    EXPECT_EQ(active[ptr], (bytes + 511) / 512 * 512);
  }
  EXPECT_TRUE(snap["memlake"]["blocks_outside_ranges"].items.empty());

  // device_traces: empty lists for the devices before this one.
  const JsonValue& traces = snap["device_traces"];
  ASSERT_EQ(traces.items.size(), static_cast<std::size_t>(kDevice + 1));
  EXPECT_TRUE(traces[0].items.empty());
  const JsonValue& events = traces[kDevice];
  int allocs = 0, frees = 0;
  for (std::size_t i = 0; i < events.items.size(); ++i) {
    const JsonValue& e = events[i];
    for (const char* key : {"action", "addr", "size", "stream", "time_us", "frames"})
      EXPECT_TRUE(e.has(key)) << key;
    const std::string& action = e["action"].str();
    if (action == "alloc") ++allocs;
    if (action == "free_requested") {
      ++frees;
      ASSERT_LT(i + 1, events.items.size());
      EXPECT_EQ(events[i + 1]["action"].str(), "free_completed");
      EXPECT_EQ(events[i + 1]["addr"].integer(), e["addr"].integer());
    }
  }
  EXPECT_EQ(allocs, s.allocs.current);
  EXPECT_EQ(frees, s.frees.current);

  // Undo the events from the end, as memory_viz does.
  std::map<std::uint64_t, std::uint64_t> live = active;
  for (std::size_t i = events.items.size(); i-- > 0;) {
    const JsonValue& e = events[i];
    const std::string& action = e["action"].str();
    const std::uint64_t addr = as_u64(e["addr"]), size = as_u64(e["size"]);
    if (action == "alloc") {
      ASSERT_EQ(live.erase(addr), 1u) << "event " << i << ": undoing an alloc not live";
    } else if (action == "free_completed") {
      ASSERT_TRUE(inside(segments, addr, size)) << "event " << i << ": a block outside";
      live[addr] = size;
    } else if (action == "segment_map") {
      ASSERT_TRUE(inside(segments, addr, size))
          << "event " << i << ": unmapping what is not mapped";
      auto it = std::prev(segments.upper_bound(addr));
      const std::uint64_t first = it->first, last = it->first + it->second;
      segments.erase(it);
      if (first < addr) segments[first] = addr - first;
      if (addr + size < last) segments[addr + size] = last - addr - size;
      for (const auto& [ptr, bytes] : live)
        ASSERT_FALSE(ptr < addr + size && addr < ptr + bytes)
            << "event " << i << ": a live block in a range not yet mapped";
    } else if (action == "segment_unmap") {
      segments[addr] = size;
    }
  }
  EXPECT_TRUE(live.empty()) << "every block was allocated within the trace";
  EXPECT_TRUE(segments.empty()) << "every range was mapped within the trace";
  for (const auto& [ptr, bytes] : held) a.deallocate(reinterpret_cast<void*>(ptr), bytes);
}

}  // namespace
}  // namespace memlake
