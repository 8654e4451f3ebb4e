// Stress: several threads share one allocator and many host streams, under a
// LimitingBackend small enough that requests run out of memory. Every block
// is written and checked by jobs on the streams that use it (so a block
// handed to another stream before the work of its last user had run would
// show up as changed bytes); blocks move between threads and are freed on
// the stream of the thread that received them, after record_stream. At the
// end no chunk is left (backend accounting), allocs - frees matches the
// blocks still held, and the invariants hold.
//
// The operation count is bounded for CI; MEMLAKE_STRESS_OPS=N runs N
// operations in all (e.g. 2000000 for a long run by hand).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "backend/adaptors/limiting_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t kGranule = 64 * KiB;
constexpr std::size_t kCapacity = 24 << 20;
constexpr int kThreads = 4;
constexpr int kStreams = 8;
constexpr std::size_t kHeldPerThread = 10;

std::uint64_t total_ops() {
  const char* v = std::getenv("MEMLAKE_STRESS_OPS");
  const std::uint64_t n = v ? std::strtoull(v, nullptr, 10) : 0;
  return n > 0 ? n : 160000;
}

std::uint64_t word_of(std::uint64_t seed, std::size_t i) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + i;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

std::atomic<std::uint64_t> g_mismatches{0};
std::atomic<std::uint64_t> g_jobs{0};

// A job on a stream: check the block holds `expect` (when nonzero), then
// write `write` (when nonzero). It owns itself.
struct Job {
  unsigned char* block;
  std::size_t size;
  std::uint64_t expect;
  std::uint64_t write;
  static void run(void* self) {
    std::unique_ptr<Job> j(static_cast<Job*>(self));
    const std::size_t words = j->size / 8;
    if (j->expect != 0) {
      bool ok = true;
      for (std::size_t i = 0; i < words && ok; ++i) {
        std::uint64_t w;
        std::memcpy(&w, j->block + 8 * i, 8);
        ok = w == word_of(j->expect, i);
      }
      for (std::size_t i = words * 8; i < j->size && ok; ++i)
        ok = j->block[i] == static_cast<unsigned char>(j->expect);
      if (!ok) g_mismatches.fetch_add(1, std::memory_order_relaxed);
    }
    if (j->write != 0) {
      for (std::size_t i = 0; i < words; ++i) {
        const std::uint64_t w = word_of(j->write, i);
        std::memcpy(j->block + 8 * i, &w, 8);
      }
      for (std::size_t i = words * 8; i < j->size; ++i)
        j->block[i] = static_cast<unsigned char>(j->write);
    }
    g_jobs.fetch_add(1, std::memory_order_relaxed);
  }
};

struct Held {
  void* ptr;
  std::size_t size;
  std::uint64_t seed;
  Stream stream;  // where its last job was queued
};

struct Counts {
  std::atomic<std::uint64_t> ops{0}, allocs{0}, ooms{0}, frees{0}, handoffs{0}, errors{0};
};

class Stress {
 public:
  // `streams`: how many streams the threads share.
  explicit Stress(int streams = kStreams) {
    HostBackendOptions o;
    o.granularity = kGranule;
    auto host_owner = std::make_unique<HostBackend>(o);
    host_ = host_owner.get();
    auto limiting_owner = std::make_unique<LimitingBackend>(std::move(host_owner), kCapacity);
    limiting_ = limiting_owner.get();
    Config c;
    c.max_chunk = 4 * kGranule;
    c.small_max = 32 * KiB;
    alloc_ = std::make_unique<Allocator>(c, std::move(limiting_owner));
    for (int i = 0; i < streams; ++i) streams_.push_back(alloc_->create_stream());
  }

  void run(std::uint64_t ops) {
    const std::uint64_t per_thread = ops / kThreads;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { worker(t, per_thread); });
    for (auto& th : threads) th.join();
  }

  // Checks what stays held, then frees it; returns the number still held
  // before that.
  std::size_t finish() {
    std::size_t held = 0;
    for (auto& mine : held_) held += mine.size();
    for (auto& box : inbox_) held += box.size();
    const Stats s = alloc_->stats();
    EXPECT_EQ(static_cast<std::uint64_t>(s.allocs.current - s.frees.current), held)
        << "allocs - frees must be the blocks still held";
    EXPECT_EQ(s.allocs.current, static_cast<std::int64_t>(counts_.allocs.load()));
    EXPECT_EQ(s.ooms.current, static_cast<std::int64_t>(counts_.ooms.load()));
    EXPECT_EQ(alloc_->check_invariants(), "");
    for (int t = 0; t < kThreads; ++t) {
      for (Held& h : held_[t]) release(h, h.stream);
      for (Held& h : inbox_[t]) release(h, h.stream);
      held_[t].clear();
      inbox_[t].clear();
    }
    for (Stream s : streams_) alloc_->backend().stream_synchronize(s);
    alloc_->process_pending_frees();
    return held;
  }

  void teardown_checks() {
    const Stats s = alloc_->stats();
    EXPECT_EQ(s.live_bytes.current, 0);
    EXPECT_EQ(s.allocs.current, s.frees.current);
    EXPECT_EQ(s.host_waits.current, 0);
    EXPECT_EQ(alloc_->check_invariants(), "");
    alloc_->empty_cache();
    EXPECT_EQ(alloc_->stats().reserved_bytes.current, 0);
    EXPECT_EQ(limiting_->physical_bytes(), 0u) << "chunks leaked (limiting backend accounting)";
    EXPECT_EQ(host_->live_chunks(), 0u) << "chunks leaked";
    EXPECT_EQ(host_->mapped_ranges(), 0u);
    EXPECT_EQ(host_->reserved_ranges(), 0u);
    for (Stream s : streams_) alloc_->destroy_stream(s);
  }

  const Counts& counts() const { return counts_; }
  Allocator& alloc() { return *alloc_; }

 private:
  void enqueue(Stream s, Held& h, std::uint64_t expect, std::uint64_t write) {
    auto* j = new Job{static_cast<unsigned char*>(h.ptr), h.size, expect, write};
    if (alloc_->backend().launch_host_func(s, &Job::run, j) != Status::ok) {
      delete j;
      counts_.errors.fetch_add(1);
    }
  }

  // Later work on `to` runs after the work queued on `from` so far.
  void order_after(Stream to, Stream from) {
    if (to == from) return;
    EventHandle e = nullptr;
    Backend& b = alloc_->backend();
    if (b.event_create(&e) != Status::ok || b.event_record(e, from) != Status::ok ||
        b.stream_wait_event(to, e) != Status::ok)
      counts_.errors.fetch_add(1);
    if (e) b.event_destroy(e);
  }

  // Checks the block on `s` and frees it there.
  void release(Held& h, Stream s) {
    if (s != h.stream) {
      alloc_->record_stream(h.ptr, s);
      order_after(s, h.stream);
    }
    enqueue(s, h, h.seed, 0);
    alloc_->deallocate(h.ptr, h.size, s);
    counts_.frees.fetch_add(1, std::memory_order_relaxed);
  }

  std::size_t pick_size(std::mt19937_64& rng) {
    switch (rng() % 10) {
      case 0:
      case 1:
      case 2:
      case 3:
        return 1 + rng() % (4 * KiB);
      case 4:
      case 5:
        return 4 * KiB + rng() % (28 * KiB);
      case 6:
      case 7:
        return 32 * KiB + rng() % (200 * KiB);
      case 8:
        return 256 * KiB + rng() % (768 * KiB);
      default:
        return 1024 * KiB + rng() % (2048 * KiB);
    }
  }

  void worker(int t, std::uint64_t ops) {
    std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(t));
    std::vector<Held>& mine = held_[t];
    std::uint64_t next_seed = (static_cast<std::uint64_t>(t) + 1) << 40;
    for (std::uint64_t i = 0; i < ops; ++i) {
      counts_.ops.fetch_add(1, std::memory_order_relaxed);
      // My stream for this operation: threads share streams.
      Stream s = streams_[(static_cast<std::size_t>(t) * 2 + rng() % 3) % streams_.size()];
      {
        // Blocks other threads handed to me: used and freed on my stream.
        std::vector<Held> got;
        {
          std::lock_guard lock(inbox_mutex_);
          got.swap(inbox_[t]);
        }
        for (Held& h : got) release(h, s);
      }
      const unsigned r = static_cast<unsigned>(rng() % 100);
      if (mine.size() < kHeldPerThread && r < 55) {
        const std::size_t size = pick_size(rng);
        void* p = nullptr;
        try {
          p = alloc_->allocate(size, s);
        } catch (const out_of_memory&) {
          counts_.ooms.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        counts_.allocs.fetch_add(1, std::memory_order_relaxed);
        Held h{p, size, ++next_seed, s};
        enqueue(s, h, 0, h.seed);
        mine.push_back(h);
      } else if (!mine.empty() && r < 80) {
        const std::size_t k = rng() % mine.size();
        Held h = mine[k];
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        release(h, s);
      } else if (!mine.empty() && r < 95) {
        // Hand a block to another thread, which uses and frees it on its
        // own stream.
        const std::size_t k = rng() % mine.size();
        Held h = mine[k];
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        const int to =
            static_cast<int>((static_cast<unsigned>(t) + 1 + rng() % (kThreads - 1)) % kThreads);
        std::lock_guard lock(inbox_mutex_);
        inbox_[to].push_back(h);
        counts_.handoffs.fetch_add(1, std::memory_order_relaxed);
      } else if (r < 97) {
        alloc_->process_pending_frees();
      } else if (r < 98) {
        alloc_->empty_cache();
      } else {
        const std::string inv = alloc_->check_invariants();
        if (!inv.empty()) {
          ADD_FAILURE() << "invariants during the run: " << inv;
          counts_.errors.fetch_add(1);
        }
      }
    }
  }

  HostBackend* host_ = nullptr;
  LimitingBackend* limiting_ = nullptr;
  std::unique_ptr<Allocator> alloc_;
  std::vector<Stream> streams_;
  std::vector<Held> held_[kThreads];
  std::mutex inbox_mutex_;
  std::vector<Held> inbox_[kThreads];
  Counts counts_;
};

// The checker must see damage: a block changed behind its jobs' back.
TEST(StressJobs, SeeABlockChangedUnderThem) {
  g_mismatches = 0;
  HostBackend b;
  StreamHandle s = nullptr;
  ASSERT_EQ(b.stream_create(&s), Status::ok);
  std::vector<unsigned char> block(10000 + 3);
  ASSERT_EQ(b.launch_host_func(s, &Job::run, new Job{block.data(), block.size(), 0, 7}),
            Status::ok);
  ASSERT_EQ(b.launch_host_func(s, &Job::run, new Job{block.data(), block.size(), 7, 0}),
            Status::ok);
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  EXPECT_EQ(g_mismatches.load(), 0u);
  block[5000] ^= 4;
  ASSERT_EQ(b.launch_host_func(s, &Job::run, new Job{block.data(), block.size(), 7, 0}),
            Status::ok);
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  EXPECT_EQ(g_mismatches.load(), 1u);
  block[5000] ^= 4;
  block.back() ^= 1;
  ASSERT_EQ(b.launch_host_func(s, &Job::run, new Job{block.data(), block.size(), 7, 0}),
            Status::ok);
  ASSERT_EQ(b.stream_synchronize(s), Status::ok);
  EXPECT_EQ(g_mismatches.load(), 2u);
  ASSERT_EQ(b.stream_destroy(s), Status::ok);
}

TEST(Stress, ThreadsAndStreamsUnderMemoryPressure) {
  g_mismatches = 0;
  g_jobs = 0;
  Stress s;
  const std::uint64_t ops = total_ops() / 2;
  s.run(ops);
  const std::size_t held = s.finish();
  s.teardown_checks();
  const Counts& c = s.counts();
  const Stats st = s.alloc().stats();
  RecordProperty("operations", static_cast<int>(c.ops.load()));
  RecordProperty("allocations", static_cast<int>(c.allocs.load()));
  RecordProperty("out_of_memory", static_cast<int>(c.ooms.load()));
  RecordProperty("handoffs", static_cast<int>(c.handoffs.load()));
  RecordProperty("stream_jobs", static_cast<int>(g_jobs.load()));
  RecordProperty("mismatches", static_cast<int>(g_mismatches.load()));
  std::cout << "[ stress   ] " << c.ops << " operations, " << c.allocs << " allocations, " << c.ooms
            << " out of memory, " << c.frees << " frees, " << c.handoffs
            << " handed to other threads, " << g_jobs << " stream jobs, " << g_mismatches
            << " mismatches, " << st.cross_stream_waits.current << " cross-stream waits, " << held
            << " held at the end\n";
  EXPECT_EQ(g_mismatches.load(), 0u) << "a block was reused before its last user's work ran";
  EXPECT_EQ(c.errors.load(), 0u);
  EXPECT_EQ(c.ops.load(), ops / kThreads * kThreads);
  EXPECT_GT(c.ooms.load(), 0u) << "the capacity must be small enough for out of memory";
  EXPECT_GT(c.handoffs.load(), 0u);
  EXPECT_EQ(g_jobs.load(), c.allocs.load() + c.frees.load()) << "every job ran";
}

// Every thread on one stream: no stream ever waits for another, under the
// same checks of the bytes each stream job finds.
TEST(StressOneStream, OneStreamUnderMemoryPressure) {
  g_mismatches = 0;
  g_jobs = 0;
  Stress s(/*streams=*/1);
  const std::uint64_t ops = total_ops() / 4;
  s.run(ops);
  s.finish();
  s.teardown_checks();
  const Counts& c = s.counts();
  EXPECT_EQ(g_mismatches.load(), 0u) << "a block was reused before its last user's work ran";
  EXPECT_EQ(c.errors.load(), 0u);
  EXPECT_GT(c.ooms.load(), 0u) << "the capacity must be small enough for out of memory";
  EXPECT_EQ(s.alloc().stats().cross_stream_waits.current, 0);
  EXPECT_EQ(g_jobs.load(), c.allocs.load() + c.frees.load()) << "every job ran";
}

}  // namespace
}  // namespace memlake
