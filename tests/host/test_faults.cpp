// Fault injection through the whole allocator: a FaultBackend over a
// HostBackend fails one VMM call at a time, call site by call site (the n-th
// reserve, create, map, set_access, unmap, release or unreserve of a fixed
// workload with small and large blocks, stitching, reclaim and empty_cache),
// and then at random with fixed seeds. Every fault must surface as a clean
// error (out_of_memory for exhaustion, backend_error naming the call
// otherwise) or be absorbed; afterwards the invariants hold, every live block
// keeps its bytes, the allocator serves new requests once the faults are
// cleared, and when everything is freed the HostBackend holds no chunk,
// mapping or reservation. Totals go to the test report (RecordProperty).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "backend/adaptors/backend_adaptor.hpp"
#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/allocator.hpp"

namespace memlake {
namespace {

// The workload is the shape of a 2 MiB-granule one scaled down 32 times, so
// that hundreds of runs touch little memory: G is the chunk granularity, U
// the "MiB" of the workload (small_max), P the smallest size.
constexpr std::size_t G = std::size_t{64} << 10;
constexpr std::size_t U = G / 2;
constexpr std::size_t P = 512;
constexpr std::size_t kCapacity = 48 * U;
constexpr std::size_t kWorkloadReserve = 2 * G;

constexpr VmmOp kOps[] = {VmmOp::reserve, VmmOp::create,  VmmOp::map,      VmmOp::set_access,
                          VmmOp::unmap,   VmmOp::release, VmmOp::unreserve};

std::uint64_t word_of(std::uint64_t seed, std::size_t i) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + i;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

// Writes a pattern over the whole block (8-byte words, then a byte tail).
void fill(void* p, std::size_t n, std::uint64_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  const std::size_t words = n / 8;
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t w = word_of(seed, i);
    std::memcpy(b + 8 * i, &w, 8);
  }
  for (std::size_t i = words * 8; i < n; ++i) b[i] = static_cast<unsigned char>(word_of(seed, i));
}

// Checks words [first, last) of the pattern; the byte tail when `last` is the end.
bool check_words(const unsigned char* b, std::size_t n, std::uint64_t seed, std::size_t first,
                 std::size_t last) {
  const std::size_t words = n / 8;
  for (std::size_t i = first; i < last && i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, b + 8 * i, 8);
    if (w != word_of(seed, i)) return false;
  }
  if (last >= words) {
    for (std::size_t i = words * 8; i < n; ++i)
      if (b[i] != static_cast<unsigned char>(word_of(seed, i))) return false;
  }
  return true;
}

bool check_full(const void* p, std::size_t n, std::uint64_t seed) {
  return check_words(static_cast<const unsigned char*>(p), n, seed, 0, n / 8 + 1);
}

// The last 512 bytes and 512 bytes at every half granule: every chunk of a
// stitched block is looked at, for a fraction of the cost of a full check.
bool check_sampled(const void* p, std::size_t n, std::uint64_t seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  const std::size_t words = n / 8, window = P / 8;
  for (std::size_t at = 0; at < words; at += U / 8)
    if (!check_words(b, n, seed, at, at + window)) return false;
  return check_words(b, n, seed, words > window ? words - window : 0, words + 1);
}

struct LiveBlock {
  void* ptr;
  std::size_t size;
  std::uint64_t seed;
};

// Sits right above the HostBackend and counts the calls it refused: an
// injected fault never gets there, so these are calls the lake made that
// the backend's contract forbids (e.g. unreserving a range still mapped).
class RefusalCounter final : public BackendAdaptor {
 public:
  explicit RefusalCounter(std::unique_ptr<Backend> upstream)
      : BackendAdaptor(std::move(upstream), "refusals") {}
  Status unreserve(DevicePtr va, std::size_t size) override {
    return note(BackendAdaptor::unreserve(va, size));
  }
  Status unmap(DevicePtr va, std::size_t size) override {
    return note(BackendAdaptor::unmap(va, size));
  }
  Status map(DevicePtr va, std::size_t size, ChunkHandle c) override {
    return note(BackendAdaptor::map(va, size, c));
  }
  Status release_chunk(ChunkHandle c) override { return note(BackendAdaptor::release_chunk(c)); }
  std::uint64_t refused() const { return refused_.load(); }
  std::string last() const {
    std::lock_guard lock(mutex_);
    return last_;
  }

 private:
  Status note(Status s) {
    if (s != Status::ok && s != Status::out_of_memory) {
      ++refused_;
      std::lock_guard lock(mutex_);
      last_ = last_error();
    }
    return s;
  }
  std::atomic<std::uint64_t> refused_{0};
  mutable std::mutex mutex_;
  std::string last_;
};

// One allocator over counting(fault(refusals(host))), with raw pointers into
// the stack.
// The mapping worker runs inline by default, so that the n-th call of an
// operation is the same call site in every run; the random runs also use
// the worker thread, whose own calls then meet the faults. For the
// workload it keeps a reserve of two chunks, so its jobs create and map.
struct Rig {
  HostBackend* host = nullptr;
  RefusalCounter* refusals = nullptr;
  FaultBackend* fault = nullptr;
  CountingBackend* counting = nullptr;
  std::unique_ptr<Allocator> alloc;

  explicit Rig(WorkerMode worker = WorkerMode::inline_jobs, std::size_t reserve = 0) {
    HostBackendOptions o;
    o.capacity = kCapacity;
    o.granularity = G;
    auto host_owner = std::make_unique<HostBackend>(o);
    host = host_owner.get();
    auto refusals_owner = std::make_unique<RefusalCounter>(std::move(host_owner));
    refusals = refusals_owner.get();
    auto fault_owner = std::make_unique<FaultBackend>(std::move(refusals_owner));
    fault = fault_owner.get();
    auto counting_owner = std::make_unique<CountingBackend>(std::move(fault_owner));
    counting = counting_owner.get();
    Config c;
    c.capacity = kCapacity;
    c.max_chunk = G;
    c.small_max = U;
    c.worker = worker;
    c.reserve = reserve;
    alloc = std::make_unique<Allocator>(c, std::move(counting_owner));
  }
};

// What one run saw.
struct Outcome {
  int out_of_memory = 0;
  int backend_errors = 0;
  std::vector<std::string> problems;  // anything a test must fail on
};

// Runs the fixed workload. Each allocator call may fail with out_of_memory or
// backend_error (counted); any other exception, a broken invariant or a
// changed byte is a problem.
class Workload {
 public:
  Workload(Rig& rig, Outcome& out) : rig_(rig), out_(out) {}

  void run() {
    // Phase 0: free chunks scattered one by one between live ones, then
    // requests that must stitch (three chunks where no free run holds even
    // half).
    for (int i = 0; i < 24; ++i) allocate(G - static_cast<std::size_t>(i % 2));
    release_where([](const LiveBlock& b) { return b.size == G; });
    call("process_pending_frees", [&] { rig_.alloc->process_pending_frees(); });
    allocate(5 * U);
    allocate(3 * U);
    release_where([](const LiveBlock&) { return true; });
    // Phase 1: small, medium and large blocks; a tail shared by a small one.
    for (std::size_t size :
         {P - 24, U / 3, 3 * U, 5 * U + 123, 2 * U, U * 2 / 3, U * 2 / 3, U * 2 / 3, 9 * U, 2 * P})
      allocate(size);
    // Phase 2: frees that leave scattered free chunks, handed to the lake.
    release_where([](const LiveBlock& b) { return b.size == 3 * U || b.size == 2 * U; });
    release_where([](const LiveBlock& b) { return b.size == 5 * U + 123; });
    call("process_pending_frees", [&] { rig_.alloc->process_pending_frees(); });
    // Phase 3: a block only stitching (or new memory) can serve, then small ones.
    allocate(10 * U);
    for (int i = 0; i < 6; ++i) allocate(2 * P + static_cast<std::size_t>(i) * P);
    // Phase 4: give cached memory back, then grow again.
    release_where([](const LiveBlock& b) { return b.size == 9 * U; });
    call("empty_cache", [&] { rig_.alloc->empty_cache(); });
    allocate(6 * U);
    allocate(U + 1);
    // Phase 5: near the capacity: reclaim and retry, or a clean OOM.
    release_where([](const LiveBlock& b) { return b.size == 10 * U; });
    call("process_pending_frees", [&] { rig_.alloc->process_pending_frees(); });
    allocate(20 * U);
    allocate(12 * U);
    // Phase 6: keep a few, drop the rest, empty the cache.
    std::size_t kept = 0;
    release_where([&](const LiveBlock&) { return ++kept > 3; });
    call("empty_cache", [&] { rig_.alloc->empty_cache(); });
  }

  // After the faults are cleared: requests succeed and bytes survive.
  void recover() {
    if (broken_) return;
    for (std::size_t size : {std::size_t{64}, 4 * U, 8 * U + P, U / 3}) {
      if (!allocate(size)) out_.problems.push_back("no recovery: " + std::to_string(size));
    }
  }

  void verify_all() {
    if (broken_) return;
    for (const LiveBlock& b : live_)
      if (!check_full(b.ptr, b.size, b.seed))
        out_.problems.push_back("bytes changed in a live block of " + std::to_string(b.size));
    std::string inv = rig_.alloc->check_invariants();
    if (!inv.empty()) {
      out_.problems.push_back("invariants: " + inv);
      broken_ = true;
    }
  }

  // Frees everything and empties the cache: nothing may stay behind.
  void drain() {
    if (broken_) return;
    release_where([](const LiveBlock&) { return true; });
    call("empty_cache", [&] { rig_.alloc->empty_cache(); });
    const Stats s = rig_.alloc->stats();
    if (s.live_bytes.current != 0) out_.problems.push_back("live bytes after draining");
    if (s.allocs.current - s.frees.current != 0) out_.problems.push_back("allocs != frees");
    if (s.reserved_bytes.current != 0)
      out_.problems.push_back("reserved " + std::to_string(s.reserved_bytes.current) +
                              " bytes after empty_cache");
    if (rig_.host->live_chunks() != 0)
      out_.problems.push_back(std::to_string(rig_.host->live_chunks()) + " chunks leaked");
    if (rig_.host->mapped_ranges() != 0)
      out_.problems.push_back(std::to_string(rig_.host->mapped_ranges()) + " mappings leaked");
    if (rig_.host->reserved_ranges() != 0)
      out_.problems.push_back(std::to_string(rig_.host->reserved_ranges()) +
                              " reservations leaked");
  }

 private:
  // Once an invariant is broken the allocator's state is unknown: the run
  // stops there (going on could crash and hide the report).
  bool broken() const { return broken_; }

  template <class F>
  bool call(const char* what, F&& f) {
    if (broken_) return false;
    bool ok = false;
    try {
      f();
      ok = true;
    } catch (const out_of_memory&) {
      ++out_.out_of_memory;
    } catch (const backend_error& e) {
      ++out_.backend_errors;
      const std::string m = e.what();
      if (m.find("injected fault in") == std::string::npos)
        out_.problems.push_back(std::string(what) + ": backend_error without its cause: " + m);
    } catch (const std::exception& e) {
      out_.problems.push_back(std::string(what) + ": unexpected exception: " + e.what());
    }
    after_call(what, ok);
    return ok;
  }

  bool allocate(std::size_t size) {
    void* p = nullptr;
    const bool ok = call("allocate", [&] { p = rig_.alloc->allocate(size); });
    if (ok) {
      const std::uint64_t seed = next_seed_++;
      fill(p, size, seed);
      live_.push_back({p, size, seed});
    }
    return ok;
  }

  template <class Pred>
  void release_where(Pred&& pred) {
    if (broken_) return;
    std::vector<LiveBlock> keep;
    for (const LiveBlock& b : live_) {
      if (!pred(b)) {
        keep.push_back(b);
        continue;
      }
      if (!check_full(b.ptr, b.size, b.seed))
        out_.problems.push_back("bytes changed before a free of " + std::to_string(b.size));
      // A free never calls the backend: it must not fail.
      try {
        rig_.alloc->deallocate(b.ptr, b.size);
      } catch (const std::exception& e) {
        out_.problems.push_back(std::string("deallocate threw: ") + e.what());
      }
    }
    live_ = std::move(keep);
    after_call("deallocate", true);
  }

  void after_call(const char* what, bool ok) {
    std::string inv = rig_.alloc->check_invariants();
    if (!inv.empty()) {
      out_.problems.push_back(std::string("invariants after ") + what +
                              (ok ? "" : " (which failed)") + ": " + inv);
      broken_ = true;
    }
    for (const LiveBlock& b : live_) {
      if (!check_sampled(b.ptr, b.size, b.seed)) {
        out_.problems.push_back(std::string("bytes changed after ") + what);
        break;
      }
    }
  }

  Rig& rig_;
  Outcome& out_;
  std::vector<LiveBlock> live_;
  std::uint64_t next_seed_ = 1;
  bool broken_ = false;
};

std::string describe(const Outcome& o) {
  std::string s;
  for (const std::string& p : o.problems) s += "\n  " + p;
  return s;
}

// One run: arm, work, check, clear, recover, drain. Returns the faults
// injected; `out` tells what happened.
std::uint64_t run_once(const std::function<void(FaultBackend&)>& arm, Outcome& out,
                       WorkerMode worker = WorkerMode::inline_jobs) {
  Rig rig(worker, kWorkloadReserve);
  Workload w(rig, out);
  arm(*rig.fault);
  w.run();
  w.verify_all();
  const std::uint64_t injected = rig.fault->injected_total();
  rig.fault->clear();
  w.recover();
  w.verify_all();
  w.drain();
  if (rig.refusals->refused() > 0)
    out.problems.push_back("the backend refused a call the lake made: " + rig.refusals->last());
  return injected;
}

// Calls of each VMM operation in a run without faults.
std::uint64_t clean_calls(VmmOp op) {
  Rig rig(WorkerMode::inline_jobs, kWorkloadReserve);
  Outcome out;
  Workload w(rig, out);
  w.run();
  w.verify_all();
  const std::uint64_t n = rig.counting->calls(op);
  w.recover();
  w.drain();
  EXPECT_EQ(out.problems.size(), 0u) << describe(out);
  return n;
}

class FaultsByWorker : public testing::TestWithParam<WorkerMode> {};

std::string worker_name(const testing::TestParamInfo<WorkerMode>& info) {
  return info.param == WorkerMode::thread ? "WorkerThread" : "WorkerInline";
}

TEST_P(FaultsByWorker, WorkloadIsCleanWithoutFaults) {
  Rig rig(GetParam(), kWorkloadReserve);
  Outcome out;
  Workload w(rig, out);
  w.run();
  w.verify_all();
  const Stats s = rig.alloc->stats();
  EXPECT_EQ(out.backend_errors, 0) << describe(out);
  // With the worker inline the run is the same every time and reaches every
  // path the sweep relies on; with a thread, the worker's timing changes the
  // layout (when its reserve is made), so only the outcome is checked.
  if (GetParam() == WorkerMode::inline_jobs) {
    EXPECT_EQ(out.out_of_memory, 0) << describe(out);
    EXPECT_GT(s.worker_vmm_calls.current, 0) << "the mapping worker must have work";
    EXPECT_GT(s.rung_stitch.current, 0) << "the workload must stitch";
    EXPECT_GT(s.rung_fragment.current + s.rung_free_run.current, 0);
    EXPECT_GT(s.chunks_released.current, 0) << "the workload must release chunks";
    for (VmmOp op : kOps)
      EXPECT_GT(rig.counting->calls(op), 0u) << "the workload never calls " << vmm_op_name(op);
  }
  w.recover();
  w.drain();
  EXPECT_EQ(out.problems.size(), 0u) << describe(out);
}

// The checks must see damage: a byte changed in a live block is reported.
TEST(Faults, CheckersSeeACorruptedByte) {
  std::vector<unsigned char> buf(3 * U + 77);
  fill(buf.data(), buf.size(), 5);
  EXPECT_TRUE(check_full(buf.data(), buf.size(), 5));
  EXPECT_TRUE(check_sampled(buf.data(), buf.size(), 5));
  buf[2 * U + 100] ^= 1;
  EXPECT_FALSE(check_full(buf.data(), buf.size(), 5));
  EXPECT_FALSE(check_sampled(buf.data(), buf.size(), 5));
  buf[2 * U + 100] ^= 1;
  buf.back() ^= 0x80;
  EXPECT_FALSE(check_full(buf.data(), buf.size(), 5));
  EXPECT_FALSE(check_sampled(buf.data(), buf.size(), 5));
}

// A status and the exceptions it may surface as.
struct Sweep {
  VmmOp op;
  Status status;
};

std::string sweep_name(const testing::TestParamInfo<Sweep>& info) {
  return std::string(vmm_op_name(info.param.op)) + "_" + status_name(info.param.status);
}

class FaultSweep : public testing::TestWithParam<Sweep> {};

// The n-th call of one operation fails, for every n the workload reaches.
TEST_P(FaultSweep, EveryCallSiteFailsCleanly) {
  const auto [op, status] = GetParam();
  const bool exhaustion = status == Status::out_of_memory || status == Status::out_of_va;
  const std::uint64_t calls = clean_calls(op);
  ASSERT_GT(calls, 0u);
  std::uint64_t injected = 0, survived = 0;
  int absorbed = 0;
  std::string failures;
  // A fault changes the path the workload takes, so look a little past the
  // calls of a clean run.
  for (std::uint64_t n = 1; n <= calls + 2; ++n) {
    Outcome out;
    const std::uint64_t hit = run_once([&](FaultBackend& f) { f.fail_nth(op, n, status); }, out);
    injected += hit;
    if (exhaustion && out.backend_errors > 0)
      out.problems.push_back("exhaustion surfaced as backend_error");
    if (!exhaustion && out.out_of_memory > 0)
      out.problems.push_back("a backend error surfaced as out_of_memory");
    if (out.problems.empty()) {
      survived += hit;
      if (hit > 0 && out.out_of_memory + out.backend_errors == 0) ++absorbed;
    } else if (failures.size() < 4000) {
      failures += "\n call " + std::to_string(n) + " of " + vmm_op_name(op) + ":" + describe(out);
    }
  }
  RecordProperty("faults_injected", static_cast<int>(injected));
  RecordProperty("faults_survived", static_cast<int>(survived));
  RecordProperty("faults_absorbed", absorbed);
  std::cout << "[ faults   ] " << vmm_op_name(op) << " (" << status_name(status)
            << "): " << injected << " injected, " << survived << " survived, " << absorbed
            << " absorbed without an error\n";
  EXPECT_GE(injected, calls) << "every call site of a clean run was failed once";
  EXPECT_EQ(survived, injected) << failures;
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(Faults, FaultSweep, testing::Values(
    Sweep{VmmOp::reserve, Status::error},      Sweep{VmmOp::reserve, Status::out_of_va},
    Sweep{VmmOp::create, Status::out_of_memory}, Sweep{VmmOp::create, Status::error},
    Sweep{VmmOp::map, Status::error},          Sweep{VmmOp::map, Status::out_of_memory},
    Sweep{VmmOp::set_access, Status::error},   Sweep{VmmOp::set_access, Status::out_of_memory},
    Sweep{VmmOp::unmap, Status::error},        Sweep{VmmOp::release, Status::error},
    Sweep{VmmOp::unreserve, Status::error}), sweep_name);
// clang-format on

// Seeds per probability for the random runs; MEMLAKE_FAULT_SEEDS raises it
// for long runs by hand.
std::uint64_t seeds() {
  const char* v = std::getenv("MEMLAKE_FAULT_SEEDS");
  const std::uint64_t n = v ? std::strtoull(v, nullptr, 10) : 0;
  return n > 0 ? n : 100;
}

// Faults at random, several per run, over the listed operations (all when
// the list is empty).
void random_faults(std::initializer_list<VmmOp> ops, WorkerMode worker) {
  std::uint64_t injected = 0, survived = 0;
  std::string failures;
  int runs = 0;
  for (double p : {0.02, 0.1, 0.3}) {
    for (std::uint64_t seed = 1; seed <= seeds(); ++seed, ++runs) {
      Outcome out;
      const std::uint64_t hit =
          run_once([&](FaultBackend& f) { f.fail_randomly(p, seed, ops); }, out, worker);
      injected += hit;
      if (out.problems.empty())
        survived += hit;
      else if (failures.size() < 4000)
        failures +=
            "\n p " + std::to_string(p) + " seed " + std::to_string(seed) + ":" + describe(out);
    }
  }
  testing::Test::RecordProperty("runs", runs);
  testing::Test::RecordProperty("faults_injected", static_cast<int>(injected));
  testing::Test::RecordProperty("faults_survived", static_cast<int>(survived));
  std::cout << "[ faults   ] random: " << runs << " runs, " << injected << " injected, " << survived
            << " survived\n";
  EXPECT_GT(injected, static_cast<std::uint64_t>(runs));
  EXPECT_EQ(survived, injected) << failures;
}

TEST_P(FaultsByWorker, RandomFaultsOnTheAllocationPath) {
  random_faults({VmmOp::reserve, VmmOp::create, VmmOp::map, VmmOp::set_access, VmmOp::release},
                GetParam());
}

TEST_P(FaultsByWorker, RandomFaultsEverywhere) {
  random_faults({}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultsByWorker,
                         testing::Values(WorkerMode::inline_jobs, WorkerMode::thread), worker_name);

// The smallest case of a failed unmap: empty_cache reports it, and the lake
// must stay consistent, so that a later empty_cache returns everything.
TEST(Faults, FailedUnmapInEmptyCacheLeavesTheLakeConsistent) {
  Rig rig;
  Allocator& a = *rig.alloc;
  void* p = a.allocate(4 * U);
  a.deallocate(p, 4 * U);
  a.process_pending_frees();
  rig.fault->fail_nth(VmmOp::unmap, 1);
  EXPECT_THROW(a.empty_cache(), backend_error);
  EXPECT_EQ(a.check_invariants(), "");
  rig.fault->clear();
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(rig.host->live_chunks(), 0u);
  EXPECT_EQ(rig.host->mapped_ranges(), 0u);
  EXPECT_EQ(rig.host->reserved_ranges(), 0u);
}

// A block continued past its segment's end maps a chunk into the segment's
// reserved room. When that mapping's undo is refused too, what is left
// lies inside the segment's reservation: the segment's range must not be
// unreserved while it is still mapped, and the error must name the fault.
TEST(Faults, RefusedUndoOfAnExtensionIsRetiredBeforeItsSegment) {
  Rig rig;
  Allocator& a = *rig.alloc;
  void* x = a.allocate(3 * U - P);  // leaves a tail in its last chunk
  rig.fault->fail_nth(VmmOp::set_access, 1);
  rig.fault->fail_nth(VmmOp::unmap, 1);
  EXPECT_THROW(a.allocate(2 * U), backend_error) << "the extension's set_access fails";
  ASSERT_EQ(rig.fault->injected(VmmOp::set_access), 1u);
  ASSERT_EQ(rig.fault->injected(VmmOp::unmap), 1u) << "and so does its undo";
  EXPECT_EQ(a.check_invariants(), "");
  rig.fault->clear();
  a.deallocate(x, 3 * U - P);
  a.process_pending_frees();
  rig.fault->fail_nth(VmmOp::unmap, 1);  // the retry of the undo is refused again
  try {
    a.empty_cache();
  } catch (const backend_error& e) {
    EXPECT_NE(std::string(e.what()).find("injected fault in unmap"), std::string::npos)
        << "the error names a consequence, not the fault: " << e.what();
  }
  EXPECT_EQ(a.check_invariants(), "");
  rig.fault->clear();
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(rig.host->live_chunks(), 0u);
  EXPECT_EQ(rig.host->mapped_ranges(), 0u);
  EXPECT_EQ(rig.host->reserved_ranges(), 0u);
  EXPECT_EQ(rig.refusals->refused(), 0u)
      << "the backend refused a call the lake should not have made: " << rig.refusals->last();
}

TEST(Faults, FailedUnreserveInEmptyCacheLeavesTheLakeConsistent) {
  Rig rig;
  Allocator& a = *rig.alloc;
  void* p = a.allocate(4 * U);
  a.deallocate(p, 4 * U);
  a.process_pending_frees();
  rig.fault->fail_nth(VmmOp::unreserve, 1);
  EXPECT_THROW(a.empty_cache(), backend_error);
  EXPECT_EQ(a.check_invariants(), "");
  rig.fault->clear();
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(rig.host->live_chunks(), 0u);
  EXPECT_EQ(rig.host->mapped_ranges(), 0u);
  EXPECT_EQ(rig.host->reserved_ranges(), 0u);
}

// Only the exhaustion kinds, at random: the errors are all out_of_memory.
TEST(Faults, RandomExhaustionIsOutOfMemory) {
  std::uint64_t injected = 0;
  std::string failures;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    Outcome out;
    injected +=
        run_once([&](FaultBackend& f) { f.fail_randomly(0.25, seed, {VmmOp::create}); }, out);
    if (out.backend_errors > 0) out.problems.push_back("create exhaustion as backend_error");
    if (!out.problems.empty() && failures.size() < 4000)
      failures += "\n seed " + std::to_string(seed) + ":" + describe(out);
  }
  RecordProperty("faults_injected", static_cast<int>(injected));
  EXPECT_GT(injected, 20u);
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace memlake
