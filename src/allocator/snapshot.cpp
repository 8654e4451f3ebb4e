// What the allocator reports of itself: the stats snapshot (the parts' own
// counters and the counting backend's), peaks, the largest block available,
// and the invariant check.
#include "allocator/allocator_impl.hpp"

#include <algorithm>

namespace memlake {

namespace {
void fix_gauge(StatValue&) {}
void fix_counter(StatValue& v) {
  v.peak = v.current;
}
}  // namespace

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
  s.worker_turn_waits.current = static_cast<std::int64_t>(turns_->waits());
  s.worker_turn_wait_ns.current = static_cast<std::int64_t>(turns_->wait_ns());
  s.backend_refusals.current = refusal_.count;
  // The calls' own timings are kept in ticks (ScopedTicks).
  s.allocate_ns.current = ticks_to_ns(stats_.allocate_ns.current);
  s.deallocate_ns.current = ticks_to_ns(stats_.deallocate_ns.current);
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

std::size_t AllocatorImpl::largest_available() {
  std::lock_guard lock(mutex_);
  const std::size_t held = pool_.reserved_bytes() + pool_.creating_bytes();
  const std::size_t growth = pool_.capacity() > held ? pool_.capacity() - held : 0;
  return std::max(lake_.largest_free_block(), lake_.free_chunk_bytes() + growth);
}

std::string AllocatorImpl::check_invariants() const {
  std::lock_guard lock(mutex_);
  std::string err = lake_.check_invariants();
  if (stats_.reserved_bytes.current != static_cast<std::int64_t>(pool_.reserved_bytes()))
    err += "reserved bytes disagree with the stats; ";
  std::size_t live = 0;
  lake_.each_allocation([&](DevicePtr, const lake::Allocation& a) { live += a.size; });
  // The totals count the graph pools' blocks too.
  if (static_cast<std::int64_t>(live) + stats_.graph_pool_live_bytes.current !=
      stats_.live_bytes.current)
    err += "live bytes disagree with the stats; ";
  if (static_cast<std::int64_t>(lake_.allocation_count() + graphs_.block_count()) !=
      stats_.live_blocks.current)
    err += "live blocks disagree with the stats; ";
  if (live != lake_.allocated_bytes())
    err += "live bytes disagree with the lake's allocated bytes; ";
  for (const auto& [ptr, streams] : other_streams_)
    if (lake_.find(ptr) == nullptr) err += "streams listed for a block that is not live; ";
  err += graphs_.check_invariants();
  return err;
}

}  // namespace memlake
