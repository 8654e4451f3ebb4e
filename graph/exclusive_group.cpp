// Launch order and overlap check of an exclusive group (exclusive_group.hpp).
#include "graph/exclusive_group.hpp"

#include <cstdio>

#include "memlake/errors.hpp"

namespace memlake::graph {

namespace {
std::string pool_name(const OverlapCheck::Marker* m) {
  if (m == nullptr) return "(unknown)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "(%llu, %llu)", static_cast<unsigned long long>(m->pool.first),
                static_cast<unsigned long long>(m->pool.second));
  return buf;
}
}  // namespace

OverlapCheck::Marker* OverlapCheck::marker(PoolId pool) {
  for (Marker& m : markers_)
    if (m.pool == pool) return &m;
  return &markers_.emplace_back(Marker{this, pool});
}

void OverlapCheck::begin(void* marker) {
  auto* m = static_cast<Marker*>(marker);
  OverlapCheck& c = *m->check;
  const Marker* running = c.last_running_.exchange(m, std::memory_order_acq_rel);
  if (c.running_.fetch_add(1, std::memory_order_acq_rel) != 0) {
    c.last_overlap_started_.store(m, std::memory_order_release);
    c.last_overlap_running_.store(running, std::memory_order_release);
    c.overlaps_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void OverlapCheck::end(void* marker) {
  static_cast<Marker*>(marker)->check->running_.fetch_sub(1, std::memory_order_acq_rel);
}

std::uint64_t OverlapCheck::take_unreported(std::string* what) {
  const std::uint64_t seen = overlaps();
  const std::uint64_t fresh = seen - reported_;
  reported_ = seen;
  if (fresh != 0 && what != nullptr) {
    *what = "the graph of pool " +
            pool_name(last_overlap_started_.load(std::memory_order_acquire)) +
            " started while the graph of pool " +
            pool_name(last_overlap_running_.load(std::memory_order_acquire)) + " was running";
  }
  return fresh;
}

ExclusiveGroup::~ExclusiveGroup() {
  if (last_ != nullptr) backend.event_destroy(last_);
}

bool ExclusiveGroup::launch(GraphHandle graph, StreamHandle stream) {
  if (last_ == nullptr && backend.event_create(&last_) != Status::ok) {
    last_ = nullptr;
    throw backend_error("memlake: exclusive graph launch: event_create failed: " +
                        backend.last_error());
  }
  // On the same stream, stream order keeps the launches apart already.
  const bool waits = launched_ && last_stream_ != stream;
  if (waits && backend.stream_wait_event(stream, last_) != Status::ok)
    throw backend_error("memlake: exclusive graph launch: stream_wait_event failed: " +
                        backend.last_error());
  if (backend.graph_launch(graph, stream) != Status::ok)
    throw backend_error("memlake: graph_launch failed: " + backend.last_error());
  if (backend.event_record(last_, stream) != Status::ok)
    throw backend_error("memlake: exclusive graph launch: event_record failed: " +
                        backend.last_error());
  launched_ = true;
  last_stream_ = stream;
  return waits;
}

}  // namespace memlake::graph
