// The `record` option's observer (trace_recorder.hpp).
#include "profiling/trace_recorder.hpp"

#include <unistd.h>

#include <cstdio>

namespace memlake {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

std::string TraceRecorder::expand(const std::string& pattern, int device) {
  std::string path = pattern;
  replace_all(path, "{device}", std::to_string(device));
  replace_all(path, "{pid}", std::to_string(::getpid()));
  return path;
}

TraceRecorder::TraceRecorder(const std::string& path, int device)
    : path_(expand(path, device)), writer_(path_), start_(std::chrono::steady_clock::now()) {
  TraceMeta meta;
  meta.workload = "recorded on device " + std::to_string(device);
  meta.source = "memlake record option";
  writer_.write_meta(meta);
  close_at_exit_register(this);
}

TraceRecorder::~TraceRecorder() {
  close_at_exit_unregister(this);
  close();
}

void TraceRecorder::close() {
  std::lock_guard lock(mutex_);
  if (!open_) return;
  open_ = false;
  try {
    writer_.close();
  } catch (const TraceError& e) {
    std::fprintf(stderr, "memlake: record: %s\n", e.what());
  }
}

std::uint64_t TraceRecorder::now_us() const {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now() - start_)
                                        .count());
}

std::uint64_t TraceRecorder::stream_id(void* stream) {
  if (stream == nullptr) return 0;
  auto [it, fresh] = stream_ids_.try_emplace(stream, stream_ids_.size() + 1);
  return it->second;
}

void TraceRecorder::on_alloc(const AllocEvent& e) {
  std::lock_guard lock(mutex_);
  if (!open_) return;
  const std::uint64_t id = next_id_++;
  live_ids_[e.ptr] = id;
  try {
    writer_.alloc(now_us(), id, e.bytes, stream_id(e.stream));
  } catch (const TraceError& e) {
    open_ = false;  // a full disk must not break the allocator: stop recording, say why
    std::fprintf(stderr, "memlake: record stopped: %s\n", e.what());
  }
}

void TraceRecorder::on_free(const FreeEvent& e) {
  std::lock_guard lock(mutex_);
  if (!open_) return;
  auto it = live_ids_.find(e.ptr);
  if (it == live_ids_.end()) return;  // allocated before recording began
  const std::uint64_t id = it->second;
  live_ids_.erase(it);
  try {
    writer_.free(now_us(), id, e.bytes, stream_id(e.stream));
  } catch (const TraceError& e) {
    open_ = false;
    std::fprintf(stderr, "memlake: record stopped: %s\n", e.what());
  }
}

}  // namespace memlake
