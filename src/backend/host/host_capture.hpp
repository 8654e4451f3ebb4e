// Graph capture on the HostBackend: what a capturing host stream records
// instead of running, and the graph a capture ends with.
//
// A host graph is a list of host functions with, for each, the nodes it
// runs after; the list is in capture order, which is a topological order,
// so a launch enqueues the nodes in that order on the launch stream (one
// valid schedule of the graph, as a CUDA graph's branches may also run one
// after the other). A capture keeps, for every stream taking part in it,
// the nodes the stream's next node depends on (its frontier): recording an
// event in the capture copies the frontier into the event, and waiting on
// such an event adds it to the waiting stream's frontier, which is how a
// stream joins a capture and how a forked stream rejoins the origin.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"

namespace memlake {

class HostStream;

struct HostGraphNode {
  HostFn fn = nullptr;
  void* user = nullptr;
  std::vector<std::uint32_t> deps;  // earlier nodes it runs after
};

struct HostGraph {
  std::vector<HostGraphNode> nodes;  // in capture order
};

using Frontier = std::vector<std::uint32_t>;

struct HostCapture {
  std::uint64_t id = 0;  // unique in the process
  HostStream* origin = nullptr;
  std::thread::id thread;  // global mode: the capture ends on the thread that began it
  HostGraph graph;
  std::unordered_map<const HostStream*, Frontier> frontier;  // every stream of the capture
  // Why the capture is invalid (empty: it is valid); the first reason stays.
  std::string invalidated;

  // A new id for a capture: unique in the process, never 0.
  static std::uint64_t next_id();
  // `stream`'s next node: runs after its frontier, and becomes its frontier.
  void add_node(const HostStream* stream, HostFn fn, void* user);
  // `stream` now also runs after `deps` (an event recorded in the capture).
  void add_dependencies(const HostStream* stream, const Frontier& deps);
  void invalidate(const std::string& reason) {
    if (invalidated.empty()) invalidated = reason;
  }
  // True when every node is the origin's frontier or runs before it: every
  // stream that joined the capture has rejoined the origin.
  bool joined() const;
};

}  // namespace memlake
