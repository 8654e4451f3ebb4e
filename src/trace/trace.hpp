// Allocation traces in the memlake-trace v1 format (traces/FORMAT.md): the
// reader (gzip or plain CSV, metadata lines, strict row checks with FILE:LINE
// messages), the semantic check that pairs every free with its alloc, and the
// writer that tools use to record traces in the same format.
//
//   memlake::Trace t = memlake::read_trace("run.csv.gz");
//   std::vector<std::uint32_t> alloc_of = memlake::match_frees(t);
//
// Errors are memlake::TraceError, whose what() reads "FILE:LINE: reason".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memlake/errors.hpp"

namespace memlake {

enum class TraceOp : std::uint8_t { alloc, free };

struct Event {
  std::uint64_t ts_us = 0;
  TraceOp op = TraceOp::alloc;
  std::uint64_t id = 0;
  std::uint64_t bytes = 0;
  std::uint64_t stream = 0;
};

// `# baseline <name> peak_reserved_bytes=<n> [key=value ...]`
struct TraceBaseline {
  std::string name;
  std::uint64_t peak_reserved_bytes = 0;
  std::optional<std::uint64_t> peak_allocated_bytes;
  // Every key=value of the line in order, peak_reserved_bytes included.
  std::vector<std::pair<std::string, std::string>> fields;
};

struct TraceMeta {
  int version = 0;  // 0: no `# memlake-trace vN` line
  std::string workload;
  std::string source;
  std::vector<TraceBaseline> baselines;
  std::optional<std::uint64_t> peak_live_bytes;
};

struct Trace {
  std::string path;  // as given to the reader; used in messages
  TraceMeta meta;
  std::vector<Event> events;
  std::vector<std::uint32_t> lines;  // lines[i]: 1-based line of events[i]

  // The workload name, else the file name without directory and extensions.
  std::string name() const;
  // Peak of requested live bytes, computed from the events (needs
  // match_frees() to have succeeded: frees must name live allocations).
  std::uint64_t computed_peak_live_bytes() const;
};

// A malformed or inconsistent trace. line is 0 when no line applies (e.g. the
// file cannot be opened); what() then reads "FILE: reason".
class TraceError : public error {
 public:
  TraceError(std::string file, std::uint64_t line, std::string reason);
  const std::string& file() const noexcept { return file_; }
  std::uint64_t line() const noexcept { return line_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string file_;
  std::uint64_t line_;
  std::string reason_;
};

// Reads a trace file: gzip (detected by content, not by name) or plain CSV.
Trace read_trace(const std::string& path);
// Parses trace text already in memory; `path` names it in messages.
Trace parse_trace(std::string_view text, std::string path);

// Pairs frees with allocs. Returns alloc_of with alloc_of[i] == i for an alloc
// and the index of the matching alloc for a free. Throws TraceError at the
// first free of an id that is not live, alloc of an id that is still live, or
// free whose bytes differ from its alloc's.
std::vector<std::uint32_t> match_frees(const Trace& trace);

// Writes memlake-trace v1: gzip when the path ends in ".gz", else plain CSV.
// Metadata goes first; the column header follows it on the first event (or
// at close() for an empty trace).
class TraceWriter {
 public:
  explicit TraceWriter(const std::string& path);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Only before the first event.
  void write_meta(const TraceMeta& meta);
  void write(const Event& e);
  void alloc(std::uint64_t ts_us, std::uint64_t id, std::uint64_t bytes, std::uint64_t stream) {
    write(Event{ts_us, TraceOp::alloc, id, bytes, stream});
  }
  void free(std::uint64_t ts_us, std::uint64_t id, std::uint64_t bytes, std::uint64_t stream) {
    write(Event{ts_us, TraceOp::free, id, bytes, stream});
  }
  // Flushes and closes; throws TraceError if anything could not be written.
  void close();

 private:
  void put(std::string_view s);
  void flush_buffer();

  std::string path_;
  void* gz_ = nullptr;  // gzFile; kept opaque so that this header needs no zlib.h
  std::string buffer_;
  bool header_written_ = false;
  bool meta_written_ = false;
  std::uint64_t lines_ = 0;
};

}  // namespace memlake
