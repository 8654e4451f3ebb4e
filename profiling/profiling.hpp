// profiling/: observers of the allocator's events. Everything here only
// listens: it is installed as an Observer (include/memlake/observer.hpp) by
// an option and never changes what the allocator does; with nothing
// installed the allocator pays one predictable branch per event.
//
// Files here may include the public headers (include/memlake/), the trace
// format (src/trace/) and the common helpers (src/common/), nothing else of
// the allocator. Only nvtx_observer.cpp includes the NVTX headers.
//
//   trace_recorder.*   the `record` option: every allocation and free as a
//                      memlake-trace for memlake-replay
//   timeline.*         the `timeline` option: the last events in a ring, as
//                      Chrome Trace Event JSON (timeline_json.cpp) and as
//                      PyTorch memory snapshots (memory_snapshot.cpp)
//   nvtx_observer.*    the `nvtx` option: NVTX ranges, markers, memory heaps
//                      and regions
//   at_exit.*          finishing the files of allocators that live until exit
//   profiling.cpp      Profilers: what the options install on an allocator
#pragma once

#include <cstdint>
#include <memory>

#include "common/observer_list.hpp"
#include "memlake/config.hpp"
#include "profiling/nvtx_observer.hpp"
#include "profiling/timeline.hpp"
#include "profiling/trace_recorder.hpp"

namespace memlake {

class Profilers {
 public:
  // The observers the options `record`, `timeline` and `nvtx` ask for, added
  // to `observers`; nullptr when none is on. `capacity` is what the allocator
  // may hold. Throws config_error for nvtx:true in a build without NVTX, and
  // whatever a recorder throws when its file cannot be opened.
  static std::unique_ptr<Profilers> install(const Config& c, std::uint64_t capacity,
                                            ObserverList& observers);

  // nullptr when the option is off.
  const Timeline* timeline() const { return timeline_.get(); }

 private:
  std::unique_ptr<TraceRecorder> recorder_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<NvtxObserver> nvtx_;
};

}  // namespace memlake
