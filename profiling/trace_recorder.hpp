// TraceRecorder: an observer that writes the allocator's allocations and
// frees as a memlake-trace (traces/FORMAT.md), so that a training run can be
// replayed with memlake-replay. Installed by the `record` option. Streams
// get small ids in order of first use (0: the default stream); allocations
// get ids in order. The file is complete once the recorder closes: when its
// allocator goes, or at process exit for allocators that live that long
// (the C API's).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "memlake/observer.hpp"
#include "profiling/at_exit.hpp"
#include "trace/trace.hpp"

namespace memlake {

class TraceRecorder final : public Observer, private ClosesAtExit {
 public:
  // `path` as in Config::record: "{device}" and "{pid}" are replaced.
  TraceRecorder(const std::string& path, int device);
  ~TraceRecorder() override;
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  void on_alloc(const AllocEvent& e) override;
  void on_free(const FreeEvent& e) override;
  // Flushes and closes the file; later events are dropped. Idempotent.
  void close();
  void close_at_exit() override { close(); }
  const std::string& path() const { return path_; }

  static std::string expand(const std::string& pattern, int device);

 private:
  std::uint64_t now_us() const;
  std::uint64_t stream_id(void* stream);

  std::mutex mutex_;  // close() may come from an exit handler on another thread
  std::string path_;
  TraceWriter writer_;
  bool open_ = true;
  std::chrono::steady_clock::time_point start_;
  std::unordered_map<void*, std::uint64_t> live_ids_;
  std::unordered_map<void*, std::uint64_t> stream_ids_;
  std::uint64_t next_id_ = 0;
};

}  // namespace memlake
