// Fuzz target: random operation sequences against a reference model. The
// input's bytes choose the configuration and then, op by op: allocations of
// any size class on three streams, frees on the block's stream or another
// (after record_stream), record_stream, misuse (double, interior and
// wrong-size frees), process_pending_frees, empty_cache, gates that hold a
// stream's queue closed (so frees stay pending) and VMM faults.
//
// The model checks that live blocks never overlap, that misuse is reported
// and changes nothing, that allocs - frees equals the live blocks and that
// the invariants hold after every op. Blocks are written and checked by
// jobs on the streams that use them, so a block reused before its last
// user's work ran is a mismatch. At the end everything is freed and the
// HostBackend must hold no chunk, mapping or reservation.
//
// Faults in unmap and unreserve are left out unless MEMLAKE_FUZZ_ALL_FAULTS
// is set (see docs/reliability.md: a failed unmap is a known bug).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/adaptors/fault_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/allocator.hpp"

namespace {

using memlake::Stream;

constexpr std::size_t kGranule = 64 << 10;
constexpr std::size_t kCapacity = 4 << 20;
constexpr int kStreams = 3;  // the default stream and two created ones
constexpr std::size_t kMaxLive = 64;

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz_ops: %s %s\n", what, detail.c_str());
  __builtin_trap();
}

class Input {
 public:
  Input(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool empty() const { return at_ >= n_; }
  std::uint8_t byte() { return at_ < n_ ? d_[at_++] : 0; }
  std::uint32_t u16() { return static_cast<std::uint32_t>(byte()) | (std::uint32_t{byte()} << 8); }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t at_ = 0;
};

std::atomic<std::uint64_t> g_mismatches{0};

// Jobs run on the streams' threads: their loops would only add noise (and
// time) to the coverage the fuzzer steers by.
#if defined(__clang__)
#define MEMLAKE_NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define MEMLAKE_NO_COVERAGE
#endif

MEMLAKE_NO_COVERAGE std::uint64_t word_of(std::uint64_t seed, std::size_t i) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + i;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

// Writes or checks the first and last 256 bytes and 64 bytes of each granule.
struct Job {
  unsigned char* p;
  std::size_t n;
  std::uint64_t seed;
  bool write;
  MEMLAKE_NO_COVERAGE void visit(std::size_t from, std::size_t to, bool* ok) const {
    for (std::size_t i = from; i < to && i < n; ++i) {
      const auto v = static_cast<unsigned char>(word_of(seed, i));
      if (write)
        p[i] = v;
      else
        *ok &= p[i] == v;
    }
  }
  MEMLAKE_NO_COVERAGE static void run(void* self) {
    std::unique_ptr<Job> j(static_cast<Job*>(self));
    bool ok = true;
    j->visit(0, 256, &ok);
    for (std::size_t at = kGranule; at < j->n; at += kGranule) j->visit(at - 32, at + 32, &ok);
    j->visit(j->n > 256 ? j->n - 256 : 0, j->n, &ok);
    if (!ok) g_mismatches.fetch_add(1);
  }
};

// Holds a stream's queue until opened.
struct Gate {
  std::atomic<bool> open{false};
  MEMLAKE_NO_COVERAGE static void run(void* self) {
    auto* g = static_cast<Gate*>(self);
    while (!g->open.load()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
};

struct Block {
  std::size_t size;
  std::uint64_t seed;
  int stream;              // where it was allocated
  std::vector<int> users;  // streams that used it, the allocating one first
};

class Run {
 public:
  explicit Run(Input& in) : in_(in) {
    memlake::HostBackendOptions o;
    o.granularity = kGranule;
    o.capacity = kCapacity;
    auto host = std::make_unique<memlake::HostBackend>(o);
    host_ = host.get();
    auto fault = std::make_unique<memlake::FaultBackend>(std::move(host));
    fault_ = fault.get();
    memlake::Config c;
    const std::uint8_t b = in_.byte();
    c.max_chunk = kGranule << (b & 3);
    c.small_max = std::size_t{1} << (9 + ((b >> 2) & 7));  // 512 B .. 64 KiB
    c.large_chunk = (b & 0x20) ? kGranule * 2 : 0;
    c.large_chunk_from = kGranule * 8;
    const std::uint8_t b2 = in_.byte();
    // The mapping worker inline (deterministic) or off; never a thread here,
    // so that an input always replays the same way.
    c.worker = (b2 & 8) ? memlake::WorkerMode::inline_jobs : memlake::WorkerMode::off;
    c.fit_slack = (b & 0x40) ? 0.5 : 0.125;
    c.max_stitch_chunks = (b & 0x80) ? 2 : 4096;
    alloc_ = std::make_unique<memlake::Allocator>(c, std::move(fault));
    streams_[0] = nullptr;
    for (int i = 1; i < kStreams; ++i) streams_[i] = alloc_->create_stream();
    all_faults_ = std::getenv("MEMLAKE_FUZZ_ALL_FAULTS") != nullptr;
  }

  ~Run() {
    for (auto& g : gates_) {
      if (g) g->open = true;
    }
    for (int i = 0; i < kStreams; ++i) alloc_->backend().stream_synchronize(streams_[i]);
    for (int i = 1; i < kStreams; ++i) alloc_->destroy_stream(streams_[i]);
  }

  void go() {
    int op = 0;
    while (!in_.empty()) {
      step(in_.byte() % 12);
      check(op++);
    }
    finish();
  }

 private:
  std::size_t pick_size() {
    const std::uint32_t v = in_.u16();
    switch (in_.byte() % 6) {
      case 0:
        return v % 1024;  // includes 0
      case 1:
        return 1 + v % (16 << 10);
      case 2:
        return 1 + (v << 4) % (256 << 10);
      case 3:
        return 1 + (v << 6) % (2 << 20);
      case 4:
        return kCapacity - v % 4096;  // near the capacity
      default:
        return kCapacity + 1 + v;  // never fits
    }
  }

  void launch(int s, const void* p, std::size_t n, std::uint64_t seed, bool write) {
    auto* j = new Job{static_cast<unsigned char*>(const_cast<void*>(p)), n, seed, write};
    if (alloc_->backend().launch_host_func(streams_[s], &Job::run, j) != memlake::Status::ok) {
      delete j;
      fail("launch_host_func");
    }
  }

  void order_after(int to, int from) {
    if (to == from) return;
    memlake::Backend& b = alloc_->backend();
    memlake::EventHandle e = nullptr;
    if (b.event_create(&e) != memlake::Status::ok ||
        b.event_record(e, streams_[from]) != memlake::Status::ok ||
        b.stream_wait_event(streams_[to], e) != memlake::Status::ok)
      fail("event");
    b.event_destroy(e);
  }

  std::map<std::uintptr_t, Block>::iterator pick_live() {
    auto it = live_.begin();
    std::advance(it, static_cast<long>(in_.byte() % live_.size()));
    return it;
  }

  template <class F>
  void expect_misuse(const char* what, F&& f) {
    const memlake::Stats before = alloc_->stats();
    try {
      f();
    } catch (const memlake::misuse&) {
      const memlake::Stats after = alloc_->stats();
      if (after.misuse_errors.current != before.misuse_errors.current + 1 ||
          after.live_bytes.current != before.live_bytes.current ||
          after.frees.current != before.frees.current)
        fail("misuse changed the stats:", what);
      return;
    }
    fail("no misuse error for", what);
  }

  void step(int kind) {
    switch (kind) {
      case 0:
      case 1:
      case 2:
      case 3: {  // allocate
        if (live_.size() >= kMaxLive) return;
        const std::size_t size = pick_size();
        const int s = in_.byte() % kStreams;
        void* p = nullptr;
        try {
          p = alloc_->allocate(size, streams_[s]);
        } catch (const memlake::out_of_memory& e) {
          if (e.requested() != size) fail("out_of_memory names another size");
          return;
        } catch (const memlake::backend_error& e) {
          if (!std::strstr(e.what(), "injected fault")) fail("backend_error", e.what());
          return;
        }
        if (p == nullptr) fail("allocate returned nullptr");
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        const std::size_t extent = size == 0 ? 1 : size;
        auto next = live_.lower_bound(a);
        if (next != live_.end() && a + extent > next->first) fail("overlaps the next live block");
        if (next != live_.begin()) {
          auto prev = std::prev(next);
          if (prev->first + std::max<std::size_t>(prev->second.size, 1) > a)
            fail("overlaps the previous live block");
        }
        Block b{size, ++seed_, s, {s}};
        if (size > 0) launch(s, p, size, b.seed, true);
        live_.emplace(a, b);
        freed_.erase(a);
        return;
      }
      case 4:
      case 5:
      case 6: {  // free, on its stream or another
        if (live_.empty()) return;
        auto it = pick_live();
        Block& b = it->second;
        const int s = in_.byte() % kStreams;
        void* p = reinterpret_cast<void*>(it->first);
        const int last = b.users.back();
        if (std::find(b.users.begin(), b.users.end(), s) == b.users.end()) {
          alloc_->record_stream(p, streams_[s]);
          b.users.push_back(s);
        }
        order_after(s, last);
        if (b.size > 0) launch(s, p, b.size, b.seed, false);
        alloc_->deallocate(p, (in_.byte() & 1) ? b.size : 0, streams_[s]);
        freed_[it->first] = b.size;
        live_.erase(it);
        return;
      }
      case 7: {  // record_stream and use there
        if (live_.empty()) return;
        auto it = pick_live();
        Block& b = it->second;
        const int s = in_.byte() % kStreams;
        void* p = reinterpret_cast<void*>(it->first);
        alloc_->record_stream(p, streams_[s]);
        order_after(s, b.users.back());
        if (std::find(b.users.begin(), b.users.end(), s) == b.users.end()) b.users.push_back(s);
        if (b.size > 0) launch(s, p, b.size, b.seed, false);
        return;
      }
      case 8: {  // misuse
        const std::uint8_t what = in_.byte() % 3;
        if (what == 0 && !freed_.empty()) {
          auto it = freed_.begin();
          std::advance(it, static_cast<long>(in_.byte() % freed_.size()));
          expect_misuse("double free", [&] {
            alloc_->deallocate(reinterpret_cast<void*>(it->first), it->second);
          });
        } else if (what == 1 && !live_.empty()) {
          auto it = pick_live();
          if (it->second.size <= 512) return;
          expect_misuse("interior free",
                        [&] { alloc_->deallocate(reinterpret_cast<void*>(it->first + 512), 0); });
        } else if (what == 2 && !live_.empty()) {
          auto it = pick_live();
          expect_misuse("size mismatch", [&] {
            alloc_->deallocate(reinterpret_cast<void*>(it->first), it->second.size + 1);
          });
        }
        return;
      }
      case 9:
        if (in_.byte() & 1)
          alloc_->process_pending_frees();
        else
          guarded([&] { alloc_->empty_cache(); });
        return;
      case 10: {  // close or open a gate on a created stream
        const int s = 1 + in_.byte() % (kStreams - 1);
        auto& g = gates_[s];
        if (g && !g->open) {
          g->open = true;
        } else {
          if (g) opened_.push_back(std::move(g));
          g = std::make_unique<Gate>();
          alloc_->backend().launch_host_func(streams_[s], &Gate::run, g.get());
        }
        return;
      }
      default: {  // arm a fault
        static constexpr memlake::VmmOp kSafe[] = {memlake::VmmOp::reserve, memlake::VmmOp::create,
                                                   memlake::VmmOp::map, memlake::VmmOp::set_access,
                                                   memlake::VmmOp::release};
        static constexpr memlake::VmmOp kAll[] = {
            memlake::VmmOp::reserve,    memlake::VmmOp::create,  memlake::VmmOp::map,
            memlake::VmmOp::set_access, memlake::VmmOp::release, memlake::VmmOp::unmap,
            memlake::VmmOp::unreserve};
        const std::uint8_t b = in_.byte();
        const memlake::VmmOp op = all_faults_ ? kAll[b % 7] : kSafe[b % 5];
        fault_->fail_nth(op, 1 + (b >> 4));
        return;
      }
    }
  }

  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const memlake::backend_error& e) {
      if (!std::strstr(e.what(), "injected fault")) fail("backend_error", e.what());
    }
  }

  void check(int op) {
    const std::string inv = alloc_->check_invariants();
    if (!inv.empty()) fail("invariants after op", std::to_string(op) + ": " + inv);
    const memlake::Stats s = alloc_->stats();
    if (static_cast<std::size_t>(s.allocs.current - s.frees.current) != live_.size())
      fail("allocs - frees is not the number of live blocks");
  }

  void finish() {
    for (auto& g : gates_) {
      if (g) g->open = true;
    }
    for (int i = 0; i < kStreams; ++i) alloc_->backend().stream_synchronize(streams_[i]);
    if (g_mismatches.load() != 0) fail("a block changed while in use");
    fault_->clear();
    for (auto& [a, b] : live_) {
      order_after(b.stream, b.users.back());
      alloc_->deallocate(reinterpret_cast<void*>(a), b.size, streams_[b.stream]);
    }
    live_.clear();
    for (int i = 0; i < kStreams; ++i) alloc_->backend().stream_synchronize(streams_[i]);
    alloc_->empty_cache();
    const memlake::Stats s = alloc_->stats();
    if (s.live_bytes.current != 0 || s.reserved_bytes.current != 0)
      fail("memory left after freeing everything and empty_cache");
    if (host_->live_chunks() != 0 || host_->mapped_ranges() != 0 || host_->reserved_ranges() != 0)
      fail("the backend still holds chunks, mappings or reservations");
    const std::string inv = alloc_->check_invariants();
    if (!inv.empty()) fail("invariants at the end", inv);
  }

  Input& in_;
  memlake::HostBackend* host_ = nullptr;
  memlake::FaultBackend* fault_ = nullptr;
  std::unique_ptr<memlake::Allocator> alloc_;
  Stream streams_[kStreams] = {};
  std::map<std::uintptr_t, Block> live_;
  std::map<std::uintptr_t, std::size_t> freed_;  // not live now
  std::unique_ptr<Gate> gates_[kStreams];
  std::vector<std::unique_ptr<Gate>> opened_;  // kept until their jobs ran
  std::uint64_t seed_ = 0;
  bool all_faults_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;  // long inputs add time, not paths
  g_mismatches = 0;
  Input in(data, size);
  Run run(in);
  run.go();
  return 0;
}
