// The allocator's front end: building the layers, the climb of the ladder,
// what the caller holds, frees and record_stream.
#include "allocator/allocator_impl.hpp"

#include <algorithm>

#include "common/stat_update.hpp"
#include "common/timing.hpp"
#include "profiling/profiling.hpp"

namespace memlake {

namespace {

// The stack every layer calls through: turn taking (outermost, so time a
// background call waits for its turn is not counted as driver time), then
// counting.
std::unique_ptr<Backend> wrap(std::unique_ptr<Backend> backend, CountingBackend** counting,
                              DriverTurns** turns) {
  if (!backend) throw error("memlake: no backend given");
  auto counted = std::make_unique<CountingBackend>(std::move(backend));
  *counting = counted.get();
  auto taking = std::make_unique<TurnTakingBackend>(std::move(counted));
  *turns = &taking->turns();
  return taking;
}

const Config& validated(const Config& c) {
  c.validate();
  return c;
}

// The one place capacity is decided: the backend's (make_backend applied
// capacity or capacity_fraction to it), or less where the caller gave its
// own backend and a smaller capacity in the config. At least one chunk.
std::size_t capacity_of(const Config& c, const CountingBackend& b) {
  const std::size_t capacity = c.capacity != 0 ? std::min(c.capacity, b.capacity()) : b.capacity();
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

}  // namespace

AllocatorImpl::AllocatorImpl(const Config& config, std::unique_ptr<Backend> backend)
    : config_(validated(config)),
      host_oom_(
          "memlake: the host's heap ran out inside the allocator (std::bad_alloc); the "
          "request was not served",
          0),
      backend_(wrap(std::move(backend), &counting_, &turns_)),
      profilers_(Profilers::install(config_, capacity_of(config_, *counting_), observers_)),
      pool_(*backend_, capacity_of(config_, *counting_), stats_, observers_, refusal_),
      lake_(*backend_, pool_, lake_options(config_, *backend_), stats_, observers_, refusal_),
      order_(*backend_, stats_, observers_),
      graphs_(*backend_, pool_, lake_, order_, stats_, observers_, lake_options(config_, *backend_),
              config_.on_misuse),
      worker_(mutex_, lake_, stats_, observers_, config_.worker) {}

AllocatorImpl::~AllocatorImpl() {
  worker_.stop();
  std::lock_guard lock(mutex_);
  // Blocks the caller still holds go with the lake; the pool releases every
  // chunk after it.
}

void* AllocatorImpl::allocate(std::size_t bytes, Stream stream) {
  try {
    return allocate_locked(bytes, stream);
  } catch (const std::bad_alloc&) {
    throw host_oom_;
  }
}

void* AllocatorImpl::allocate_locked(std::size_t bytes, Stream stream) {
  auto lock = lock_counting_waits(mutex_, stats_.lock_waits, stats_.lock_wait_ns);
  CriticalPathScope critical;
  ScopedTicks timed(stats_.allocate_ns);
  StreamOrder::CallScope call(order_);
  if (MEMLAKE_UNLIKELY(graphs_.routing()))
    if (void* p = graphs_.allocate(bytes, stream)) return p;
  const std::uint64_t history = history_.push(bytes);
  if (bytes > lake_.capacity()) out_of_memory(bytes, stream);
  if (!order_.admit(stream)) unknown_stream("allocate", stream, nullptr);
  const lake::Placed p =
      climb({lake::round_up(std::max<std::size_t>(bytes, 1), lake::kAlignment), history}, stream);
  if (!p) out_of_memory(bytes, stream);
  // Memory freed under a fence another stream recorded: the caller's stream
  // waits for that stream's work first.
  if (MEMLAKE_UNLIKELY(p.fence > lake_.fences_done()) && p.fence > look_at_fences()) {
    try {
      order_.wait_for(stream, p.fence);
    } catch (...) {
      lake_.free(p.ptr);
      throw;
    }
  }
  return hand_out(p, bytes, stream, timed);
}

FenceId AllocatorImpl::look_at_fences() {
  allocations_since_fence_look_ = 0;
  lake_.fences_completed(order_.completed());
  return lake_.fences_done();
}

lake::Placed AllocatorImpl::climb(const lake::Request& request, Stream stream) {
  refusal_.clear();
  if (MEMLAKE_UNLIKELY(++allocations_since_fence_look_ >= kAllocationsPerFenceLook))
    look_at_fences();
  lake::Placed p = lake_.place(request, lake::Budget::reuse);
  // Past the rungs that reuse what is mapped, the work is driver calls:
  // observers see it as slow work until the climb ends.
  SlowWorkScope slow(observers_, SlowWork::allocation);
  // The driver is this thread's first until the climb ends: a background
  // worker makes no VMM call meanwhile (without one, nobody waits).
  DriverTurns::ForegroundTurn turn(p ? nullptr : turns_);
  if (!p) {
    slow.begin(request.size, stream);
    look_at_fences();
    p = lake_.place(request, lake::Budget::map, /*from=*/lake::Budget::map);
  }
  // A synchronization point: frees came back, or a request took the reserve.
  // A job unmaps only what was freed under completed fences.
  if (worker_.has_work()) {
    look_at_fences();
    worker_.nudge();
  }
  if (p) return p;
  p = lake_.place(request, lake::Budget::create, /*from=*/lake::Budget::create);
  if (p) return p;
  // Reclaim: unmap cached ranges and release unused chunks, then climb again.
  order_.record_open_fences();
  lake_.fences_completed(order_.completed());
  lake_.reclaim();
  p = lake_.place(request, lake::Budget::create);
  if (p) p.rung = Rung::reclaim_retry;
  return p;
}

void* AllocatorImpl::hand_out(const lake::Placed& placed, std::size_t requested, Stream stream,
                              const ScopedTicks& timed) {
  *lake_.caller_note(placed.ptr) = {requested, stream};
  count_block(stats_, 1, placed.size, requested);
  ++rung_stat(stats_, placed.rung).current;
  void* p = reinterpret_cast<void*>(placed.ptr);
  if (MEMLAKE_UNLIKELY(!observers_.empty())) {
    const std::int64_t ns = timed.elapsed_ns();  // no clock read without observers
    observers_.each([&](Observer& o) {
      o.on_alloc({p, requested, placed.size, stream, placed.rung, ns});
    });
  }
  if constexpr (MEMLAKE_DEBUG >= 3) check_debug();
  return p;
}

void AllocatorImpl::deallocate(void* ptr, std::size_t bytes, const Stream* on) {
  if (ptr == nullptr) return;
  auto lock = lock_counting_waits(mutex_, stats_.lock_waits, stats_.lock_wait_ns);
  CriticalPathScope critical;
  ScopedTicks timed(stats_.deallocate_ns);
  if (MEMLAKE_UNLIKELY(!free_locked(ptr, bytes, on)))
    misuse(bad_pointer(reinterpret_cast<DevicePtr>(ptr)));
}

bool AllocatorImpl::deallocate_if_live(void* ptr) {
  if (ptr == nullptr) return true;
  auto lock = lock_counting_waits(mutex_, stats_.lock_waits, stats_.lock_wait_ns);
  CriticalPathScope critical;
  ScopedTicks timed(stats_.deallocate_ns);
  return free_locked(ptr, 0, nullptr);
}

bool AllocatorImpl::free_locked(void* ptr, std::size_t bytes, const Stream* on) {
  const auto key = reinterpret_cast<DevicePtr>(ptr);
  const lake::Allocation* block = lake_.find(key);
  if (MEMLAKE_UNLIKELY(block == nullptr)) return graphs_.deallocate(key, bytes, on);
  const lake::CallerNote note = block->caller;
  const Stream stream = on != nullptr ? *on : note.stream;
  if (MEMLAKE_UNLIKELY(bytes != 0 && bytes != note.requested)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "size mismatch freeing %p: %zu bytes given, the block has %zu",
                  ptr, bytes, note.requested);
    misuse(buf);
  }
  if (MEMLAKE_UNLIKELY(!order_.admit(stream))) unknown_stream("free", stream, ptr);
  count_block(stats_, -1, block->size, note.requested);
  const StreamOrder::FreeTag tag =
      MEMLAKE_LIKELY(note.stream == stream && other_streams_.empty())
          ? order_.free_on(stream, {})
          : order_.free_on(stream, streams_to_wait_for(key, note.stream, stream));
  lake_.free(key, tag.fence, tag.others_wait);
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) { o.on_free({ptr, note.requested, stream}); });
  if constexpr (MEMLAKE_DEBUG >= 3) check_debug();
  return true;
}

std::vector<Stream> AllocatorImpl::streams_to_wait_for(DevicePtr key, Stream own, Stream freed_on) {
  std::vector<Stream> streams;
  if (auto it = other_streams_.find(key); it != other_streams_.end()) {
    streams = std::move(it->second);
    other_streams_.erase(it);
  }
  // A block freed on another stream than its own was used on both.
  if (own != freed_on && std::find(streams.begin(), streams.end(), own) == streams.end())
    streams.push_back(own);
  std::erase(streams, freed_on);
  // A recorded stream destroyed since has finished its work (destroying a
  // stream drains it): nothing to wait for there.
  std::erase_if(streams, [&](Stream s) { return !order_.admit(s); });
  return streams;
}

void AllocatorImpl::record_stream(void* ptr, Stream stream) {
  std::lock_guard lock(mutex_);
  const auto key = reinterpret_cast<DevicePtr>(ptr);
  const lake::Allocation* block = lake_.find(key);
  if (block == nullptr) {
    if (graphs_.record_stream(key, stream)) return;
    misuse("record_stream: " + bad_pointer(key));
  }
  if (!order_.admit(stream)) misuse("record_stream: unknown stream");
  if (stream == block->caller.stream) return;
  std::vector<Stream>& others = other_streams_[key];
  if (std::find(others.begin(), others.end(), stream) == others.end()) others.push_back(stream);
}

void AllocatorImpl::process_pending_frees() {
  std::lock_guard lock(mutex_);
  order_.record_open_fences();
}

void AllocatorImpl::empty_cache() {
  std::unique_lock lock(mutex_);
  worker_.settle(lock);  // the chunks its job creates must be released too
  order_.record_open_fences();
  lake_.fences_completed(order_.completed());
  lake_.reclaim();
  graphs_.release_pending();
}

std::optional<BlockInfo> AllocatorImpl::block_info(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto key = reinterpret_cast<DevicePtr>(ptr);
  if (const lake::Allocation* block = lake_.find(key))
    return BlockInfo{const_cast<void*>(ptr), block->caller.requested, block->caller.stream};
  return graphs_.block_info(key);
}

std::vector<BlockInfo> AllocatorImpl::live_blocks() const {
  std::lock_guard lock(mutex_);
  std::vector<BlockInfo> out = graphs_.all_live_blocks();
  out.reserve(out.size() + lake_.allocation_count());
  lake_.each_allocation([&](DevicePtr ptr, const lake::Allocation& a) {
    out.push_back(BlockInfo{reinterpret_cast<void*>(ptr), a.caller.requested, a.caller.stream});
  });
  std::sort(out.begin(), out.end(),
            [](const BlockInfo& x, const BlockInfo& y) { return x.ptr < y.ptr; });
  return out;
}

bool AllocatorImpl::owns(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto key = reinterpret_cast<DevicePtr>(ptr);
  return lake_.find(key) != nullptr || graphs_.block_info(key).has_value();
}

std::size_t AllocatorImpl::allocation_size(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto key = reinterpret_cast<DevicePtr>(ptr);
  if (const lake::Allocation* block = lake_.find(key)) return block->caller.requested;
  if (auto pooled = graphs_.block_info(key)) return pooled->size;
  misuse(bad_pointer(key), /*counts=*/false);
}

std::vector<std::pair<DevicePtr, std::size_t>> AllocatorImpl::aliases(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto key = reinterpret_cast<DevicePtr>(ptr);
  const lake::Allocation* block = lake_.find(key);
  if (block == nullptr) return {};
  return lake_.aliases(key, block->size);
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

}  // namespace memlake
