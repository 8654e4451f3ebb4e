// memlake as PyTorch's CUDA allocator: CUDAPluggableAllocator with the calls
// it refuses implemented over memlake's. CUDA graph trees
// (torch.compile(mode="reduce-overhead")) need getCheckpointState,
// setCheckpointPoolState and checkPoolLiveAllocations: memlake's pool
// checkpoints (memlake_pool_blocks, memlake_restore_pool). Programs read
// torch.cuda.memory_allocated(), max_memory_reserved() and the like through
// getDeviceStats, resetPeakStats and resetAccumulatedStats, and cuDNN's
// benchmark mode bounds its workspace by cacheInfo: memlake's statistics
// (memlake_get_stat_values) and memlake_largest_available. Memory profiling
// (torch.cuda.memory._record_memory_history, _snapshot, _dump_snapshot for
// pytorch.org/memory_viz) needs recordHistory and snapshot: this file keeps
// the history of the blocks PyTorch allocates and frees through it, with the
// stacks PyTorch's recorder gathers. Where the installed torch's history
// interface differs from the one written here, memlake/_torch_build.py
// builds the file again with MEMLAKE_TORCH_NO_HISTORY, and those calls stay
// refused as under the plain pluggable allocator.
//
// Tensors' memory (allocate, raw_alloc, and the deleter of what they hand
// out) goes to memlake and back with no record kept here: memlake knows
// each block's size, device and stream by its address, so a free needs the
// pointer alone. The pluggable allocator keeps a map of its own under a
// mutex, and reaches memlake through std::function hooks, on every call.
//
// memlake/_torch_build.py compiles this file against the installed torch on
// first use. It is built against torch's headers and libraries alone: every
// memlake function arrives as an address in MemlakeFunctions, taken from the
// libmemlake.so Python loaded, so the library is not linked and the build
// needs nothing of memlake's.

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <c10/core/Device.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using PluggableAllocator = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
// c10::CachingDeviceAllocator::DeviceStats in this torch (its namespace has
// moved between versions).
using DeviceStats =
    decltype(std::declval<PluggableAllocator&>().getDeviceStats(c10::DeviceIndex{0}));

}  // namespace

// memlake.h's memlake_pool_id and memlake_pool_block, field for field.
struct PoolId {
  uint64_t first;
  uint64_t second;
};

struct PoolBlock {
  void* ptr;
  size_t size;  // as requested
  void* stream;
};

// memlake.h's memlake_stat_value.
struct StatValue {
  int64_t current;
  int64_t peak;
};

// The functions of libmemlake.so the allocator calls, each field named as
// the function without its "memlake_" prefix, in this order: Python fills it
// (memlake/_torch_build.py, FUNCTIONS) with one address per field. The
// graph-pool hooks are C-linkage functions with C++ parameter types
// (memlake/torch_hooks.h): exactly the types PyTorch calls them with.
struct MemlakeFunctions {
  void* (*torch_malloc)(size_t size, int device, void* stream);
  void (*torch_free)(void* ptr, size_t size, int device, void* stream);
  void (*torch_record_stream)(void* ptr, void* stream);
  void (*torch_empty_cache)();
  void (*torch_set_memory_fraction)(double fraction, int device);
  void (*torch_begin_allocate_to_pool)(int device, c10::cuda::MempoolId_t pool,
                                       std::function<bool(cudaStream_t)> filter);
  void (*torch_end_allocate_to_pool)(int device, c10::cuda::MempoolId_t pool);
  void (*torch_release_pool)(int device, c10::cuda::MempoolId_t pool);
  int (*pool_blocks)(int device, PoolId pool, PoolBlock* out, size_t capacity, size_t* count);
  int (*restore_pool)(int device, PoolId pool, const PoolBlock* blocks, size_t n, void** freed,
                      size_t capacity, size_t* freed_count);
  const char* (*last_error)();
  int (*stat_count)();
  const char* (*stat_name)(int index);
  int (*get_stat_values)(int device, StatValue* out, int count);
  void (*reset_peak_stats)(int device);
  int (*largest_available)(int device, size_t* out);
  void (*torch_free_block)(void* ptr);
  int (*block_info)(const void* ptr, PoolBlock* out, int* device);
  int (*live_blocks)(int device, PoolBlock* out, size_t capacity, size_t* count);
};

namespace {

// The statistics PyTorch's DeviceStats is made from, by their names in
// memlake's list (memlake_stat_name).
enum MemlakeStat : int {
  kLiveBytes,
  kRequestedBytes,
  kLiveBlocks,
  kReservedBytes,
  kSegments,
  kAllocs,
  kFrees,
  kOoms,
  kReclaimRetries,
  kChunksCreated,
  kChunksReleased,
  kHostWaits,
  kStatCount
};
constexpr const char* kStatNames[kStatCount] = {
    "live_bytes",         "requested_bytes", "live_blocks",     "reserved_bytes",
    "segments",           "allocs",          "frees",           "ooms",
    "rung_reclaim_retry", "chunks_created",  "chunks_released", "host_waits"};

// The counters resetAccumulatedStats starts again from zero.
constexpr MemlakeStat kAccumulated[] = {kAllocs,        kFrees,          kOoms,     kReclaimRetries,
                                        kChunksCreated, kChunksReleased, kHostWaits};

// PyTorch's statistics are arrays by pool kind; memlake has no small and
// large pools, so it fills the aggregate (StatType::AGGREGATE, 0) only.
constexpr size_t kAggregate = 0;

PoolId pool_id_of(const c10::cuda::MempoolId_t& id) {
  return PoolId{static_cast<uint64_t>(id.first), static_cast<uint64_t>(id.second)};
}

// A pool as getCheckpointState saw it: its live blocks, which
// setCheckpointPoolState puts back.
struct PoolCheckpoint : cca::AllocatorState {
  PoolCheckpoint(c10::DeviceIndex device, c10::cuda::MempoolId_t pool,
                 std::vector<PoolBlock> blocks)
      : device(device), pool(pool), blocks(std::move(blocks)) {}
  c10::DeviceIndex device;
  c10::cuda::MempoolId_t pool;
  std::vector<PoolBlock> blocks;
};

#ifndef MEMLAKE_TORCH_NO_HISTORY
// ---- PyTorch's memory history ------------------------------------------------

using TraceEntry = cca::TraceEntry;

// What recordHistory was last told.
struct HistorySettings {
  bool enabled = false;
  cca::CreateContextFn recorder = nullptr;
  size_t max_entries = 0;
  cca::RecordContext when = cca::RecordContext::NEVER;
  bool clear = false;
  std::vector<std::string> skip_actions;
};

// The allocations and frees PyTorch made through this allocator while
// recording, as PyTorch's caching allocator keeps them: the last
// `max_entries` trace entries of each device (an allocation, then its free
// requested and completed: memlake takes a block back at once, in stream
// order; a request memlake refused) and the stack of each live block allocated while recording.
// Stacks come from PyTorch's recorder: at allocation from RecordContext::STATE on (kept for the
// live block), in the allocation's entry from ALLOC on, in the free's entries with ALL.
class History {
 public:
  void configure(HistorySettings s) {
    TORCH_CHECK(s.when == cca::RecordContext::NEVER || s.recorder != nullptr,
                "memlake: recordHistory asks for stacks without a context recorder");
    std::vector<TraceEntry::Action> skipped;
    for (const std::string& name : s.skip_actions) skipped.push_back(action_named(name));
    const std::lock_guard<std::mutex> lock(mutex_);
    recorder_ = s.enabled ? s.recorder : nullptr;
    when_ = s.enabled ? s.when : cca::RecordContext::NEVER;
    max_entries_ = s.max_entries;
    skipped_ = std::move(skipped);
    for (auto& trace : traces_) {
      if (!s.enabled || s.clear) trace.clear();
      while (trace.size() > max_entries_) trace.pop_front();
    }
    if (!s.enabled) contexts_.clear();
    enabled_.store(s.enabled, std::memory_order_release);
  }

  bool enabled() const { return enabled_.load(std::memory_order_acquire); }

  void allocated(void* ptr, size_t size, c10::DeviceIndex device, cudaStream_t stream) {
    const auto [context, when] = stack_from(cca::RecordContext::STATE);
    const std::lock_guard<std::mutex> lock(mutex_);
    if (context) contexts_[ptr] = context;
    add(TraceEntry::ALLOC, device, ptr, size, stream,
        when >= cca::RecordContext::ALLOC ? context : nullptr);
  }

  void freed(void* ptr, size_t size, c10::DeviceIndex device, cudaStream_t stream) {
    const auto context = stack_from(cca::RecordContext::ALL).first;
    const std::lock_guard<std::mutex> lock(mutex_);
    contexts_.erase(ptr);
    add(TraceEntry::FREE_REQUESTED, device, ptr, size, stream, context);
    add(TraceEntry::FREE_COMPLETED, device, ptr, size, stream, context);
  }

  void refused(size_t size, size_t available, c10::DeviceIndex device, cudaStream_t stream) {
    const auto context = stack_from(cca::RecordContext::ALLOC).first;
    const std::lock_guard<std::mutex> lock(mutex_);
    add(TraceEntry::OOM, device, reinterpret_cast<void*>(available), size, stream, context);
  }

  // The stack of a live block allocated while recording, or null.
  std::shared_ptr<c10::GatheredContext> context_of(void* ptr) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = contexts_.find(ptr);
    return it == contexts_.end() ? nullptr : it->second;
  }

  // One list of entries per device, up to the highest device recorded, as
  // SnapshotInfo::device_traces holds them.
  std::vector<std::vector<TraceEntry>> traces() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::vector<TraceEntry>> out;
    for (const auto& trace : traces_) out.emplace_back(trace.begin(), trace.end());
    return out;
  }

 private:
  // The recorder's stack if recording asks for stacks from `level` on (else
  // null), and the level it asks for. The recorder takes Python's lock to
  // gather its stack: it runs outside ours.
  std::pair<std::shared_ptr<c10::GatheredContext>, cca::RecordContext> stack_from(
      cca::RecordContext level) const {
    cca::CreateContextFn recorder = nullptr;
    cca::RecordContext when = cca::RecordContext::NEVER;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      recorder = recorder_;
      when = when_;
    }
    if (when < level || recorder == nullptr) return {nullptr, when};
    return {recorder(), when};
  }

  static TraceEntry::Action action_named(const std::string& name) {
    static const std::pair<const char*, TraceEntry::Action> kActions[] = {
        {"alloc", TraceEntry::ALLOC},
        {"free_requested", TraceEntry::FREE_REQUESTED},
        {"free_completed", TraceEntry::FREE_COMPLETED},
        {"segment_alloc", TraceEntry::SEGMENT_ALLOC},
        {"segment_free", TraceEntry::SEGMENT_FREE},
        {"snapshot", TraceEntry::SNAPSHOT},
        {"oom", TraceEntry::OOM}};
    for (const auto& [n, action] : kActions) {
      if (name == n) return action;
    }
    TORCH_CHECK(false, "memlake: recordHistory was asked to skip \"", name,
                "\", which is not a trace action");
  }

  // Under mutex_.
  void add(TraceEntry::Action action, c10::DeviceIndex device, void* ptr, size_t size,
           cudaStream_t stream, std::shared_ptr<c10::GatheredContext> context) {
    if (max_entries_ == 0 || device < 0) return;
    if (std::find(skipped_.begin(), skipped_.end(), action) != skipped_.end()) return;
    if (traces_.size() <= static_cast<size_t>(device)) traces_.resize(device + 1);
    auto& trace = traces_[device];
    if (trace.size() == max_entries_) trace.pop_front();
    // The entry's time is a union: PyTorch's snapshot reads it as
    // microseconds since the epoch, set below, not as the approximate clock.
    trace.emplace_back(action, device, reinterpret_cast<size_t>(ptr), size, stream,
                       c10::cuda::MempoolId_t{0, 0}, c10::approx_time_t{}, std::move(context));
    trace.back().time_.t_ = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  }

  std::atomic<bool> enabled_{false};
  mutable std::mutex mutex_;
  cca::CreateContextFn recorder_ = nullptr;  // under mutex_, as what follows
  cca::RecordContext when_ = cca::RecordContext::NEVER;
  size_t max_entries_ = 0;
  std::vector<TraceEntry::Action> skipped_;
  std::vector<std::deque<TraceEntry>> traces_;  // by device
  std::unordered_map<void*, std::shared_ptr<c10::GatheredContext>> contexts_;
};

// recordHistory, snapshot and isHistoryEnabled have changed their
// parameters between torch versions: each is overridden with the
// parameters the installed torch's own declaration has (deduced from its
// member pointer), and hands what this file uses to the allocator.
template <class Base, class Signature>
class RecordHistoryHook;
template <class Base, class Result, class Class, class... Args>
class RecordHistoryHook<Base, Result (Class::*)(Args...)> : public Base {
 public:
  using Base::Base;
  // (enabled, context recorder, most entries, when to record stacks[, clear
  // the history[, actions to skip]])
  Result recordHistory(Args... args) override {
    const std::tuple<Args...> given(args...);
    HistorySettings s;
    s.enabled = std::get<0>(given);
    s.recorder = std::get<1>(given);
    s.max_entries = std::get<2>(given);
    s.when = std::get<3>(given);
    if constexpr (sizeof...(Args) > 4) s.clear = std::get<4>(given);
    if constexpr (sizeof...(Args) > 5) {
      for (const auto& name : std::get<5>(given)) s.skip_actions.emplace_back(name);
    }
    configure_history(std::move(s));
  }

 protected:
  virtual void configure_history(HistorySettings s) = 0;
};

template <class Base, class Signature>
class SnapshotHook;
template <class Base, class Result, class Class, class... Args>
class SnapshotHook<Base, Result (Class::*)(Args...)> : public Base {
 public:
  using Base::Base;
  // ([pool[, with traces]])
  Result snapshot(Args... args) override {
    const std::tuple<Args...> given(args...);
    c10::cuda::MempoolId_t pool{0, 0};
    bool traces = true;
    if constexpr (sizeof...(Args) > 0) pool = std::get<0>(given);
    if constexpr (sizeof...(Args) > 1) traces = std::get<1>(given);
    Result out{};
    fill_snapshot(pool, traces, &out.segments, &out.device_traces);
    return out;
  }

 protected:
  virtual void fill_snapshot(c10::cuda::MempoolId_t pool, bool traces,
                             std::vector<cca::SegmentInfo>* segments,
                             std::vector<std::vector<TraceEntry>>* device_traces) = 0;
};

// isHistoryEnabled, where the installed torch declares it.
template <class Base, class = void>
class HistoryEnabledHook : public Base {
 public:
  using Base::Base;

 protected:
  virtual bool history_enabled() const = 0;
};
template <class Base>
class HistoryEnabledHook<Base, std::void_t<decltype(&Base::isHistoryEnabled)>> : public Base {
 public:
  using Base::Base;
  bool isHistoryEnabled() override { return history_enabled(); }

 protected:
  virtual bool history_enabled() const = 0;
};

using AllocatorBase = HistoryEnabledHook<SnapshotHook<
    RecordHistoryHook<PluggableAllocator, decltype(&PluggableAllocator::recordHistory)>,
    decltype(&PluggableAllocator::snapshot)>>;
#else
using AllocatorBase = PluggableAllocator;
#endif  // MEMLAKE_TORCH_NO_HISTORY

class MemlakeAllocator : public AllocatorBase {
 public:
  explicit MemlakeAllocator(const MemlakeFunctions& f)
      : AllocatorBase(
            // The base's hooks, for its malloc: this allocator's calls go
            // around it.
            [this](size_t size, int device, cudaStream_t stream) {
              return malloc_block(size, device, stream);
            },
            [this](void* ptr, size_t, int, cudaStream_t) { free_block(ptr); }),
        f_(f),
        stat_count_(f.stat_count()) {
    for (int s = 0; s < kStatCount; ++s) {
      stat_index_[s] = -1;
      for (int i = 0; i < stat_count_; ++i) {
        const char* name = f.stat_name(i);
        if (name != nullptr && std::strcmp(name, kStatNames[s]) == 0) stat_index_[s] = i;
      }
      TORCH_CHECK(stat_index_[s] >= 0, "memlake: the loaded libmemlake.so has no statistic \"",
                  kStatNames[s], "\" (a build older than this allocator)");
    }
  }

  // A tensor's memory: memlake's block on the current device and stream.
  // Size 0 is no block, as under PyTorch's caching allocator.
  c10::DataPtr allocate(size_t size) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    void* ptr = malloc_block(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
    return c10::DataPtr(ptr, ptr, &free_installed, c10::Device(c10::DeviceType::CUDA, device));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_installed; }

  void* raw_alloc(size_t size) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    return malloc_block(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
  }

  void* raw_alloc_with_stream(size_t size, cudaStream_t stream) override {
    return malloc_block(size, c10::cuda::current_device(), stream);
  }

  // Every block this allocator handed out, a checkpoint's included.
  void raw_delete(void* ptr) override { free_block(ptr); }

  // The allocator whose blocks free_installed frees: the one installed last
  // (each stays alive for the process, as PyTorch keeps its allocator).
  static void set_installed(MemlakeAllocator* allocator) {
    installed_.store(allocator, std::memory_order_release);
  }

  // torch.cuda.memory_stats() and what reads it (memory_allocated,
  // max_memory_reserved, memory_summary, ...): memlake's statistics under
  // PyTorch's names. Allocated and active bytes are both memlake's live
  // bytes (a freed block goes back at once: none is freed-but-active);
  // counters count from the last resetAccumulatedStats. What memlake does
  // not keep stays 0: the small/large pool split, inactive split blocks,
  // oversize blocks and the cumulative byte totals.
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const std::vector<StatValue> v = values(device);
    const StatValue& live = v[stat_index_[kLiveBlocks]];
    DeviceStats out;
    gauge(out.allocation, live);
    gauge(out.active, live);
    gauge(out.segment, v[stat_index_[kSegments]]);
    gauge(out.allocated_bytes, v[stat_index_[kLiveBytes]]);
    gauge(out.active_bytes, v[stat_index_[kLiveBytes]]);
    gauge(out.reserved_bytes, v[stat_index_[kReservedBytes]]);
    gauge(out.requested_bytes, v[stat_index_[kRequestedBytes]]);
    const std::lock_guard<std::mutex> lock(stats_mutex_);
    const Baseline& base = baselines_[device];
    auto counted = [&](MemlakeStat s) { return v[stat_index_[s]].current - base[s]; };
    for (auto* counts : {&out.allocation, &out.active}) {
      (*counts)[kAggregate].allocated = counted(kAllocs);
      (*counts)[kAggregate].freed = counted(kFrees);
    }
    out.num_alloc_retries = counted(kReclaimRetries);
    out.num_ooms = counted(kOoms);
    out.num_sync_all_streams = counted(kHostWaits);
    out.num_device_alloc = counted(kChunksCreated);
    out.num_device_free = counted(kChunksReleased);
    return out;
  }

  void resetPeakStats(c10::DeviceIndex device) override { f_.reset_peak_stats(device); }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    const std::vector<StatValue> v = values(device);
    const std::lock_guard<std::mutex> lock(stats_mutex_);
    Baseline& base = baselines_[device];
    for (MemlakeStat s : kAccumulated) base[s] = v[stat_index_[s]].current;
  }

  // The largest block memlake can hand out now (memlake_largest_available):
  // cuDNN's benchmark mode tries only algorithms whose workspace fits.
  void cacheInfo(c10::DeviceIndex device, size_t* largest_block) override {
    if (f_.largest_available(device, largest_block) != 0) fail("memlake_largest_available");
  }

  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::cuda::MempoolId_t id) override {
    return std::make_shared<PoolCheckpoint>(device, id, live_blocks(device, id));
  }

  // Puts the pool back as the checkpoint saw it (memlake_restore_pool), then
  // tells PyTorch what changed: the pointers freed, and a DataPtr with this
  // allocator's deleter for each block allocated again, which PyTorch hands
  // to the storages that live on (the others it releases, and graph trees
  // free their blocks later through raw_delete).
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> pps) override {
    auto checkpoint = std::dynamic_pointer_cast<PoolCheckpoint>(pps);
    TORCH_CHECK(checkpoint != nullptr,
                "memlake: setCheckpointPoolState was given a state memlake's allocator did not "
                "make (getCheckpointState of another allocator)");
    TORCH_CHECK(checkpoint->device == device, "memlake: setCheckpointPoolState for device ",
                static_cast<int>(device), " was given a checkpoint of device ",
                static_cast<int>(checkpoint->device));
    // The blocks the restore frees, as the history records them.
    const std::vector<PoolBlock> before =
        recording() ? live_blocks(device, checkpoint->pool) : std::vector<PoolBlock>{};
    const PoolId pool = pool_id_of(checkpoint->pool);
    size_t live = 0;
    if (f_.pool_blocks(device, pool, nullptr, 0, &live) != 0) fail("memlake_pool_blocks");
    std::vector<void*> gone(live);
    size_t gone_count = 0;
    if (f_.restore_pool(device, pool, checkpoint->blocks.data(), checkpoint->blocks.size(),
                        gone.data(), gone.size(), &gone_count) != 0) {
      fail("memlake_restore_pool");
    }
    gone.resize(gone_count);
    cca::CheckpointDelta delta;
    delta.ptrs_freed = gone;
    for (const PoolBlock& b : checkpoint->blocks) {
      delta.dataptrs_allocd.emplace_back(b.ptr, b.ptr, &free_installed,
                                         c10::Device(c10::DeviceType::CUDA, device));
    }
    // The restore's frees came first, then its allocations.
    for (const PoolBlock& b : before) {
      if (std::find(gone.begin(), gone.end(), b.ptr) != gone.end())
        freed(b.ptr, b.size, device, static_cast<cudaStream_t>(b.stream));
    }
    for (const PoolBlock& b : checkpoint->blocks) {
      allocated(b.ptr, b.size, device, static_cast<cudaStream_t>(b.stream));
    }
    return delta;
  }

  // Whether the pool's live blocks are exactly `expected`.
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::cuda::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected) override {
    const std::vector<PoolBlock> blocks = live_blocks(device, mempool_id);
    if (blocks.size() != expected.size()) return false;
    for (const PoolBlock& b : blocks) {
      if (expected.count(b.ptr) == 0) return false;
    }
    return true;
  }

 private:
#ifndef MEMLAKE_TORCH_NO_HISTORY
  void configure_history(HistorySettings s) override {
    history_.configure(std::move(s));
  }
  bool history_enabled() const override {
    return history_.enabled();
  }

  // PyTorch's snapshot of memlake's memory: each live block (of `pool`
  // where one is named) as a segment of its own holding that one block,
  // since memlake's ranges share physical memory and have no counterpart
  // among PyTorch's segments (torch.cuda.memory_reserved() gives the
  // memory memlake holds), and the trace of each device while recording.
  void fill_snapshot(c10::cuda::MempoolId_t pool, bool with_traces,
                     std::vector<cca::SegmentInfo>* segments,
                     std::vector<std::vector<TraceEntry>>* device_traces) override {
    const bool of_pool = pool != c10::cuda::MempoolId_t{0, 0};
    std::vector<std::pair<c10::DeviceIndex, PoolBlock>> blocks;
    for (c10::DeviceIndex device = 0; device < c10::cuda::device_count(); ++device) {
      for (const PoolBlock& b : all_live_blocks(device)) blocks.push_back({device, b});
    }
    if (of_pool) {
      // memlake knows which blocks are the pool's, on the devices in use.
      std::vector<c10::DeviceIndex> devices;
      for (const auto& entry : blocks) devices.push_back(entry.first);
      std::sort(devices.begin(), devices.end());
      devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
      blocks.clear();
      for (c10::DeviceIndex device : devices) {
        for (const PoolBlock& b : live_blocks(device, pool)) blocks.push_back({device, b});
      }
    }
    for (const auto& [device, b] : blocks) {
      const size_t rounded = (b.size + kRounding - 1) / kRounding * kRounding;
      cca::BlockInfo block;
      block.size = rounded;
      block.requested_size = b.size;
      block.allocated = true;
      block.active = true;
      block.context_when_allocated = history_.context_of(b.ptr);
      cca::SegmentInfo segment;
      segment.device = device;
      segment.address = reinterpret_cast<size_t>(b.ptr);
      segment.total_size = rounded;
      segment.requested_size = b.size;
      segment.allocated_size = rounded;
      segment.active_size = rounded;
      segment.stream = static_cast<cudaStream_t>(b.stream);
      segment.is_large = b.size > kSmallSize;
      if (of_pool) segment.owner_private_pool_id = pool;
      segment.context_when_allocated = block.context_when_allocated;
      segment.blocks.push_back(std::move(block));
      segments->push_back(std::move(segment));
    }
    std::sort(
        segments->begin(), segments->end(),
        [](const cca::SegmentInfo& a, const cca::SegmentInfo& b) { return a.address < b.address; });
    if (with_traces) *device_traces = history_.traces();
  }
#endif

#ifndef MEMLAKE_TORCH_NO_HISTORY
  // Records in the history while it is on. The history never fails an
  // allocation or a free: a free runs in a DataPtr's deleter, where an
  // exception ends the process, a block whose allocation failed after
  // memlake served it would be lost, and a refused request's own error is
  // the one to report. An entry that cannot be recorded (no memory for it,
  // a recorder that throws) is left out.
  template <class Record>
  void record(Record&& what) noexcept {
    if (!history_.enabled()) return;
    try {
      what();
    } catch (...) {
      // Left out of the history.
    }
  }

  void allocated(void* ptr, size_t size, int device, cudaStream_t stream) noexcept {
    if (ptr == nullptr) return;
    record([&] { history_.allocated(ptr, size, static_cast<c10::DeviceIndex>(device), stream); });
  }

  // A request memlake refused: an `oom` entry whose address field holds
  // what memlake could still serve (memlake_largest_available), as
  // PyTorch's holds the device's free bytes.
  void out_of_memory(size_t size, int device, cudaStream_t stream) noexcept {
    record([&] {
      size_t available = 0;
      if (f_.largest_available(device, &available) != 0) available = 0;
      history_.refused(size, available, static_cast<c10::DeviceIndex>(device), stream);
    });
  }

  void freed(void* ptr, size_t size, int device, cudaStream_t stream) noexcept {
    record([&] { history_.freed(ptr, size, static_cast<c10::DeviceIndex>(device), stream); });
  }

  // The free of memlake's block at `ptr`, its size and stream asked of
  // memlake (the free has the pointer alone).
  void freeing(void* ptr) noexcept {
    if (!history_.enabled()) return;
    PoolBlock b{};
    int device = -1;
    if (f_.block_info(ptr, &b, &device) == 0)
      freed(ptr, b.size, device, static_cast<cudaStream_t>(b.stream));
  }

  bool recording() const {
    return history_.enabled();
  }
#else
  void allocated(void*, size_t, int, cudaStream_t) noexcept {}
  void out_of_memory(size_t, int, cudaStream_t) noexcept {}
  void freed(void*, size_t, int, cudaStream_t) noexcept {}
  void freeing(void*) noexcept {}
  bool recording() const {
    return false;
  }
#endif

  // Size 0 is no block.
  void* malloc_block(size_t size, int device, cudaStream_t stream) {
    if (size == 0) return nullptr;
    void* ptr = nullptr;
    try {
      ptr = f_.torch_malloc(size, device, stream);
    } catch (...) {
      out_of_memory(size, device, stream);
      throw;
    }
    allocated(ptr, size, device, stream);
    return ptr;
  }

  // The history sees the free before memlake does: once memlake has the
  // block back, another thread may be handed the same address. Never
  // throws: PyTorch frees from destructors.
  void free_block(void* ptr) noexcept {
    if (ptr == nullptr) return;
    freeing(ptr);
    f_.torch_free_block(ptr);
  }

  // A DataPtr's deleter: its context is the block's address.
  static void free_installed(void* ptr) {
    installed_.load(std::memory_order_acquire)->free_block(ptr);
  }

  // The list `call` gives by list(out, capacity, &count) (memlake_pool_blocks'
  // form); asked again if it grew between the count and the list.
  template <class List>
  std::vector<PoolBlock> listed(const char* call, List list) const {
    std::vector<PoolBlock> blocks;
    size_t count = 0;
    if (list(nullptr, 0, &count) != 0) fail(call);
    for (;;) {
      blocks.resize(count);
      if (list(blocks.data(), blocks.size(), &count) != 0) fail(call);
      if (count <= blocks.size()) break;
    }
    blocks.resize(count);
    return blocks;
  }

  // The pool's live blocks.
  std::vector<PoolBlock> live_blocks(c10::DeviceIndex device, c10::cuda::MempoolId_t id) const {
    const PoolId pool = pool_id_of(id);
    return listed("memlake_pool_blocks", [&](PoolBlock* out, size_t capacity, size_t* count) {
      return f_.pool_blocks(device, pool, out, capacity, count);
    });
  }

  // Every live block of the device.
  std::vector<PoolBlock> all_live_blocks(c10::DeviceIndex device) const {
    return listed("memlake_live_blocks", [&](PoolBlock* out, size_t capacity, size_t* count) {
      return f_.live_blocks(device, out, capacity, count);
    });
  }

  std::vector<StatValue> values(c10::DeviceIndex device) const {
    std::vector<StatValue> v(static_cast<size_t>(stat_count_));
    if (f_.get_stat_values(device, v.data(), stat_count_) != stat_count_)
      fail("memlake_get_stat_values");
    return v;
  }

  static void gauge(decltype(DeviceStats::allocation)& stat, const StatValue& value) {
    stat[kAggregate].current = value.current;
    stat[kAggregate].peak = value.peak;
  }

  void fail(const char* call) const {
    const char* why = f_.last_error();
    TORCH_CHECK(false, "memlake: ", call, " failed: ", why != nullptr ? why : "(no message)");
  }

  // Each counter's value at the device's last resetAccumulatedStats.
  using Baseline = std::array<int64_t, kStatCount>;

  MemlakeFunctions f_;
  int stat_count_;
  int stat_index_[kStatCount];
  std::mutex stats_mutex_;
  std::unordered_map<c10::DeviceIndex, Baseline> baselines_;  // under stats_mutex_
#ifndef MEMLAKE_TORCH_NO_HISTORY
  // PyTorch's rounding of a block's size, and its largest small block.
  static constexpr size_t kRounding = 512;
  static constexpr size_t kSmallSize = size_t{1} << 20;
  History history_;
#endif
  static inline std::atomic<MemlakeAllocator*> installed_{nullptr};
};

void copy_message(const char* message, char* error, size_t error_len) {
  if (error == nullptr || error_len == 0) return;
  std::snprintf(error, error_len, "%s", message);
}

}  // namespace

extern "C" {

// Makes memlake PyTorch's CUDA allocator, as memlake.torch.enable() sets up
// CUDAPluggableAllocator, with the three calls graph trees need besides.
// 0, or -1 with the reason in `error` (PyTorch's "Can't swap an already
// initialized allocator" once its allocator has started).
__attribute__((visibility("default"))) int memlake_torch_install_graph_tree_allocator(
    const MemlakeFunctions* f, char* error, size_t error_len) {
  try {
    TORCH_CHECK(f != nullptr, "memlake: no functions given");
    // Once installed, never destroyed: DataPtrs free through it until the
    // process ends, some from other libraries' static destructors.
    auto owned = std::make_unique<MemlakeAllocator>(*f);
    std::shared_ptr<MemlakeAllocator> allocator(owned.get(), [](MemlakeAllocator*) {});
    // No init hook is set: init() only marks the allocator initialized, as
    // createCustomAllocator does for the pluggable one.
    allocator->init(0);
    allocator->set_record_stream_fn(
        [g = f->torch_record_stream](void* ptr, cudaStream_t stream) { g(ptr, stream); });
    allocator->set_reset_fn(f->torch_empty_cache);
    allocator->set_memory_fraction_fn(f->torch_set_memory_fraction);
    allocator->set_begin_allocate_to_pool(f->torch_begin_allocate_to_pool);
    allocator->set_end_allocate_to_pool_fn(f->torch_end_allocate_to_pool);
    allocator->set_release_pool(f->torch_release_pool);
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    MemlakeAllocator::set_installed(owned.release());
    return 0;
  } catch (const c10::Error& e) {
    copy_message(e.what_without_backtrace(), error, error_len);
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_len);
  } catch (...) {
    copy_message("memlake: unknown exception", error, error_len);
  }
  return -1;
}

}  // extern "C"
