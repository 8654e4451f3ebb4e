// DeferringBackend (see deferring_backend.hpp).
#include "backend/adaptors/deferring_backend.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "backend/backend_detail.hpp"
#include "common/timing.hpp"

namespace memlake {

namespace {
thread_local DeferringBackend* t_deferring = nullptr;
thread_local bool t_runner = false;
// How often a runner that gives way looks at the turns again.
constexpr std::chrono::microseconds kGiveWayPoll{20};
// backend.hpp: a map adds at most two mapping units.
constexpr std::size_t kUnitsPerMap = 2;
}  // namespace

DeferringBackend::DeferringBackend(std::unique_ptr<Backend> upstream)
    : BackendAdaptor(std::move(upstream), "deferring"), mapping_limit_(limits().mappings) {
  if (this->upstream().counter_create(&counter_) != Status::ok) {
    counter_ = nullptr;
    unavailable_ = this->upstream().last_error();
  }
}

DeferringBackend::~DeferringBackend() {
  run_pending();
  if (counter_ != nullptr) upstream().counter_destroy(counter_);
}

DeferringBackend::RunnerScope::RunnerScope() noexcept {
  t_runner = true;
}

DeferringBackend::RunnerScope::~RunnerScope() {
  t_runner = false;
}

DeferringBackend::DeferScope::DeferScope(DeferringBackend* b) noexcept : saved_(t_deferring) {
  if (b != nullptr && b->available()) t_deferring = b;
}

DeferringBackend::DeferScope::~DeferScope() {
  t_deferring = saved_;
}

bool DeferringBackend::deferring() const {
  return t_deferring == this && !failed_.load(std::memory_order_relaxed);
}

BackendUsage DeferringBackend::usage() const {
  BackendUsage u = upstream().usage();
  std::lock_guard lock(queue_mutex_);
  u.mappings += queued_units_ + open_units_;
  return u;
}

Status DeferringBackend::defer(Call call) {
  if (call.op == Op::map && near_limit()) {
    // Near the mapping limit a map is made now, after what is queued: a
    // refusal then reaches the lake, which reclaims and retries, instead of
    // failing after the block was handed out (a worker job may take units
    // meanwhile that no count here foresees).
    seal();
    run_pending();
    return upstream().map(call.va, call.size, call.chunk);
  }
  open_.calls.push_back(call);
  if (call.op == Op::unmap) unmaps_queued_.fetch_add(1, std::memory_order_release);
  if (call.op == Op::map) {
    std::lock_guard lock(queue_mutex_);
    open_units_ += kUnitsPerMap;
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  return Status::ok;
}

bool DeferringBackend::near_limit() const {
  if (mapping_limit_ == BackendLimits::kUnbounded) return false;
  return usage().mappings + kUnitsPerMap > mapping_limit_ - mapping_limit_ / 8;
}

bool DeferringBackend::seal() {
  // Maps made at once leave nothing to wait for on their own.
  if (std::all_of(open_.calls.begin(), open_.calls.end(),
                  [](const Call& c) { return c.op == Op::mapped; })) {
    open_.calls.clear();
    return false;
  }
  Batch b;
  b.calls.swap(open_.calls);
  b.sealed_ns = now_ns();
  {
    std::lock_guard lock(queue_mutex_);
    b.number = sealed_.load(std::memory_order_relaxed) + 1;
    b.units = std::exchange(open_units_, 0);
    queued_units_ += b.units;
    queue_.push_back(std::move(b));
    sealed_.store(queue_.back().number, std::memory_order_release);
  }
  batches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Status DeferringBackend::wait(StreamHandle stream) {
  const std::uint64_t target = sealed_.load(std::memory_order_acquire);
  if (done_.load(std::memory_order_acquire) >= target) return Status::ok;
  auto it = std::find_if(waited_.begin(), waited_.end(),
                         [&](const auto& w) { return w.first == stream; });
  if (it != waited_.end() && it->second >= target) return Status::ok;
  const Status s = upstream().stream_wait_counter(stream, counter_, target);
  if (s != Status::ok) return s;
  if (it != waited_.end())
    it->second = target;
  else
    waited_.emplace_back(stream, target);
  stream_waits_.fetch_add(1, std::memory_order_relaxed);
  return Status::ok;
}

void DeferringBackend::forget(StreamHandle stream) {
  std::erase_if(waited_, [&](const auto& w) { return w.first == stream; });
}

Status DeferringBackend::make(const Call& c) {
  Status s = Status::ok;
  for (int attempt = 0; attempt < 2; ++attempt) {
    switch (c.op) {
      case Op::map:
        s = upstream().map(c.va, c.size, c.chunk);
        break;
      case Op::set_access:
        s = upstream().set_access(c.va, c.size);
        break;
      case Op::mapped:
        break;  // made when it was asked for
      case Op::unmap:
        s = upstream().unmap(c.va, c.size);
        break;
    }
    if (s == Status::ok) break;
  }
  return s;
}

// Access costs per handle and the driver runs one VMM call at a time: a
// range the batch mapped is granted access a few chunks per call, so that
// the allocating thread's own driver calls wait for at most one of them.
void DeferringBackend::split_access(const Batch& batch, std::vector<Call>* calls) {
  std::vector<std::pair<DevicePtr, std::size_t>> mapped;
  for (const Call& c : batch.calls) {
    if (c.op == Op::map || c.op == Op::mapped) mapped.emplace_back(c.va, c.size);
    if (c.op == Op::mapped) continue;
    if (c.op != Op::set_access) {
      calls->push_back(c);
      continue;
    }
    // The batch's maps tile [va, va + size) in address order: cut there.
    std::vector<std::pair<DevicePtr, std::size_t>> inside;
    for (const auto& m : mapped)
      if (m.first >= c.va && m.first + m.second <= c.va + c.size) inside.push_back(m);
    std::sort(inside.begin(), inside.end());
    DevicePtr at = c.va;
    bool tiles = true;
    for (const auto& m : inside) {
      tiles = tiles && m.first == at;
      at = m.first + m.second;
    }
    if (!tiles || at != c.va + c.size || inside.size() <= kBackgroundChunksPerAccess) {
      calls->push_back(c);
      continue;
    }
    for (std::size_t i = 0; i < inside.size(); i += kBackgroundChunksPerAccess) {
      const std::size_t end = std::min(inside.size(), i + kBackgroundChunksPerAccess);
      const DevicePtr from = inside[i].first;
      calls->push_back(
          {Op::set_access, from, inside[end - 1].first + inside[end - 1].second - from, 0});
    }
  }
}

void DeferringBackend::run(const Batch& batch) {
  std::vector<Call> calls;
  calls.reserve(batch.calls.size());
  split_access(batch, &calls);
  for (const Call& c : calls) {
    // The allocating thread's own driver calls go first (turn_taking_backend.hpp).
    if (t_runner && turns_ != nullptr)
      while (turns_->held() && others_running_.load(std::memory_order_relaxed) == 0)
        std::this_thread::sleep_for(kGiveWayPoll);
    if (make(c) != Status::ok) note_failure(c);
    if (c.op == Op::unmap) unmaps_queued_.fetch_sub(1, std::memory_order_release);
  }
  // Raised whatever happened: no stream may wait for ever.
  upstream().counter_set(counter_, batch.number);
}

void DeferringBackend::note_failure(const Call& c) {
  failures_.fetch_add(1, std::memory_order_relaxed);
  std::string cause = upstream().last_error();
  std::lock_guard lock(queue_mutex_);
  failed_calls_.push_back(c);
  if (failed_.exchange(true)) return;
  failure_ = "memlake: a mapping made after its block was handed out failed (" + cause +
             "); work that reached the block meanwhile found it unmapped, and mappings are made "
             "at once from now on";
}

bool DeferringBackend::remake_failed() {
  run_pending();
  std::vector<Call> failed;
  {
    std::lock_guard lock(queue_mutex_);
    failed.swap(failed_calls_);
  }
  std::vector<Call> still;
  for (const Call& c : failed)
    if (make(c) != Status::ok) still.push_back(c);
  std::lock_guard lock(queue_mutex_);
  const bool whole = still.empty();
  failed_calls_.insert(failed_calls_.begin(), still.begin(), still.end());
  return whole;
}

bool DeferringBackend::run_pending() {
  if (!pending()) return false;
  if (!t_runner) others_running_.fetch_add(1);
  struct Done {
    std::atomic<int>* others;
    ~Done() {
      if (others != nullptr) others->fetch_sub(1);
    }
  } done{t_runner ? nullptr : &others_running_};
  std::lock_guard running(run_mutex_);
  bool ran = false;
  for (;;) {
    Batch b;
    {
      std::lock_guard lock(queue_mutex_);
      if (queue_.empty()) break;
      b = std::move(queue_.front());
      queue_.pop_front();
    }
    run(b);
    {
      std::lock_guard lock(queue_mutex_);
      queued_units_ -= b.units;
    }
    done_.store(b.number, std::memory_order_release);
    const auto lag = static_cast<std::uint64_t>(std::max<std::int64_t>(now_ns() - b.sealed_ns, 0));
    lag_ns_.fetch_add(lag, std::memory_order_relaxed);
    if (lag > lag_max_ns_.load(std::memory_order_relaxed)) lag_max_ns_.store(lag);
    ran = true;
  }
  return ran;
}

std::string DeferringBackend::take_failure() {
  std::lock_guard lock(queue_mutex_);
  return std::exchange(failure_, std::string());
}

DeferringBackend::Counts DeferringBackend::counts() const {
  return {batches_.load(),  calls_.load(),  stream_waits_.load(),
          failures_.load(), lag_ns_.load(), lag_max_ns_.load()};
}

Status DeferringBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  if (!deferring()) return upstream().map(va, size, chunk);
  if (unmaps_queued_.load(std::memory_order_acquire) != 0) return defer({Op::map, va, size, chunk});
  const Status s = upstream().map(va, size, chunk);
  if (s == Status::ok) open_.calls.push_back({Op::mapped, va, size, chunk});
  return s;
}

Status DeferringBackend::set_access(DevicePtr va, std::size_t size) {
  if (deferring()) return defer({Op::set_access, va, size, 0});
  return upstream().set_access(va, size);
}

Status DeferringBackend::unmap(DevicePtr va, std::size_t size) {
  if (deferring()) return defer({Op::unmap, va, size, 0});
  run_pending();
  return upstream().unmap(va, size);
}

Status DeferringBackend::unreserve(DevicePtr va, std::size_t size) {
  if (deferring()) seal();
  run_pending();
  return upstream().unreserve(va, size);
}

Status DeferringBackend::release_chunk(ChunkHandle chunk) {
  if (deferring()) seal();
  run_pending();
  return upstream().release_chunk(chunk);
}

Status DeferringBackend::export_chunk(ChunkHandle chunk, int* fd) {
  if (deferring()) seal();
  run_pending();
  return upstream().export_chunk(chunk, fd);
}

}  // namespace memlake
