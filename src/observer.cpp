// Names of the allocation paths, as observers, traces and tools print them.
// They match the path_* stat names (path_new for AllocPath::fresh).
#include "memlake/observer.hpp"

namespace memlake {

const char* alloc_path_name(AllocPath p) {
  switch (p) {
    case AllocPath::stream_cache:
      return "stream_cache";
    case AllocPath::exact:
      return "exact";
    case AllocPath::split:
      return "split";
    case AllocPath::stitch:
      return "stitch";
    case AllocPath::fresh:
      return "new";
    case AllocPath::reclaim:
      return "reclaim";
  }
  return "unknown";
}

}  // namespace memlake
