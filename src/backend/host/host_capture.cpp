// Host graphs and captures (see host_capture.hpp).
#include "backend/host/host_capture.hpp"

#include <algorithm>
#include <atomic>

namespace memlake {

std::uint64_t HostCapture::next_id() {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

void HostCapture::add_node(const HostStream* stream, HostFn fn, void* user) {
  Frontier& f = frontier[stream];
  const auto id = static_cast<std::uint32_t>(graph.nodes.size());
  graph.nodes.push_back(HostGraphNode{fn, user, f});
  f.assign(1, id);
}

void HostCapture::add_dependencies(const HostStream* stream, const Frontier& deps) {
  Frontier& f = frontier[stream];
  for (std::uint32_t d : deps)
    if (std::find(f.begin(), f.end(), d) == f.end()) f.push_back(d);
}

bool HostCapture::joined() const {
  auto it = frontier.find(origin);
  std::vector<bool> reached(graph.nodes.size(), false);
  std::vector<std::uint32_t> todo;
  if (it != frontier.end()) todo = it->second;
  while (!todo.empty()) {
    const std::uint32_t n = todo.back();
    todo.pop_back();
    if (reached[n]) continue;
    reached[n] = true;
    for (std::uint32_t d : graph.nodes[n].deps) todo.push_back(d);
  }
  return std::all_of(reached.begin(), reached.end(), [](bool r) { return r; });
}

}  // namespace memlake
