// CapturedGraph (memlake/graph.hpp): a capture whose allocations go to a
// graph pool, with the overlap markers of a checking exclusive group first
// and last in the graph. A failed capture leaves nothing behind: the capture
// ends, the graph it may have made is destroyed, and its use of the pool is
// released.
#include <cstdio>
#include <string>

#include "allocator/allocator_impl.hpp"
#include "memlake/errors.hpp"
#include "memlake/graph.hpp"

namespace memlake {

namespace {

graph::OverlapCheck::Marker* marker_of(Allocator& alloc, PoolId pool) {
  return alloc.impl().with_graphs([&](graph::GraphPools& g) { return g.marker(pool); });
}

void enqueue(Backend& b, Stream stream, HostFn fn, void* user) {
  if (b.launch_host_func(stream, fn, user) != Status::ok)
    throw backend_error("memlake: capture: launch_host_func failed: " + b.last_error());
}

// The capture's use of the pool ends; an error here must not hide the one
// that failed the capture.
void drop_use(Allocator& alloc, PoolId pool) noexcept {
  try {
    end_allocate_to_pool(alloc, pool);
    release_pool(alloc, pool);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memlake: after a failed capture: %s\n", e.what());
  }
}

}  // namespace

CapturedGraph::CapturedGraph(Allocator& alloc, PoolId pool, Stream stream,
                             const std::function<void(Stream)>& work)
    : alloc_(&alloc), pool_(pool) {
  begin_allocate_to_pool(alloc, pool, capture_filter(alloc, stream));
  Backend& b = alloc.backend();
  bool began = false;
  try {
    graph::OverlapCheck::Marker* marker = marker_of(alloc, pool);
    if (b.stream_begin_capture(stream) != Status::ok)
      throw backend_error("memlake: capture: stream_begin_capture failed: " + b.last_error());
    began = true;
    if (marker) enqueue(b, stream, &graph::OverlapCheck::begin, marker);
    work(stream);
    if (marker) enqueue(b, stream, &graph::OverlapCheck::end, marker);
  } catch (...) {
    GraphHandle g = nullptr;
    if (began && b.stream_end_capture(stream, &g) == Status::ok && g != nullptr) b.graph_destroy(g);
    drop_use(alloc, pool);
    throw;
  }
  GraphHandle g = nullptr;
  if (b.stream_end_capture(stream, &g) != Status::ok || g == nullptr) {
    const std::string why = b.last_error();
    drop_use(alloc, pool);
    throw backend_error("memlake: graph capture failed: " + why);
  }
  graph_ = g;
  try {
    end_allocate_to_pool(alloc, pool);
  } catch (...) {
    b.graph_destroy(graph_);
    release_pool(alloc, pool);
    throw;
  }
}

CapturedGraph::CapturedGraph(CapturedGraph&& other) noexcept
    : alloc_(other.alloc_), pool_(other.pool_), graph_(other.graph_) {
  other.alloc_ = nullptr;
  other.graph_ = nullptr;
}

CapturedGraph::~CapturedGraph() {
  if (alloc_ == nullptr) return;
  if (graph_ != nullptr && alloc_->backend().graph_destroy(graph_) != Status::ok)
    std::fprintf(stderr, "memlake: graph_destroy failed: %s\n",
                 alloc_->backend().last_error().c_str());
  try {
    release_pool(*alloc_, pool_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}

void CapturedGraph::launch(Stream stream) {
  launch_exclusive(*alloc_, pool_, graph_, stream);
}

}  // namespace memlake
