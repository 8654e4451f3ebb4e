// The exit handler behind close_at_exit_register (at_exit.hpp).
#include "profiling/at_exit.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace memlake {

namespace {

std::mutex g_mutex;
std::vector<ClosesAtExit*>* g_open = nullptr;  // never freed: the exit handler may run last

void close_all() {
  std::lock_guard lock(g_mutex);
  for (ClosesAtExit* c : *g_open) c->close_at_exit();
}

}  // namespace

void close_at_exit_register(ClosesAtExit* c) {
  std::lock_guard lock(g_mutex);
  if (g_open == nullptr) {
    g_open = new std::vector<ClosesAtExit*>();
    std::atexit(close_all);
  }
  g_open->push_back(c);
}

void close_at_exit_unregister(ClosesAtExit* c) {
  std::lock_guard lock(g_mutex);
  if (g_open != nullptr) std::erase(*g_open, c);
}

}  // namespace memlake
