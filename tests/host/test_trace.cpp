// Trace reader, checker and writer (src/trace/): plain and gzip input,
// metadata, every malformed-row case with its line number, truncated gzip,
// semantic errors, and writer round trips.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "trace/trace.hpp"

namespace memlake {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSmall =
    "# memlake-trace v1 workload=tiny source=unit test\n"
    "# baseline native peak_reserved_bytes=4194304 peak_allocated_bytes=3000 method=replay x y\n"
    "# baseline async peak_reserved_bytes=2097152\n"
    "# training-run something we do not know about\n"
    "# peak_live_bytes=3000\n"
    "ts_us,op,id,bytes,stream\n"
    "0,alloc,7,1000,0\n"
    "5,alloc,8,2000,977649152\n"
    "9,free,7,1000,0\n"
    "12,free,8,2000,977649152\n";

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("memlake_test_trace_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_plain(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

// The error of parsing `text`, as "FILE:LINE: reason".
std::string parse_error(const std::string& text) {
  try {
    Trace t = parse_trace(text, "t.csv");
    match_frees(t);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "no error";
}

void expect_small(const Trace& t) {
  EXPECT_EQ(t.meta.version, 1);
  EXPECT_EQ(t.meta.workload, "tiny");
  EXPECT_EQ(t.meta.source, "unit test");
  ASSERT_EQ(t.meta.baselines.size(), 2u);
  EXPECT_EQ(t.meta.baselines[0].name, "native");
  EXPECT_EQ(t.meta.baselines[0].peak_reserved_bytes, 4194304u);
  EXPECT_EQ(t.meta.baselines[0].peak_allocated_bytes, 3000u);
  ASSERT_EQ(t.meta.baselines[0].fields.size(), 3u);
  EXPECT_EQ(t.meta.baselines[0].fields[2].first, "method");
  EXPECT_EQ(t.meta.baselines[0].fields[2].second, "replay x y");
  EXPECT_EQ(t.meta.baselines[1].name, "async");
  EXPECT_EQ(t.meta.baselines[1].peak_reserved_bytes, 2097152u);
  EXPECT_FALSE(t.meta.baselines[1].peak_allocated_bytes.has_value());
  EXPECT_EQ(t.meta.peak_live_bytes, 3000u);
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[1].ts_us, 5u);
  EXPECT_EQ(t.events[1].op, TraceOp::alloc);
  EXPECT_EQ(t.events[1].id, 8u);
  EXPECT_EQ(t.events[1].bytes, 2000u);
  EXPECT_EQ(t.events[1].stream, 977649152u);
  EXPECT_EQ(t.events[2].op, TraceOp::free);
  EXPECT_EQ(t.lines, (std::vector<std::uint32_t>{7, 8, 9, 10}));
  EXPECT_EQ(t.name(), "tiny");
  EXPECT_EQ(t.computed_peak_live_bytes(), 3000u);
  EXPECT_EQ(match_frees(t), (std::vector<std::uint32_t>{0, 1, 0, 1}));
}

TEST(Trace, ParsesTextInMemory) {
  expect_small(parse_trace(kSmall, "mem.csv"));
}

TEST(Trace, ReadsPlainFile) {
  TempDir dir;
  write_plain(dir.file("a.csv"), kSmall);
  Trace t = read_trace(dir.file("a.csv"));
  EXPECT_EQ(t.path, dir.file("a.csv"));
  expect_small(t);
}

TEST(Trace, ReadsGzipFileWhateverItsName) {
  TempDir dir;
  write_gzip(dir.file("a.csv.gz"), kSmall);
  expect_small(read_trace(dir.file("a.csv.gz")));
  write_gzip(dir.file("no_suffix"), kSmall);
  expect_small(read_trace(dir.file("no_suffix")));
}

TEST(Trace, CrlfLinesAndBlankLines) {
  std::string text = kSmall;
  std::string crlf;
  for (char c : text) {
    if (c == '\n')
      crlf += "\r\n";
    else
      crlf += c;
  }
  Trace t = parse_trace(crlf + "\r\n", "crlf.csv");
  expect_small(t);
}

TEST(Trace, NameFallsBackToFileName) {
  Trace t = parse_trace("ts_us,op,id,bytes,stream\n", "/x/y/run_7.csv.gz");
  EXPECT_EQ(t.name(), "run_7");
  EXPECT_EQ(t.meta.version, 0);
  EXPECT_TRUE(t.events.empty());
}

TEST(Trace, UnknownCommentLinesAreIgnored) {
  Trace t = parse_trace(
      "#\n# whatever=1 baseline x\n#baseline_like line\n# peak_live_bytes_extra stuff\n"
      "ts_us,op,id,bytes,stream\n# a comment between rows\n1,alloc,1,5,0\n",
      "c.csv");
  EXPECT_TRUE(t.meta.baselines.empty());
  EXPECT_FALSE(t.meta.peak_live_bytes.has_value());
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.lines[0], 7u);
}

TEST(Trace, MalformedRowsNameTheirLine) {
  const std::string head = "# memlake-trace v1\nts_us,op,id,bytes,stream\n0,alloc,1,10,0\n";
  EXPECT_EQ(parse_error(head + "1,alloc,2,10\n"),
            "t.csv:4: expected 5 fields (ts_us,op,id,bytes,stream), got 4");
  EXPECT_EQ(parse_error(head + "1,alloc,2,10,0,9\n"),
            "t.csv:4: expected 5 fields (ts_us,op,id,bytes,stream), got 6");
  EXPECT_EQ(parse_error(head + "1,alloc,2,ten,0\n"), "t.csv:4: bytes is not a number: 'ten'");
  EXPECT_EQ(parse_error(head + "1,alloc,2,10x,0\n"), "t.csv:4: bytes is not a number: '10x'");
  EXPECT_EQ(parse_error(head + "1,alloc,2, 10,0\n"), "t.csv:4: bytes is not a number: ' 10'");
  EXPECT_EQ(parse_error(head + "1,alloc,2,-10,0\n"), "t.csv:4: negative bytes '-10'");
  EXPECT_EQ(parse_error(head + "-1,alloc,2,10,0\n"), "t.csv:4: negative ts_us '-1'");
  EXPECT_EQ(parse_error(head + "1,alloc,-2,10,0\n"), "t.csv:4: negative id '-2'");
  EXPECT_EQ(parse_error(head + "1,alloc,2,10,-3\n"), "t.csv:4: negative stream '-3'");
  EXPECT_EQ(parse_error(head + "1,alloc,,10,0\n"), "t.csv:4: empty id");
  EXPECT_EQ(parse_error(head + "1,malloc,2,10,0\n"),
            "t.csv:4: unknown op 'malloc' (expected alloc or free)");
  EXPECT_EQ(parse_error(head + "1,alloc,2,99999999999999999999,0\n"),
            "t.csv:4: bytes out of range '99999999999999999999'");
  EXPECT_EQ(parse_error(head + "ts_us,op,id,bytes,stream\n"),
            "t.csv:4: ts_us is not a number: 'ts_us'");
}

TEST(Trace, MalformedHeaderAndMetadata) {
  EXPECT_EQ(parse_error("0,alloc,1,10,0\n"),
            "t.csv:1: expected the column header 'ts_us,op,id,bytes,stream', got '0,alloc,1,10,0'");
  EXPECT_EQ(parse_error("# only metadata\n"),
            "t.csv:2: no column header 'ts_us,op,id,bytes,stream'");
  EXPECT_EQ(parse_error(""), "t.csv:1: no column header 'ts_us,op,id,bytes,stream'");
  EXPECT_EQ(parse_error("# memlake-trace v2 workload=x\n"),
            "t.csv:1: unsupported format version v2 (this reader knows v1)");
  EXPECT_EQ(parse_error("# memlake-trace version1\n"),
            "t.csv:1: bad format version 'version1' (expected v1)");
  EXPECT_EQ(parse_error("#\n# baseline native peak_allocated_bytes=5\n"),
            "t.csv:2: baseline 'native' has no peak_reserved_bytes");
  EXPECT_EQ(parse_error("# baseline native peak_reserved_bytes=lots\n"),
            "t.csv:1: peak_reserved_bytes is not a number: 'lots'");
  EXPECT_EQ(parse_error("# baseline peak_reserved_bytes=5\n"),
            "t.csv:1: baseline line without an allocator name");
  EXPECT_EQ(parse_error("# peak_live_bytes=-4\n"), "t.csv:1: negative peak_live_bytes '-4'");
}

TEST(Trace, SemanticErrorsNameTheirLine) {
  const std::string head = "ts_us,op,id,bytes,stream\n0,alloc,1,10,0\n";
  EXPECT_EQ(parse_error(head + "1,free,2,10,0\n"), "t.csv:3: free of unknown id 2 (not live)");
  EXPECT_EQ(parse_error(head + "1,free,1,10,0\n2,free,1,10,0\n"),
            "t.csv:4: free of unknown id 1 (not live)");
  EXPECT_EQ(parse_error(head + "1,alloc,1,10,0\n"),
            "t.csv:3: alloc of id 1, which is still live (allocated at line 2)");
  EXPECT_EQ(parse_error(head + "1,free,1,11,0\n"),
            "t.csv:3: free of id 1 with 11 bytes, allocated with 10 at line 2");
  // An id may be reused once it has been freed.
  EXPECT_EQ(parse_error(head + "1,free,1,10,0\n2,alloc,1,20,0\n3,free,1,20,0\n"), "no error");
}

TEST(Trace, MissingFile) {
  try {
    read_trace("/nonexistent/dir/trace.csv.gz");
    FAIL() << "no error";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), 0u);
    EXPECT_STREQ(e.what(), "/nonexistent/dir/trace.csv.gz: cannot open: No such file or directory");
  }
}

TEST(Trace, TruncatedGzipIsAnError) {
  TempDir dir;
  std::string text = "ts_us,op,id,bytes,stream\n";
  for (int i = 0; i < 20000; ++i) {
    text +=
        std::to_string(i) + ",alloc," + std::to_string(i) + "," + std::to_string(i * 7919) + ",0\n";
  }
  write_gzip(dir.file("full.csv.gz"), text);
  EXPECT_EQ(read_trace(dir.file("full.csv.gz")).events.size(), 20000u);
  std::ifstream in(dir.file("full.csv.gz"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Cut inside the deflate data, and also only the 8-byte trailer.
  for (std::size_t cut : {bytes.size() / 2, bytes.size() - 4}) {
    write_plain(dir.file("cut.csv.gz"), bytes.substr(0, cut));
    try {
      read_trace(dir.file("cut.csv.gz"));
      FAIL() << "no error for a cut at " << cut << " of " << bytes.size();
    } catch (const TraceError& e) {
      EXPECT_NE(std::string(e.what()).find("truncated gzip data"), std::string::npos) << e.what();
      EXPECT_GT(e.line(), 1u);
      EXPECT_LE(e.line(), 20002u);
    }
  }
}

TEST(Trace, CorruptGzipIsAnError) {
  TempDir dir;
  std::string text = "ts_us,op,id,bytes,stream\n";
  for (int i = 0; i < 5000; ++i)
    text += std::to_string(i) + ",alloc," + std::to_string(i) + ",64,0\n";
  write_gzip(dir.file("c.csv.gz"), text);
  std::fstream f(dir.file("c.csv.gz"), std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(fs::file_size(dir.file("c.csv.gz")) - 6));
  f.put('\x55').put('\x66');  // the CRC
  f.close();
  EXPECT_THROW(read_trace(dir.file("c.csv.gz")), TraceError);
}

Trace sample_trace() {
  Trace t;
  t.meta.version = 1;
  t.meta.workload = "round_trip";
  t.meta.source = "test writer";
  TraceBaseline b;
  b.name = "native";
  b.peak_reserved_bytes = 1u << 30;
  b.peak_allocated_bytes = 1000;
  t.meta.baselines.push_back(b);
  TraceBaseline c;
  c.name = "expandable";
  c.fields = {{"peak_reserved_bytes", "12345"}, {"method", "replay on a GPU"}};
  c.peak_reserved_bytes = 12345;
  t.meta.baselines.push_back(c);
  t.meta.peak_live_bytes = 1u << 20;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    t.events.push_back(Event{i * 3, TraceOp::alloc, i, (i + 1) * 4096, i % 3 ? 0 : UINT64_MAX});
    t.events.push_back(Event{i * 3 + 1, TraceOp::free, i, (i + 1) * 4096, i % 3 ? 0 : UINT64_MAX});
  }
  return t;
}

void expect_round_trip(const std::string& path) {
  Trace t = sample_trace();
  {
    TraceWriter w(path);
    w.write_meta(t.meta);
    for (const Event& e : t.events) w.write(e);
    w.close();
  }
  Trace r = read_trace(path);
  EXPECT_EQ(r.meta.version, 1);
  EXPECT_EQ(r.meta.workload, "round_trip");
  EXPECT_EQ(r.meta.source, "test writer");
  ASSERT_EQ(r.meta.baselines.size(), 2u);
  EXPECT_EQ(r.meta.baselines[0].name, "native");
  EXPECT_EQ(r.meta.baselines[0].peak_reserved_bytes, 1u << 30);
  EXPECT_EQ(r.meta.baselines[0].peak_allocated_bytes, 1000u);
  EXPECT_EQ(r.meta.baselines[1].peak_reserved_bytes, 12345u);
  EXPECT_EQ(r.meta.baselines[1].fields,
            (std::vector<std::pair<std::string, std::string>>{{"peak_reserved_bytes", "12345"},
                                                              {"method", "replay on a GPU"}}));
  EXPECT_EQ(r.meta.peak_live_bytes, 1u << 20);
  ASSERT_EQ(r.events.size(), t.events.size());
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    EXPECT_EQ(r.events[i].ts_us, t.events[i].ts_us);
    EXPECT_EQ(r.events[i].op, t.events[i].op);
    EXPECT_EQ(r.events[i].id, t.events[i].id);
    EXPECT_EQ(r.events[i].bytes, t.events[i].bytes);
    EXPECT_EQ(r.events[i].stream, t.events[i].stream);
  }
  EXPECT_EQ(r.lines.front(), 6u);  // 4 metadata lines, then the header
  EXPECT_NO_THROW(match_frees(r));
}

TEST(TraceWriter, RoundTripPlain) {
  TempDir dir;
  expect_round_trip(dir.file("w.csv"));
  std::ifstream in(dir.file("w.csv"));
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "# memlake-trace v1 workload=round_trip source=test writer");
}

TEST(TraceWriter, RoundTripGzip) {
  TempDir dir;
  expect_round_trip(dir.file("w.csv.gz"));
  std::ifstream in(dir.file("w.csv.gz"), std::ios::binary);
  EXPECT_EQ(in.get(), 0x1f);  // gzip magic
  EXPECT_EQ(in.get(), 0x8b);
}

TEST(TraceWriter, EmptyTraceHasAHeader) {
  TempDir dir;
  { TraceWriter w(dir.file("e.csv")); }
  Trace r = read_trace(dir.file("e.csv"));
  EXPECT_TRUE(r.events.empty());
}

TEST(TraceWriter, MetadataOnlyFirst) {
  TempDir dir;
  TraceWriter w(dir.file("m.csv"));
  w.alloc(0, 1, 8, 0);
  EXPECT_THROW(w.write_meta(TraceMeta{}), TraceError);
}

TEST(TraceWriter, UnwritablePath) {
  EXPECT_THROW(TraceWriter("/nonexistent/dir/out.csv"), TraceError);
}

TEST(Trace, ParsesFast) {
  std::string text = "ts_us,op,id,bytes,stream\n";
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    text += std::to_string(i * 13) + ",alloc," + std::to_string(i) + "," +
            std::to_string(1000 + i) + ",0\n";
  }
  auto t0 = std::chrono::steady_clock::now();
  Trace t = parse_trace(text, "big.csv");
  auto s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(t.events.size(), static_cast<std::size_t>(n));
  // 1M events/s at least, with room for sanitizer builds.
  EXPECT_LT(s, 2.0);
}

}  // namespace
}  // namespace memlake
