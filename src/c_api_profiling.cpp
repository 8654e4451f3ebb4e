// The C API's profiling calls (memlake.h): the timeline and the memory
// snapshot of a device's allocator, which need the timeline option.
#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "c_api_table.hpp"
#include "memlake/errors.hpp"
#include "memlake/memlake.h"

using namespace memlake;
using namespace memlake::c_api;

namespace {

Allocator& allocator_of(const char* function, int device) {
  check_open();
  check_device(function, device);
  Allocator* a = existing(device);
  if (a == nullptr) {
    throw error(std::string(function) + ": device " + std::to_string(device) +
                " has no allocator yet (it is made by its first allocation)");
  }
  return *a;
}

// Copies `text` into buf (NUL-terminated, truncated to len); the full length.
int copy_out(const char* function, const std::string& text, char* buf, size_t len) {
  if (text.size() > static_cast<std::size_t>(INT_MAX))
    throw error(std::string(function) + ": the text does not fit an int");
  if (len != 0) {
    const std::size_t n = std::min(len - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(text.size());
}

}  // namespace

extern "C" {

int memlake_timeline_dump(int device, const char* path) {
  return guarded(-1, [&] {
    Allocator& a = allocator_of("memlake_timeline_dump", device);
    if (path == nullptr || path[0] == '\0') throw misuse("memlake_timeline_dump: no path given");
    a.dump_timeline(path);
    return 0;
  });
}

int memlake_memory_snapshot_json(int device, char* buf, size_t len) {
  return guarded(-1, [&] {
    if (buf == nullptr && len != 0)
      throw misuse("memlake_memory_snapshot_json: buf is NULL, len is not 0");
    Allocator& a = allocator_of("memlake_memory_snapshot_json", device);
    return copy_out("memlake_memory_snapshot_json", a.memory_snapshot_json(), buf, len);
  });
}

}  // extern "C"
