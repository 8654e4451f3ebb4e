// Refusal: the latest call the backend refused for want of a resource
// (memory, address space, mappings, descriptors, host memory). Such a
// refusal is routed around (reclaim and retry) and, if nothing serves the
// request, named in its out_of_memory report.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.hpp"

namespace memlake::lake {

struct Refusal {
  Status status = Status::ok;
  std::string what;   // the call: "create_chunk", "map", ...
  std::string cause;  // the backend's message

  std::int64_t count = 0;  // refusals so far (stat backend_refusals)

  void note(Status s, const char* call, std::string message) {
    ++count;
    status = s;
    what = call;
    cause = std::move(message);
  }
  void clear() { status = Status::ok; }
  bool any() const { return status != Status::ok; }
  // "out_of_mappings (map: host: ...)"
  std::string text() const {
    return std::string(status_name(status)) + " (" + what + (cause.empty() ? "" : ": ") + cause +
           ")";
  }
};

}  // namespace memlake::lake
