// The soak run (see soak.hpp).
#include "soak.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "pattern.hpp"

namespace memlake::test {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = kKiB * 1024;
constexpr std::size_t kGiB = kMiB * 1024;
constexpr std::size_t kMaxLivePerThread = 48;

double env_number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  return end != v ? d : fallback;
}

// Mostly small, some large: 70% up to 64 KiB, 20% up to 8 MiB, 8.5% up to
// 128 MiB, 1.5% up to 1 GiB; sizes uniform within each band.
std::size_t draw_size(std::mt19937_64& rng) {
  const unsigned band = static_cast<unsigned>(rng() % 1000);
  std::size_t lo = 512, hi = 64 * kKiB;
  if (band >= 985) {
    lo = 128 * kMiB;
    hi = kGiB;
  } else if (band >= 900) {
    lo = 8 * kMiB;
    hi = 128 * kMiB;
  } else if (band >= 700) {
    lo = 64 * kKiB;
    hi = 8 * kMiB;
  }
  return lo + rng() % (hi - lo + 1);
}

// The status a backend_error names: the injected one ("... of this
// operation): <status>"), else the first "(<status>)", else "unnamed".
std::string cause_of(const std::string& message) {
  auto token_at = [&](std::size_t at) {
    std::size_t end = at;
    while (end < message.size() &&
           (std::islower(static_cast<unsigned char>(message[end])) || message[end] == '_'))
      ++end;
    return message.substr(at, end - at);
  };
  const std::string marker = "of this operation): ";
  if (const std::size_t at = message.find(marker); at != std::string::npos)
    return token_at(at + marker.size());
  for (std::size_t at = message.find('('); at != std::string::npos;
       at = message.find('(', at + 1)) {
    const std::string t = token_at(at + 1);
    if (!t.empty() && at + 1 + t.size() < message.size() && message[at + 1 + t.size()] == ')')
      return t;
  }
  return "unnamed";
}

struct Live {
  void* ptr;
  std::size_t size;
  std::uint64_t seed;
};

class Soak {
 public:
  explicit Soak(const SoakOptions& o) : o_(o) {
    HostBackendOptions h;
    h.capacity = o.capacity;
    h.shareable = false;
    h.max_mappings = o.max_mappings;
    auto host = std::make_unique<HostBackend>(h);
    host_ = host.get();
    auto below = std::make_unique<CountingBackend>(std::move(host));
    below_ = below.get();
    auto fault = std::make_unique<FaultBackend>(std::move(below));
    fault_ = fault.get();
    FaultBackend::RandomFaults f;
    f.probability = o.fault_probability;
    f.seed = o.seed;
    f.statuses.assign(FaultBackend::refusal_kinds().begin(), FaultBackend::refusal_kinds().end());
    fault_->fail_randomly(f);
    Config c;
    c.backend = BackendKind::host;
    c.capacity = o.capacity;
    c.worker = o.worker_thread ? WorkerMode::thread : WorkerMode::inline_jobs;
    c.reserve = o.reserve;
    alloc_ = std::make_unique<Allocator>(c, std::move(fault));
    for (int i = 0; i < o.streams; ++i) streams_.push_back(alloc_->create_stream());
  }

  SoakReport run() {
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < o_.streams; ++t) threads.emplace_back([this, t] { thread_body(t); });
    for (auto& th : threads) th.join();
    finish();
    r_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return r_;
  }

 private:
  bool out_of_time(Clock::time_point start) const {
    return o_.seconds > 0 &&
           std::chrono::duration<double>(Clock::now() - start).count() > o_.seconds;
  }

  void note(const std::string& what) {
    std::lock_guard lock(mutex_);
    if (r_.first_failures.size() < 8) r_.first_failures.push_back(what);
  }

  void count_error(const std::string& message) {
    const std::string cause = cause_of(message);
    std::lock_guard lock(mutex_);
    if (++r_.errors[cause] == 1) r_.first_error[cause] = message;
  }

  void thread_body(int t) {
    std::mt19937_64 rng(o_.seed * 1000003 + static_cast<std::uint64_t>(t));
    const Stream stream = streams_[static_cast<std::size_t>(t)];
    const Stream other = streams_[static_cast<std::size_t>(t + 1) % streams_.size()];
    std::vector<Live> live;
    const auto start = Clock::now();
    std::uint64_t mine = 0;
    while (taken_.fetch_add(1, std::memory_order_relaxed) < o_.operations && !out_of_time(start)) {
      ++mine;
      const bool allocate = live.empty() || (live.size() < kMaxLivePerThread && rng() % 100 < 55);
      if (allocate) {
        allocate_one(rng, stream, live);
      } else {
        free_one(rng() % live.size(), rng() % 8 == 0 ? other : nullptr, stream, live);
      }
      if (mine % 256 == 0) check(t);
      if (mine % 4096 == 0) alloc_->process_pending_frees();
      if (t == 0 && mine % 30000 == 0) empty_cache();
    }
    while (!live.empty()) free_one(live.size() - 1, nullptr, stream, live);
  }

  void allocate_one(std::mt19937_64& rng, Stream stream, std::vector<Live>& live) {
    const std::size_t size = draw_size(rng);
    void* p = nullptr;
    try {
      p = alloc_->allocate(size, stream);
    } catch (const out_of_memory&) {
      oom_.fetch_add(1, std::memory_order_relaxed);
      // Make room: a third of this thread's blocks go.
      for (std::size_t n = live.size() / 3; n > 0; --n)
        free_one(rng() % live.size(), nullptr, stream, live);
      return;
    } catch (const backend_error& e) {
      count_error(e.what());
      return;
    } catch (const std::exception& e) {
      other_.fetch_add(1, std::memory_order_relaxed);
      note(std::string("allocate threw ") + typeid(e).name() + ": " + e.what());
      return;
    } catch (...) {
      other_.fetch_add(1, std::memory_order_relaxed);
      note("allocate threw something that is not a std::exception");
      return;
    }
    const std::uint64_t seed = rng();
    fill_pattern(p, size, seed);
    live.push_back({p, size, seed});
    allocations_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(size, std::memory_order_relaxed);
  }

  void free_one(std::size_t i, Stream also_used_on, Stream stream, std::vector<Live>& live) {
    const Live b = live[i];
    live[i] = live.back();
    live.pop_back();
    if (!check_pattern(b.ptr, b.size, b.seed)) {
      corrupted_.fetch_add(1, std::memory_order_relaxed);
      note("block of " + std::to_string(b.size) + " bytes changed while live");
    }
    try {
      if (also_used_on != nullptr) alloc_->record_stream(b.ptr, also_used_on);
      alloc_->deallocate(b.ptr, b.size, stream);
      frees_.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      failed_frees_.fetch_add(1, std::memory_order_relaxed);
      note(std::string("deallocate threw ") + typeid(e).name() + ": " + e.what());
    }
  }

  void check(int t) {
    const std::string broken = alloc_->check_invariants();
    if (!broken.empty()) {
      invariants_.fetch_add(1, std::memory_order_relaxed);
      note("invariant (thread " + std::to_string(t) + "): " + broken);
    }
    const std::size_t units = host_->usage().mappings;
    std::size_t peak = peak_units_.load(std::memory_order_relaxed);
    while (units > peak && !peak_units_.compare_exchange_weak(peak, units)) {
    }
  }

  void empty_cache() {
    try {
      alloc_->empty_cache();
    } catch (const backend_error& e) {
      count_error(e.what());
    } catch (const std::exception& e) {
      other_.fetch_add(1, std::memory_order_relaxed);
      note(std::string("empty_cache threw ") + typeid(e).name() + ": " + e.what());
    }
  }

  // Faults off, everything freed: the cache is emptied until the backend
  // holds nothing (a refused unmap is retried by the next empty_cache).
  void finish() {
    fault_->clear();
    for (int i = 0; i < 50; ++i) {
      alloc_->process_pending_frees();
      empty_cache();
      if (host_->live_chunks() == 0 && host_->mapped_ranges() == 0 && host_->reserved_ranges() == 0)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    check(-1);
    r_.operations = std::min<std::uint64_t>(taken_.load(), o_.operations);
    r_.allocations = allocations_.load();
    r_.frees = frees_.load();
    r_.bytes_allocated = bytes_.load();
    r_.out_of_memory = oom_.load();
    r_.other_exceptions = other_.load();
    r_.failed_frees = failed_frees_.load();
    r_.corrupted_blocks = corrupted_.load();
    r_.invariant_failures = invariants_.load();
    r_.peak_mapping_units = peak_units_.load();
    r_.chunks_left = host_->live_chunks();
    r_.bytes_left = host_->physical_bytes();
    r_.mappings_left = host_->mapped_ranges();
    r_.reservations_left = host_->reserved_ranges();
    for (Status s : FaultBackend::refusal_kinds()) {
      if (const std::uint64_t n = fault_->injected(s)) r_.injected[status_name(s)] = n;
      if (const std::uint64_t n = below_->refusals(s)) r_.refused[status_name(s)] = n;
    }
    for (Stream s : streams_) alloc_->destroy_stream(s);
  }

  const SoakOptions o_;
  HostBackend* host_ = nullptr;
  CountingBackend* below_ = nullptr;
  FaultBackend* fault_ = nullptr;
  std::unique_ptr<Allocator> alloc_;
  std::vector<Stream> streams_;
  std::atomic<std::uint64_t> taken_{0};
  std::atomic<std::uint64_t> allocations_{0}, frees_{0}, bytes_{0}, oom_{0}, other_{0},
      failed_frees_{0}, corrupted_{0}, invariants_{0};
  std::atomic<std::size_t> peak_units_{0};
  std::mutex mutex_;  // guards r_'s maps and first_failures while threads run
  SoakReport r_;
};

}  // namespace

SoakOptions SoakOptions::with_env() const {
  SoakOptions o = *this;
  o.operations =
      static_cast<std::uint64_t>(env_number("MEMLAKE_SOAK_OPS", static_cast<double>(o.operations)));
  o.seconds = env_number("MEMLAKE_SOAK_SECONDS", o.seconds);
  if (o.seconds > 0 && std::getenv("MEMLAKE_SOAK_OPS") == nullptr) o.operations = ~std::uint64_t{0};
  o.capacity = static_cast<std::size_t>(
      env_number("MEMLAKE_SOAK_CAPACITY", static_cast<double>(o.capacity)));
  o.fault_probability = env_number("MEMLAKE_SOAK_FAULTS", o.fault_probability);
  o.max_mappings = static_cast<std::size_t>(
      env_number("MEMLAKE_SOAK_MAX_MAPPINGS", static_cast<double>(o.max_mappings)));
  o.seed = static_cast<std::uint64_t>(env_number("MEMLAKE_SOAK_SEED", static_cast<double>(o.seed)));
  return o;
}

std::uint64_t SoakReport::exhaustion_errors() const {
  std::uint64_t n = 0;
  for (const auto& [name, count] : errors) {
    for (Status s : {Status::out_of_memory, Status::out_of_va, Status::out_of_mappings,
                     Status::out_of_descriptors, Status::out_of_host_memory}) {
      if (name == status_name(s)) n += count;
    }
  }
  return n;
}

std::string SoakReport::summary() const {
  auto list = [](const std::map<std::string, std::uint64_t>& m) {
    std::string s;
    for (const auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k + " " + std::to_string(v);
    return s.empty() ? std::string("none") : s;
  };
  char head[512];
  std::snprintf(head, sizeof head,
                "%llu operations in %.1f s: %llu allocations (%.1f GiB), %llu frees, %llu out of "
                "memory; peak mapping units %llu",
                static_cast<unsigned long long>(operations), seconds,
                static_cast<unsigned long long>(allocations),
                static_cast<double>(bytes_allocated) / static_cast<double>(kGiB),
                static_cast<unsigned long long>(frees),
                static_cast<unsigned long long>(out_of_memory),
                static_cast<unsigned long long>(peak_mapping_units));
  std::string s = head;
  s += "\n  faults injected: " + list(injected);
  s += "\n  refused by the backend itself: " + list(refused);
  s += "\n  backend errors seen by the caller, by cause: " + list(errors);
  char tail[512];
  std::snprintf(tail, sizeof tail,
                "\n  lost: %llu chunks, %llu bytes, %llu mappings, %llu reservations; %llu "
                "corrupted blocks, %llu failed frees, %llu other exceptions, %llu invariant "
                "failures",
                static_cast<unsigned long long>(chunks_left),
                static_cast<unsigned long long>(bytes_left),
                static_cast<unsigned long long>(mappings_left),
                static_cast<unsigned long long>(reservations_left),
                static_cast<unsigned long long>(corrupted_blocks),
                static_cast<unsigned long long>(failed_frees),
                static_cast<unsigned long long>(other_exceptions),
                static_cast<unsigned long long>(invariant_failures));
  s += tail;
  for (const auto& [cause, message] : first_error) s += "\n  first " + cause + ": " + message;
  for (const std::string& f : first_failures) s += "\n  first failures: " + f;
  return s;
}

SoakReport run_soak(const SoakOptions& options) {
  return Soak(options).run();
}

}  // namespace memlake::test
