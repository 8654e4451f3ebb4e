// Reader, checker and writer of memlake-trace v1 (see trace.hpp). The reader
// loads the whole (decompressed) file, then scans it once with from_chars:
// no per-line allocations, so parsing runs at tens of millions of events/s.
#include "trace/trace.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <system_error>
#include <unordered_map>

namespace memlake {

namespace {

constexpr std::string_view kHeader = "ts_us,op,id,bytes,stream";
constexpr const char* kFieldNames[5] = {"ts_us", "op", "id", "bytes", "stream"};

std::string quoted(std::string_view s) {
  constexpr std::size_t kMax = 40;
  std::string out = "'";
  out += s.substr(0, kMax);
  if (s.size() > kMax) out += "...";
  out += "'";
  return out;
}

std::string errno_text(int err) {
  return err ? std::error_code(err, std::generic_category()).message() : "unknown error";
}

// Parses a whole unsigned decimal field; on failure returns the reason.
bool parse_u64(std::string_view s, std::uint64_t* value, const char* what, std::string* reason) {
  if (s.empty()) {
    *reason = std::string("empty ") + what;
    return false;
  }
  if (s.front() == '-') {
    *reason = std::string("negative ") + what + " " + quoted(s);
    return false;
  }
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *value);
  if (ec == std::errc::result_out_of_range) {
    *reason = std::string(what) + " out of range " + quoted(s);
    return false;
  }
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    *reason = std::string(what) + " is not a number: " + quoted(s);
    return false;
  }
  return true;
}

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// key=value tokens; a token without '=' continues the previous value, so
// values may contain spaces ("source=torch-2.11 caching-allocator").
std::vector<std::pair<std::string, std::string>> key_values(
    const std::vector<std::string_view>& tokens, std::size_t first) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = first; i < tokens.size(); ++i) {
    std::string_view t = tokens[i];
    std::size_t eq = t.find('=');
    if (eq == std::string_view::npos) {
      if (!out.empty()) {
        out.back().second += ' ';
        out.back().second += t;
      }
      continue;
    }
    out.emplace_back(std::string(t.substr(0, eq)), std::string(t.substr(eq + 1)));
  }
  return out;
}

class Parser {
 public:
  Parser(std::string_view text, std::string path) : text_(text) { trace_.path = std::move(path); }

  Trace run() {
    trace_.events.reserve(text_.size() / 24 + 16);
    trace_.lines.reserve(text_.size() / 24 + 16);
    std::size_t pos = 0;
    std::uint64_t line_no = 0;
    while (pos < text_.size()) {
      ++line_no;
      std::size_t nl = text_.find('\n', pos);
      std::size_t end = nl == std::string_view::npos ? text_.size() : nl;
      std::string_view line = text_.substr(pos, end - pos);
      pos = nl == std::string_view::npos ? text_.size() : nl + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      if (line.front() == '#') {
        meta_line(line.substr(1), line_no);
      } else if (!header_seen_) {
        if (line != kHeader) {
          fail(line_no,
               "expected the column header '" + std::string(kHeader) + "', got " + quoted(line));
        }
        header_seen_ = true;
      } else {
        row(line, line_no);
      }
    }
    if (!header_seen_) fail(line_no + 1, "no column header '" + std::string(kHeader) + "'");
    return std::move(trace_);
  }

 private:
  [[noreturn]] void fail(std::uint64_t line, std::string reason) const {
    throw TraceError(trace_.path, line, std::move(reason));
  }

  void row(std::string_view line, std::uint64_t line_no) {
    if (line_no > UINT32_MAX || trace_.events.size() >= UINT32_MAX) {
      fail(line_no, "trace too long (more than 2^32 lines)");
    }
    Event e;
    if (!fast_row(line, &e)) slow_row(line, line_no, &e);
    trace_.events.push_back(e);
    trace_.lines.push_back(static_cast<std::uint32_t>(line_no));
  }

  // One pass over a well-formed row; anything unusual goes to slow_row(),
  // which finds the reason.
  static bool fast_row(std::string_view line, Event* e) {
    const char* p = line.data();
    const char* const end = p + line.size();
    auto number = [&](std::uint64_t* v) {
      if (p == end || *p < '0' || *p > '9') return false;
      std::uint64_t n = 0;
      do {
        const unsigned d = static_cast<unsigned>(*p - '0');
        if (n > (UINT64_MAX - d) / 10) return false;
        n = n * 10 + d;
        ++p;
      } while (p != end && *p >= '0' && *p <= '9');
      *v = n;
      return true;
    };
    auto comma = [&] { return p != end && *p++ == ','; };
    if (!number(&e->ts_us) || !comma()) return false;
    if (end - p >= 6 && std::memcmp(p, "alloc,", 6) == 0) {
      e->op = TraceOp::alloc;
      p += 6;
    } else if (end - p >= 5 && std::memcmp(p, "free,", 5) == 0) {
      e->op = TraceOp::free;
      p += 5;
    } else {
      return false;
    }
    return number(&e->id) && comma() && number(&e->bytes) && comma() && number(&e->stream) &&
           p == end;
  }

  void slow_row(std::string_view line, std::uint64_t line_no, Event* out) {
    std::string_view f[5];
    std::size_t n = 0;
    std::size_t start = 0;
    for (;;) {
      std::size_t comma = line.find(',', start);
      std::string_view field = line.substr(
          start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      if (n < 5) f[n] = field;
      ++n;
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (n != 5) {
      fail(line_no, "expected 5 fields (" + std::string(kHeader) + "), got " + std::to_string(n));
    }
    Event e;
    std::string reason;
    if (!parse_u64(f[0], &e.ts_us, kFieldNames[0], &reason)) fail(line_no, reason);
    if (f[1] == "alloc") {
      e.op = TraceOp::alloc;
    } else if (f[1] == "free") {
      e.op = TraceOp::free;
    } else {
      fail(line_no, "unknown op " + quoted(f[1]) + " (expected alloc or free)");
    }
    if (!parse_u64(f[2], &e.id, kFieldNames[2], &reason) ||
        !parse_u64(f[3], &e.bytes, kFieldNames[3], &reason) ||
        !parse_u64(f[4], &e.stream, kFieldNames[4], &reason)) {
      fail(line_no, reason);
    }
    *out = e;
  }

  void meta_line(std::string_view body, std::uint64_t line_no) {
    std::vector<std::string_view> tokens = split_ws(body);
    if (tokens.empty()) return;
    TraceMeta& meta = trace_.meta;
    if (tokens[0] == "memlake-trace") {
      std::string_view v = tokens.size() > 1 ? tokens[1] : std::string_view();
      int version = 0;
      if (v.size() < 2 || v[0] != 'v' ||
          std::from_chars(v.data() + 1, v.data() + v.size(), version).ptr != v.data() + v.size()) {
        fail(line_no, "bad format version " + quoted(v) + " (expected v1)");
      }
      if (version != 1) {
        fail(line_no,
             "unsupported format version v" + std::to_string(version) + " (this reader knows v1)");
      }
      meta.version = version;
      for (auto& [key, value] : key_values(tokens, 2)) {
        if (key == "workload") meta.workload = value;
        if (key == "source") meta.source = value;
      }
    } else if (tokens[0] == "baseline") {
      if (tokens.size() < 2 || tokens[1].find('=') != std::string_view::npos) {
        fail(line_no, "baseline line without an allocator name");
      }
      TraceBaseline b;
      b.name = std::string(tokens[1]);
      b.fields = key_values(tokens, 2);
      bool have_reserved = false;
      std::string reason;
      for (auto& [key, value] : b.fields) {
        std::uint64_t n = 0;
        if (key == "peak_reserved_bytes") {
          if (!parse_u64(value, &n, "peak_reserved_bytes", &reason)) fail(line_no, reason);
          b.peak_reserved_bytes = n;
          have_reserved = true;
        } else if (key == "peak_allocated_bytes") {
          if (!parse_u64(value, &n, "peak_allocated_bytes", &reason)) fail(line_no, reason);
          b.peak_allocated_bytes = n;
        }
      }
      if (!have_reserved)
        fail(line_no, "baseline " + quoted(b.name) + " has no peak_reserved_bytes");
      meta.baselines.push_back(std::move(b));
    } else if (tokens[0].starts_with("peak_live_bytes=")) {
      std::uint64_t n = 0;
      std::string reason;
      if (!parse_u64(tokens[0].substr(16), &n, "peak_live_bytes", &reason)) fail(line_no, reason);
      meta.peak_live_bytes = n;
    }
    // Any other '#' line is a comment.
  }

  std::string_view text_;
  Trace trace_;
  bool header_seen_ = false;
};

// gzerror() prefixes its message with the path; ours already has it.
std::string gz_message(gzFile gz, const std::string& path, int* code) {
  std::string msg = gzerror(gz, code);
  if (msg.starts_with(path + ": ")) msg.erase(0, path.size() + 2);
  if (*code == Z_ERRNO) msg = errno_text(errno);
  return msg;
}

std::uint64_t count_lines(std::string_view text) {
  return static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n'));
}

void append_u64(std::string& out, std::uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

std::string one_line(std::string_view s) {
  std::string out(s);
  std::replace(out.begin(), out.end(), '\n', ' ');
  std::replace(out.begin(), out.end(), '\r', ' ');
  return out;
}

}  // namespace

TraceError::TraceError(std::string file, std::uint64_t line, std::string reason)
    : error(line ? file + ":" + std::to_string(line) + ": " + reason : file + ": " + reason),
      file_(std::move(file)),
      line_(line),
      reason_(std::move(reason)) {}

std::string Trace::name() const {
  if (!meta.workload.empty()) return meta.workload;
  std::string base =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  for (std::string_view ext : {".gz", ".csv"}) {
    if (base.size() > ext.size() && base.ends_with(ext)) base.resize(base.size() - ext.size());
  }
  return base;
}

std::uint64_t Trace::computed_peak_live_bytes() const {
  std::uint64_t live = 0;
  std::uint64_t peak = 0;
  for (const Event& e : events) {
    if (e.op == TraceOp::alloc) {
      live += e.bytes;
      peak = std::max(peak, live);
    } else {
      live -= e.bytes;
    }
  }
  return peak;
}

Trace parse_trace(std::string_view text, std::string path) {
  return Parser(text, std::move(path)).run();
}

Trace read_trace(const std::string& path) {
  errno = 0;
  gzFile gz = gzopen(path.c_str(), "rb");
  if (!gz) {
    throw TraceError(path, 0, "cannot open: " + errno_text(errno));
  }
  gzbuffer(gz, 1u << 18);
  std::string text;
  constexpr std::size_t kStep = std::size_t{4} << 20;
  for (;;) {
    std::size_t old = text.size();
    text.resize(old + kStep);
    int n = gzread(gz, text.data() + old, static_cast<unsigned>(kStep));
    if (n < 0) {
      int code = 0;
      const std::string msg = gz_message(gz, path, &code);
      text.resize(old);
      gzclose(gz);
      throw TraceError(path, count_lines(text) + 1,
                       (code == Z_BUF_ERROR ? "truncated gzip data: " : "cannot read: ") + msg);
    }
    text.resize(old + static_cast<std::size_t>(n));
    if (n == 0) break;
  }
  // gzread returns short counts at end of input; Z_BUF_ERROR then means the
  // file ended in the middle of a gzip stream.
  int code = 0;
  const std::string msg = gz_message(gz, path, &code);
  gzclose(gz);
  if (code == Z_BUF_ERROR) {
    throw TraceError(path, count_lines(text) + 1, "truncated gzip data: " + msg);
  }
  if (code != Z_OK) throw TraceError(path, count_lines(text) + 1, "cannot read: " + msg);
  return parse_trace(text, path);
}

std::vector<std::uint32_t> match_frees(const Trace& trace) {
  std::vector<std::uint32_t> alloc_of(trace.events.size());
  std::unordered_map<std::uint64_t, std::uint32_t> live;
  live.reserve(1024);
  for (std::uint32_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.op == TraceOp::alloc) {
      auto [it, inserted] = live.try_emplace(e.id, i);
      if (!inserted) {
        throw TraceError(trace.path, trace.lines[i],
                         "alloc of id " + std::to_string(e.id) +
                             ", which is still live (allocated at line " +
                             std::to_string(trace.lines[it->second]) + ")");
      }
      alloc_of[i] = i;
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) {
        throw TraceError(trace.path, trace.lines[i],
                         "free of unknown id " + std::to_string(e.id) + " (not live)");
      }
      const Event& a = trace.events[it->second];
      if (a.bytes != e.bytes) {
        throw TraceError(trace.path, trace.lines[i],
                         "free of id " + std::to_string(e.id) + " with " + std::to_string(e.bytes) +
                             " bytes, allocated with " + std::to_string(a.bytes) + " at line " +
                             std::to_string(trace.lines[it->second]));
      }
      alloc_of[i] = it->second;
      live.erase(it);
    }
  }
  return alloc_of;
}

// ---- writer ------------------------------------------------------------------

TraceWriter::TraceWriter(const std::string& path) : path_(path) {
  bool gzip = path.size() > 3 && path.ends_with(".gz");
  errno = 0;
  gzFile gz = gzopen(path.c_str(), gzip ? "wb6" : "wbT");
  if (!gz) throw TraceError(path, 0, "cannot create: " + errno_text(errno));
  gz_ = gz;
  buffer_.reserve(1u << 17);
}

TraceWriter::~TraceWriter() {
  if (gz_) {
    try {
      close();
    } catch (const TraceError&) {
      // A destructor cannot report it; callers who care call close().
    }
  }
}

void TraceWriter::put(std::string_view s) {
  buffer_.append(s);
  if (buffer_.size() >= (1u << 16)) flush_buffer();
}

void TraceWriter::flush_buffer() {
  if (buffer_.empty() || !gz_) return;
  gzFile gz = static_cast<gzFile>(gz_);
  int n = gzwrite(gz, buffer_.data(), static_cast<unsigned>(buffer_.size()));
  if (n <= 0 || static_cast<std::size_t>(n) != buffer_.size()) {
    int code = 0;
    throw TraceError(path_, lines_, "cannot write: " + gz_message(gz, path_, &code));
  }
  buffer_.clear();
}

void TraceWriter::write_meta(const TraceMeta& meta) {
  if (header_written_ || meta_written_) {
    throw TraceError(path_, lines_, "metadata must come first and only once");
  }
  meta_written_ = true;
  std::string s = "# memlake-trace v1";
  if (!meta.workload.empty()) {
    s += " workload=";
    s += one_line(meta.workload);
  }
  if (!meta.source.empty()) {
    s += " source=";
    s += one_line(meta.source);
  }
  s += '\n';
  ++lines_;
  for (const TraceBaseline& b : meta.baselines) {
    s += "# baseline ";
    s += one_line(b.name);
    bool has_reserved = std::any_of(b.fields.begin(), b.fields.end(), [](const auto& kv) {
      return kv.first == "peak_reserved_bytes";
    });
    if (!has_reserved) {
      s += " peak_reserved_bytes=";
      append_u64(s, b.peak_reserved_bytes);
      if (b.peak_allocated_bytes) {
        s += " peak_allocated_bytes=";
        append_u64(s, *b.peak_allocated_bytes);
      }
    }
    for (const auto& [key, value] : b.fields) {
      s += ' ';
      s += one_line(key);
      s += '=';
      s += one_line(value);
    }
    s += '\n';
    ++lines_;
  }
  if (meta.peak_live_bytes) {
    s += "# peak_live_bytes=";
    append_u64(s, *meta.peak_live_bytes);
    s += '\n';
    ++lines_;
  }
  put(s);
}

void TraceWriter::write(const Event& e) {
  if (!gz_) throw TraceError(path_, lines_, "write after close");
  if (!header_written_) {
    put(kHeader);
    put("\n");
    ++lines_;
    header_written_ = true;
  }
  append_u64(buffer_, e.ts_us);
  buffer_ += e.op == TraceOp::alloc ? ",alloc," : ",free,";
  append_u64(buffer_, e.id);
  buffer_ += ',';
  append_u64(buffer_, e.bytes);
  buffer_ += ',';
  append_u64(buffer_, e.stream);
  buffer_ += '\n';
  ++lines_;
  if (buffer_.size() >= (1u << 16)) flush_buffer();
}

void TraceWriter::close() {
  if (!gz_) return;
  if (!header_written_) {
    put(kHeader);
    put("\n");
    header_written_ = true;
  }
  gzFile gz = static_cast<gzFile>(gz_);
  try {
    flush_buffer();
  } catch (...) {
    gzclose(gz);
    gz_ = nullptr;
    throw;
  }
  gz_ = nullptr;
  int rc = gzclose(gz);
  if (rc != Z_OK) throw TraceError(path_, 0, "cannot close: error " + std::to_string(rc));
}

}  // namespace memlake
