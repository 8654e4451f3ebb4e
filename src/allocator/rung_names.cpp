// Names of the ladder's rungs and of the worker's jobs, as stats, observers,
// traces and tools print them.
#include "memlake/observer.hpp"

namespace memlake {

const char* rung_name(Rung r) {
  switch (r) {
#define MEMLAKE_RUNG_NAME(name, help) \
  case Rung::name:                    \
    return #name;
    MEMLAKE_RUNGS(MEMLAKE_RUNG_NAME)
#undef MEMLAKE_RUNG_NAME
  }
  return "unknown";
}

const char* worker_job_name(WorkerJobKind k) {
  switch (k) {
    case WorkerJobKind::reserve:
      return "reserve";
    case WorkerJobKind::eviction:
      return "eviction";
  }
  return "unknown";
}

}  // namespace memlake
