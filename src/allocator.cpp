// The allocator's front end: locking, caller-facing bookkeeping, the
// allocation ladder across scheduler and lake, errors and stats.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "allocator_impl.hpp"
#include "backend/make_backend.hpp"
#include "stat_update.hpp"
#include "timing.hpp"

namespace memlake {

namespace {

std::unique_ptr<Backend> wrap_counting(std::unique_ptr<Backend> backend, CountingBackend** out) {
  if (!backend) throw error("memlake: no backend given");
  auto counting = std::make_unique<CountingBackend>(std::move(backend));
  *out = counting.get();
  return counting;
}

// The one place capacity is decided: the backend's (which applied capacity
// or capacity_fraction when make_backend built it), or less where a caller
// gave its own backend with a smaller capacity in the config.
std::size_t capacity_of(const Config& c, const Backend& b) {
  return c.capacity != 0 ? std::min(c.capacity, b.capacity()) : b.capacity();
}

// The config is checked before anything is built over it.
const Config& validated(const Config& c) {
  c.validate();
  return c;
}

// The capacity, checked: at least one chunk.
std::size_t checked_capacity(const Config& c, const CountingBackend& b) {
  const std::size_t capacity = capacity_of(c, b);
  if (capacity < b.granularity()) {
    throw config_error("memlake config: capacity " + std::to_string(capacity) +
                       " bytes is below one chunk (the " + b.upstream().name() +
                       " backend's granularity, " + std::to_string(b.granularity()) + " bytes)");
  }
  return capacity;
}

lake::LakeOptions lake_options(const Config& c, const Backend& b) {
  lake::LakeOptions o;
  o.granularity = b.granularity();
  o.small_max = c.small_max;
  o.max_chunk = std::max(c.max_chunk, o.granularity);
  o.large_chunk = c.large_chunk == 0 ? 0 : std::max(c.large_chunk, o.granularity);
  o.large_chunk_from = c.large_chunk_from;
  o.fit_slack = c.fit_slack;
  o.stitch_cache_ratio = c.stitch_cache_ratio;
  o.max_stitch_chunks = std::max<std::size_t>(c.max_stitch_chunks, 1);
  o.defer_eviction = c.worker != WorkerMode::off;
  o.reserve = c.worker != WorkerMode::off ? c.reserve : 0;
  return o;
}

std::string gib(std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", bytes,
                static_cast<double>(bytes) / (1 << 30));
  return buf;
}

std::unique_ptr<TraceRecorder> make_recorder(const Config& c, ObserverList& observers) {
  if (c.record.empty()) return nullptr;
  auto r = std::make_unique<TraceRecorder>(c.record, c.device);
  observers.add(r.get());
  return r;
}

void fix_gauge(StatValue&) {}
void fix_counter(StatValue& v) {
  v.peak = v.current;
}

}  // namespace

AllocatorImpl::AllocatorImpl(const Config& config, std::unique_ptr<Backend> backend)
    : config_(validated(config)),
      backend_(wrap_counting(std::move(backend), &counting_)),
      recorder_(make_recorder(config_, observers_)),
      pool_(*backend_, checked_capacity(config_, *counting_), stats_),
      lake_(*backend_, pool_, lake_options(config_, *backend_), stats_, observers_),
      order_(*backend_, stats_),
      worker_(mutex_, lake_, stats_, config_.worker) {}

AllocatorImpl::~AllocatorImpl() {
  worker_.stop();
  std::lock_guard lock(mutex_);
  // Pending frees hold lake blocks; once the allocator goes, so does the
  // lake, and every chunk is released with it.
}

void* AllocatorImpl::allocate(std::size_t bytes, Stream stream) {
  auto lock = lock_counting_waits(mutex_, stats_.lock_waits, stats_.lock_wait_ns);
  CriticalPathScope critical;
  const std::uint64_t history = history_.push(bytes);
  return allocate_slow(bytes, stream, history);
}

void* AllocatorImpl::allocate_slow(std::size_t bytes, Stream stream, std::uint64_t history) {
  ScopedNanos timed(stats_.allocate_ns);
  StreamOrder::CallScope call(order_);
  if (bytes > lake_.capacity()) out_of_memory(bytes, stream);
  if (!order_.admit(stream)) {
    ++stats_.misuse_errors.current;
    char buf[128];
    std::snprintf(buf, sizeof buf, "unknown stream %p: not a stream of this allocator's %s backend",
                  stream, counting_->upstream().name());
    misuse(buf);
  }
  lake_.fences_completed(order_.completed());
  const lake::Request request{lake::round_up(std::max<std::size_t>(bytes, 1), lake::kAlignment),
                              history};
  // The ladder (lake/ladder.cpp), in budget order: what is mapped and free,
  // then mapping chunks that exist; new chunks only after that.
  lake::Placed p = lake_.place(request, lake::Budget::map);
  // A synchronization point: frees came back, or this request had to stitch.
  worker_.nudge();
  if (!p) p = lake_.place(request, lake::Budget::create, /*from=*/lake::Budget::create);
  if (!p) {
    // Reclaim: unmap cached ranges and release unused chunks, then climb again.
    order_.record_open_fences();
    lake_.fences_completed(order_.completed());
    lake_.reclaim();
    p = lake_.place(request, lake::Budget::create);
    if (p) p.rung = Rung::reclaim_retry;
  }
  if (!p) out_of_memory(bytes, stream);
  return from_lake(p, bytes, stream);
}

// Memory from the lake may have been freed under a fence another stream
// recorded (release_own): the caller's stream waits for that work first.
void* AllocatorImpl::from_lake(const lake::Placed& p, std::size_t requested, Stream stream) {
  if (MEMLAKE_UNLIKELY(p.fence > lake_.fences_done())) {
    try {
      order_.wait_for(stream, p.fence);
    } catch (...) {
      lake_.free(p.ptr);
      throw;
    }
  }
  return hand_out(p.ptr, p.size, requested, stream, p.rung);
}

void* AllocatorImpl::hand_out(DevicePtr ptr, std::size_t size, std::size_t requested, Stream stream,
                              Rung rung) {
  live_.emplace(ptr, LiveBlock{size, requested, stream, {}});
  ++stats_.allocs.current;
  ++rung_stat(stats_, rung).current;
  gauge(stats_.live_bytes, static_cast<std::int64_t>(size));
  gauge(stats_.requested_bytes, static_cast<std::int64_t>(requested));
  void* p = reinterpret_cast<void*>(ptr);
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_alloc(p, requested, stream, rung); });
  if constexpr (MEMLAKE_DEBUG >= 3) check_debug();
  return p;
}

void AllocatorImpl::deallocate(void* ptr, std::size_t bytes, Stream stream) {
  if (ptr == nullptr) return;
  auto lock = lock_counting_waits(mutex_, stats_.lock_waits, stats_.lock_wait_ns);
  CriticalPathScope critical;
  const auto key = reinterpret_cast<DevicePtr>(ptr);
  auto it = live_.find(key);
  if (MEMLAKE_UNLIKELY(it == live_.end())) {
    ++stats_.misuse_errors.current;
    misuse(bad_pointer(key));
  }
  if (MEMLAKE_UNLIKELY(bytes != 0 && bytes != it->second.requested)) {
    ++stats_.misuse_errors.current;
    char buf[160];
    std::snprintf(buf, sizeof buf, "size mismatch freeing %p: %zu bytes given, the block has %zu",
                  ptr, bytes, it->second.requested);
    misuse(buf);
  }
  if (MEMLAKE_UNLIKELY(!order_.admit(stream))) {
    ++stats_.misuse_errors.current;
    char buf[128];
    std::snprintf(buf, sizeof buf, "unknown stream %p given to free %p", stream, ptr);
    misuse(buf);
  }
  LiveBlock block = std::move(it->second);
  live_.erase(it);
  ++stats_.frees.current;
  gauge(stats_.live_bytes, -static_cast<std::int64_t>(block.size));
  gauge(stats_.requested_bytes, -static_cast<std::int64_t>(block.requested));
  // A block freed on another stream than its own was used on both.
  if (block.stream != stream && std::find(block.also_used_on.begin(), block.also_used_on.end(),
                                          block.stream) == block.also_used_on.end())
    block.also_used_on.push_back(block.stream);
  std::erase(block.also_used_on, stream);
  // A recorded stream destroyed since has finished its work (destroying a
  // stream drains it): nothing to wait for there.
  std::erase_if(block.also_used_on, [&](Stream s) { return !order_.admit(s); });
  const StreamOrder::FreeTag tag = order_.free_on(stream, block.also_used_on);
  lake_.free(key, tag.fence, tag.others_wait);
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_free(ptr, block.requested, stream); });
  if constexpr (MEMLAKE_DEBUG >= 3) check_debug();
}

void AllocatorImpl::record_stream(void* ptr, Stream stream) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(reinterpret_cast<DevicePtr>(ptr));
  if (it == live_.end()) {
    ++stats_.misuse_errors.current;
    misuse("record_stream: " + bad_pointer(reinterpret_cast<DevicePtr>(ptr)));
  }
  if (!order_.admit(stream)) {
    ++stats_.misuse_errors.current;
    misuse("record_stream: unknown stream");
  }
  LiveBlock& b = it->second;
  if (stream != b.stream &&
      std::find(b.also_used_on.begin(), b.also_used_on.end(), stream) == b.also_used_on.end())
    b.also_used_on.push_back(stream);
}

void AllocatorImpl::process_pending_frees() {
  std::lock_guard lock(mutex_);
  order_.record_open_fences();
}

void AllocatorImpl::empty_cache() {
  std::unique_lock lock(mutex_);
  worker_.wait_idle(lock);  // its pinned chunks must be released too
  order_.record_open_fences();
  lake_.fences_completed(order_.completed());
  lake_.reclaim();
}

// Why `ptr` is not a block the caller holds.
std::string AllocatorImpl::bad_pointer(DevicePtr ptr) const {
  return lake_.diagnose_bad_pointer(ptr);
}

void AllocatorImpl::misuse(const std::string& message) const {
  if (config_.on_misuse == MisuseAction::abort) {
    std::fprintf(stderr, "memlake: fatal misuse: %s\n", message.c_str());
    std::abort();
  }
  throw memlake::misuse("memlake: " + message);
}

void AllocatorImpl::out_of_memory(std::size_t bytes, Stream stream) {
  ++stats_.ooms.current;
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_oom(bytes, stream); });
  std::string msg = "memlake: out of memory on device " + std::to_string(backend_->device()) +
                    " (" + counting_->upstream().name() + "): requested " + gib(bytes);
  if (bytes > lake_.capacity()) msg += ", more than the whole capacity";
  msg += "; live " + gib(static_cast<std::size_t>(stats_.live_bytes.current)) + ", reserved " +
         gib(static_cast<std::size_t>(stats_.reserved_bytes.current)) + ", largest free block " +
         gib(lake_.largest_free_block()) + ", free in unused chunks " +
         gib(lake_.free_chunk_bytes()) + ", capacity " + gib(lake_.capacity());
  throw memlake::out_of_memory(msg, bytes);
}

Stats AllocatorImpl::stats() const {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.vmm_calls.current = static_cast<std::int64_t>(counting_->total());
  s.critical_path_vmm_calls.current = static_cast<std::int64_t>(counting_->critical_path());
  s.worker_vmm_calls.current = static_cast<std::int64_t>(counting_->worker());
  s.host_waits.current = static_cast<std::int64_t>(counting_->host_waits());
  s.critical_path_vmm_ns.current = static_cast<std::int64_t>(counting_->critical_path_vmm_ns());
  s.critical_path_event_ns.current = static_cast<std::int64_t>(counting_->critical_path_event_ns());
  s.worker_vmm_ns.current = static_cast<std::int64_t>(counting_->worker_vmm_ns());
#define MEMLAKE_FIX_STAT(name, kind, help) fix_##kind(s.name);
  MEMLAKE_STAT_FIELDS(MEMLAKE_FIX_STAT)
#undef MEMLAKE_FIX_STAT
  return s;
}

void AllocatorImpl::reset_peak_stats() {
  std::lock_guard lock(mutex_);
#define MEMLAKE_RESET_PEAK(name, kind, help) stats_.name.peak = stats_.name.current;
  MEMLAKE_STAT_FIELDS(MEMLAKE_RESET_PEAK)
#undef MEMLAKE_RESET_PEAK
}

bool AllocatorImpl::owns(const void* ptr) const {
  std::lock_guard lock(mutex_);
  return live_.count(reinterpret_cast<DevicePtr>(ptr)) != 0;
}

std::size_t AllocatorImpl::allocation_size(const void* ptr) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(reinterpret_cast<DevicePtr>(ptr));
  if (it == live_.end()) misuse(bad_pointer(reinterpret_cast<DevicePtr>(ptr)));
  return it->second.requested;
}

void AllocatorImpl::add_observer(Observer* o) {
  std::lock_guard lock(mutex_);
  observers_.add(o);
}

void AllocatorImpl::remove_observer(Observer* o) {
  std::lock_guard lock(mutex_);
  observers_.remove(o);
}

Stream AllocatorImpl::create_stream() {
  StreamHandle s = nullptr;
  if (backend_->stream_create(&s) != Status::ok)
    throw backend_error("memlake: stream_create failed: " + backend_->last_error());
  return s;
}

void AllocatorImpl::destroy_stream(Stream stream) {
  {
    std::lock_guard lock(mutex_);
    order_.forget(stream);
  }
  if (backend_->stream_destroy(stream) != Status::ok)
    throw backend_error("memlake: stream_destroy failed: " + backend_->last_error());
}

std::string AllocatorImpl::check_invariants() const {
  std::lock_guard lock(mutex_);
  std::string err = lake_.check_invariants();
  if (stats_.reserved_bytes.current != static_cast<std::int64_t>(pool_.reserved_bytes()))
    err += "reserved bytes disagree with the stats; ";
  std::size_t live = 0;
  for (const auto& [ptr, b] : live_) live += b.size;
  if (static_cast<std::int64_t>(live) != stats_.live_bytes.current)
    err += "live bytes disagree with the stats; ";
  if (live != lake_.allocated_bytes())
    err += "live bytes disagree with the lake's allocated bytes; ";
  return err;
}

void AllocatorImpl::check_debug() const {
  // Called with the lock held: inline the checks that check_invariants() does.
  std::string err = lake_.check_invariants();
  if (!err.empty()) {
    std::fprintf(stderr, "memlake: invariant broken: %s\n", err.c_str());
    std::abort();
  }
}

std::vector<std::pair<DevicePtr, std::size_t>> AllocatorImpl::aliases(const void* ptr) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(reinterpret_cast<DevicePtr>(ptr));
  if (it == live_.end()) return {};
  return lake_.aliases(it->first, it->second.size);
}

// ---- memlake::Allocator --------------------------------------------------

Allocator::Allocator(const Config& config)
    : impl_(std::make_unique<AllocatorImpl>(config, make_backend(validated(config)))) {}
Allocator::Allocator(const Config& config, std::unique_ptr<Backend> backend)
    : impl_(std::make_unique<AllocatorImpl>(config, std::move(backend))) {}
Allocator::~Allocator() = default;

void* Allocator::allocate(std::size_t bytes, Stream stream) {
  return impl_->allocate(bytes, stream);
}
void Allocator::deallocate(void* ptr, std::size_t bytes, Stream stream) {
  impl_->deallocate(ptr, bytes, stream);
}
void Allocator::record_stream(void* ptr, Stream stream) {
  impl_->record_stream(ptr, stream);
}
void Allocator::empty_cache() {
  impl_->empty_cache();
}
void Allocator::process_pending_frees() {
  impl_->process_pending_frees();
}
Stats Allocator::stats() const {
  return impl_->stats();
}
void Allocator::reset_peak_stats() {
  impl_->reset_peak_stats();
}
const Config& Allocator::config() const {
  return impl_->config();
}
// The backend the caller chose or got, not the counting adaptor around it.
const char* Allocator::backend_name() const {
  return impl_->counting().upstream().name();
}
int Allocator::device() const {
  return impl_->backend().device();
}
std::size_t Allocator::capacity() const {
  return impl_->lake().capacity();
}
std::size_t Allocator::granularity() const {
  return impl_->backend().granularity();
}
std::size_t Allocator::allocation_size(const void* ptr) const {
  return impl_->allocation_size(ptr);
}
bool Allocator::owns(const void* ptr) const {
  return impl_->owns(ptr);
}
void Allocator::add_observer(Observer* observer) {
  impl_->add_observer(observer);
}
void Allocator::remove_observer(Observer* observer) {
  impl_->remove_observer(observer);
}
Stream Allocator::create_stream() {
  return impl_->create_stream();
}
void Allocator::destroy_stream(Stream stream) {
  impl_->destroy_stream(stream);
}
std::string Allocator::check_invariants() const {
  return impl_->check_invariants();
}
Backend& Allocator::backend() {
  return impl_->backend();
}

}  // namespace memlake
