// The `nvtx` option, seen through an NVTX injection library
// (tests/nvtx/nvtx_recorder.cpp) loaded into a child process, as Nsight
// Systems and compute-sanitizer load theirs: every mapped range becomes a
// heap before any block in it becomes a region; a block is a region while
// the caller holds it (registered before allocate returns, unregistered
// before free returns) and lies inside its heap; unmapped ranges leave no
// heap behind; slow allocations and worker jobs are ranges that pair up,
// with markers for the rung that served them, for the worker's job, for
// out of memory and for reclaim. The host backend makes the same calls as
// the CUDA one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "memlake/allocator.hpp"
#include "spawn_self.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// The child's own lines go to the recorder's log, between memlake's calls.
void note(const char* format, ...) {
  std::FILE* f = std::fopen(std::getenv("MEMLAKE_NVTX_LOG"), "a");
  ASSERT_NE(f, nullptr);
  va_list args;
  va_start(args, format);
  std::vfprintf(f, format, args);
  va_end(args);
  std::fputc('\n', f);
  std::fclose(f);
}

// What the child does under the recorder: blocks that scatter free memory,
// a request that stitches (a slow allocation), a few more blocks (the worker
// keeps a reserve mapped ahead), an out of memory after a reclaim,
// empty_cache, and the allocator's end.
void child_workload() {
  Allocator a(
      Config::parse("backend:host,capacity:96M,worker:inline,max_chunk:2M,reserve:4M,nvtx:true"));
  std::vector<std::pair<void*, std::size_t>> held;
  auto allocate = [&](std::size_t bytes) {
    void* p = a.allocate(bytes);
    note("test alloc %p %zu", p, bytes);
    held.push_back({p, bytes});
    return p;
  };
  auto free_block = [&](std::size_t i) {
    a.deallocate(held[i].first, held[i].second);
    note("test free %p", held[i].first);
    held[i].first = nullptr;
  };
  for (int i = 0; i < 16; ++i) allocate(2 * MiB);
  for (std::size_t i = 0; i < 16; ++i) free_block(i);
  a.process_pending_frees();
  allocate(8 * MiB);  // stitches the scattered chunks
  allocate(16 * MiB);
  for (int i = 0; i < 6; ++i) allocate(MiB / 2 + 4096 * i);
  for (std::size_t i = 18; i < held.size(); i += 2) free_block(i);
  allocate(48 * MiB);
  try {
    a.allocate(40 * MiB);  // does not fit, even after a reclaim
    note("test no oom");
  } catch (const out_of_memory&) {
    note("test oom %zu", 40 * MiB);
  }
  for (std::size_t i = 0; i < held.size(); ++i)
    if (held[i].first) free_block(i);
  a.empty_cache();
  note("test emptied");
}

std::vector<std::vector<std::string>> read_log(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> lines;
  for (std::string l; std::getline(in, l);) {
    std::istringstream words(l);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (!w.empty()) lines.push_back(w);
  }
  return lines;
}

std::uint64_t hex(const std::string& s) {
  return std::strtoull(s.c_str(), nullptr, 16);
}

#ifdef MEMLAKE_TEST_NVTX_RECORDER

TEST(Nvtx, HeapsRegionsRangesAndMarkersComeInTheRightOrder) {
  if (std::getenv("MEMLAKE_NVTX_LOG") && std::getenv("NVTX_INJECTION64_PATH")) {
    child_workload();
    return;
  }
  const std::string log =
      testing::TempDir() + "memlake-nvtx-" + std::to_string(::getpid()) + ".log";
  std::remove(log.c_str());
  ASSERT_EQ(test::run_self("Nvtx.HeapsRegionsRangesAndMarkersComeInTheRightOrder",
                           {std::string("NVTX_INJECTION64_PATH=") + MEMLAKE_TEST_NVTX_RECORDER,
                            "MEMLAKE_NVTX_LOG=" + log}),
            0);
  const auto lines = read_log(log);
  ASSERT_FALSE(lines.empty()) << "the recorder was not loaded";

  std::map<std::uint64_t, std::uint64_t> heaps;    // va -> bytes
  std::map<std::uint64_t, std::uint64_t> regions;  // ptr -> bytes
  std::vector<std::string> ranges;                 // open pushes
  std::map<std::string, int> marks, pushes, strings;
  std::string last_popped;
  int allocs = 0, frees = 0, heaps_made = 0, slow_then_rung = 0;
  bool oom_marked = false, reclaim_before_oom = false, reserve_in_job = false, domain = false,
       emptied = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& w = lines[i];
    const std::string where = "log line " + std::to_string(i + 1) + ": " + w[0];
    if (w[0] == "domain") {
      domain = domain || w[1] == "memlake";
    } else if (w[0] == "string") {
      std::string s = w[1];
      for (std::size_t k = 2; k < w.size(); ++k) s += " " + w[k];
      ++strings[s];
    } else if (w[0] == "heap+") {
      const std::uint64_t va = hex(w[1]), bytes = std::stoull(w[2]);
      EXPECT_EQ(w[3], "1") << where << ": a sub-allocator heap";
      EXPECT_EQ(w[4], "1") << where << ": over virtual addresses";
      auto next = heaps.lower_bound(va);
      EXPECT_TRUE(next == heaps.end() || next->first >= va + bytes) << where << ": overlaps";
      if (next != heaps.begin()) {
        EXPECT_LE(std::prev(next)->first + std::prev(next)->second, va) << where << ": overlaps";
      }
      heaps[va] = bytes;
      ++heaps_made;
    } else if (w[0] == "heap-") {
      const std::uint64_t va = hex(w[1]);
      ASSERT_EQ(heaps.count(va), 1u) << where << ": not a registered heap";
      // Its regions go with it.
      for (auto it = regions.begin(); it != regions.end();)
        it = it->first >= va && it->first < va + heaps[va] ? regions.erase(it) : std::next(it);
      heaps.erase(va);
    } else if (w[0] == "region+") {
      const std::uint64_t heap = hex(w[1]), ptr = hex(w[2]), bytes = std::stoull(w[3]);
      ASSERT_EQ(heaps.count(heap), 1u) << where << ": in no registered heap";
      EXPECT_GE(ptr, heap) << where;
      EXPECT_LE(ptr + bytes, heap + heaps[heap]) << where << ": runs past its heap";
      EXPECT_EQ(regions.count(ptr), 0u) << where << ": registered twice";
      regions[ptr] = bytes;
    } else if (w[0] == "region-") {
      EXPECT_EQ(regions.erase(hex(w[1])), 1u) << where << ": not a registered region";
    } else if (w[0] == "push") {
      std::string m = w[1];
      for (std::size_t k = 2; k + 1 < w.size(); ++k) m += " " + w[k];
      ranges.push_back(m);
      ++pushes[m];
    } else if (w[0] == "pop") {
      ASSERT_FALSE(ranges.empty()) << where << ": pop without push";
      last_popped = ranges.back();
      ranges.pop_back();
    } else if (w[0] == "mark") {
      std::string m = w[1];
      for (std::size_t k = 2; k + 1 < w.size(); ++k) m += " " + w[k];
      ++marks[m];
      if (m.rfind("served by", 0) == 0 && last_popped == "allocate: map or create")
        ++slow_then_rung;
      if (m == "reserve" && !ranges.empty() && ranges.back() == "mapping worker job")
        reserve_in_job = true;
      if (m == "reclaim" && !oom_marked) reclaim_before_oom = true;
      if (m == "out of memory") {
        oom_marked = true;
        EXPECT_EQ(std::stoull(w.back()), 40 * MiB) << where << ": the payload is the request";
      }
    } else if (w[0] == "test" && w[1] == "alloc") {
      ++allocs;
      auto it = regions.find(hex(w[2]));
      ASSERT_NE(it, regions.end()) << where << ": a block handed out that is no region";
      EXPECT_GE(it->second, std::stoull(w[3])) << where;
    } else if (w[0] == "test" && w[1] == "free") {
      ++frees;
      EXPECT_EQ(regions.count(hex(w[2])), 0u) << where << ": a freed block is still a region";
    } else if (w[0] == "test" && w[1] == "emptied") {
      emptied = true;
      EXPECT_TRUE(regions.empty()) << "every block was freed";
      EXPECT_TRUE(heaps.empty()) << "empty_cache unmapped every range: no heap is left";
    }
  }
  EXPECT_TRUE(domain) << "the domain is memlake";
  EXPECT_TRUE(emptied);
  EXPECT_EQ(allocs, 25);
  EXPECT_EQ(frees, 25);
  EXPECT_GT(heaps_made, 2);
  EXPECT_TRUE(ranges.empty()) << "every push has its pop";
  EXPECT_TRUE(heaps.empty());
  for (const char* s : {"allocate: map or create", "mapping worker job", "out of memory", "reclaim",
                        "served by stitch", "served by fragment", "reserve"})
    EXPECT_EQ(strings[s], 1) << "registered once: " << s;
  EXPECT_GE(pushes["allocate: map or create"], 3);
  EXPECT_GE(pushes["mapping worker job"], 1);
  EXPECT_GE(marks["served by stitch"], 1);
  EXPECT_EQ(slow_then_rung, pushes["allocate: map or create"] - 1)
      << "each slow allocation but the one that ran out of memory marks its rung";
  EXPECT_TRUE(reserve_in_job);
  EXPECT_TRUE(oom_marked);
  EXPECT_TRUE(reclaim_before_oom) << "the allocator reclaims before it runs out of memory";
  std::remove(log.c_str());
}

// Without a tool every NVTX call is a no-op: the allocator works the same.
TEST(Nvtx, WithoutAToolTheAllocatorWorksTheSame) {
  Allocator a(Config::parse("backend:host,capacity:64M,worker:inline,nvtx:true"));
  void* p = a.allocate(5 * MiB);
  std::memset(p, 0x5A, 5 * MiB);
  EXPECT_EQ(static_cast<unsigned char*>(p)[5 * MiB - 1], 0x5A);
  a.deallocate(p, 5 * MiB);
  a.empty_cache();
  EXPECT_EQ(a.check_invariants(), "");
}

#else

TEST(Nvtx, TheOptionIsRefusedInABuildWithoutNvtx) {
  try {
    Allocator a(Config::parse("backend:host,capacity:64M,nvtx:true"));
    FAIL() << "expected a config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("no NVTX"), std::string::npos) << e.what();
  }
}

#endif

}  // namespace
}  // namespace memlake
