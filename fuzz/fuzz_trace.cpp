// Fuzz target: the trace reader (src/trace/) on arbitrary bytes. Text goes
// to parse_trace(); input that starts with the gzip magic also goes through
// read_trace() from a memory file, so the gzip path is fuzzed too. A
// rejected trace must throw TraceError naming the file; an accepted one must
// be self-consistent (a line per event, increasing), and when its frees
// match, the writer must write it so that the reader reads the same events.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "trace/trace.hpp"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz_trace: %s %s\n", what, detail.c_str());
  __builtin_trap();
}

// A file in memory, named by its /proc/self/fd path.
class MemFile {
 public:
  MemFile() : fd_(::memfd_create("fuzz_trace", 0)) {
    if (fd_ < 0) fail("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  void write(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0) fail("ftruncate failed");
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, size);
      if (n <= 0) fail("write failed");
      data += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

void check_trace(const memlake::Trace& t) {
  if (t.lines.size() != t.events.size()) fail("lines and events differ in number");
  for (std::size_t i = 1; i < t.lines.size(); ++i)
    if (t.lines[i] <= t.lines[i - 1]) fail("event lines do not increase");
  std::vector<std::uint32_t> alloc_of;
  try {
    alloc_of = memlake::match_frees(t);
  } catch (const memlake::TraceError& e) {
    if (e.line() == 0) fail("a semantic error without its line", e.what());
    return;
  }
  if (alloc_of.size() != t.events.size()) fail("match_frees size");
  for (std::size_t i = 0; i < alloc_of.size(); ++i) {
    const memlake::Event& a = t.events[alloc_of[i]];
    if (alloc_of[i] > i || a.op != memlake::TraceOp::alloc || a.id != t.events[i].id ||
        a.bytes != t.events[i].bytes)
      fail("match_frees paired a free with the wrong alloc");
  }
  (void)t.computed_peak_live_bytes();
  // Round trip of the events through the writer and the reader.
  MemFile out;
  {
    memlake::TraceWriter w(out.path());
    for (const memlake::Event& e : t.events) w.write(e);
    w.close();
  }
  const memlake::Trace back = memlake::read_trace(out.path());
  if (back.events.size() != t.events.size()) fail("round trip lost events");
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const memlake::Event& x = t.events[i];
    const memlake::Event& y = back.events[i];
    if (x.ts_us != y.ts_us || x.op != y.op || x.id != y.id || x.bytes != y.bytes ||
        x.stream != y.stream)
      fail("round trip changed an event");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  memlake::Trace t;
  bool parsed = false;
  try {
    t = memlake::parse_trace(text, "fuzz.csv");
    parsed = true;
  } catch (const memlake::TraceError& e) {
    if (e.file() != "fuzz.csv") fail("error names another file", e.what());
    if (std::string_view(e.what()).rfind("fuzz.csv:", 0) != 0) fail("message", e.what());
  }
  if (parsed) check_trace(t);  // anything it throws is a finding
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    MemFile in;
    in.write(data, size);
    parsed = false;
    try {
      t = memlake::read_trace(in.path());
      parsed = true;
    } catch (const memlake::TraceError& e) {
      if (e.file() != in.path()) fail("gzip error names another file", e.what());
    }
    if (parsed) check_trace(t);
  }
  return 0;
}
