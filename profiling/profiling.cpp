// Profilers::install (profiling.hpp).
#include "profiling/profiling.hpp"

#include "memlake/errors.hpp"

namespace memlake {

std::unique_ptr<Profilers> Profilers::install(const Config& c, std::uint64_t capacity,
                                              ObserverList& observers) {
  if (c.record.empty() && c.timeline.empty() && !c.nvtx) return nullptr;
  if (c.nvtx && !NvtxObserver::available()) {
    throw config_error(
        "memlake config: nvtx:true, but this build of memlake has no NVTX (the nvtx3 headers "
        "of the CUDA toolkit were not found when it was built)");
  }
  auto p = std::make_unique<Profilers>();
  if (!c.record.empty()) {
    p->recorder_ = std::make_unique<TraceRecorder>(c.record, c.device);
    observers.add(p->recorder_.get());
  }
  if (!c.timeline.empty()) {
    p->timeline_ = std::make_unique<Timeline>(c.device, c.timeline_events, c.timeline, capacity);
    observers.add(p->timeline_.get());
  }
  if (c.nvtx) {
    p->nvtx_ = std::make_unique<NvtxObserver>(c.device);
    observers.add(p->nvtx_.get());
  }
  return p;
}

}  // namespace memlake
