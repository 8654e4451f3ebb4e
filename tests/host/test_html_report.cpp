// The HTML report's files (tools/report/) and memlake-replay's --html and
// --timeline: the page carries the timeline with nothing in it able to end
// its script element; memlake-report refuses what is no timeline, with
// status 2 and one line; memlake-replay --timeline writes valid Trace Event
// JSON with a slice per allocation of the trace, and --html the page with
// that data. (tests/report/test_html_report.py opens the pages in Chromium.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "json_value.hpp"
#include "replay/cli.hpp"
#include "report/html_report.hpp"
#include "report/report_tool.hpp"
#include "trace_event_check.hpp"

namespace memlake {
namespace {

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "memlake-html-" + std::to_string(::getpid()) + "-" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The JSON between <script type="application/json" id="timeline-data"> and
// its end tag.
std::string embedded_timeline(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"timeline-data\">";
  const std::size_t begin = page.find(open);
  EXPECT_NE(begin, std::string::npos);
  const std::size_t from = begin + open.size();
  return page.substr(from, page.find("</script>", from) - from);
}

TEST(HtmlReport, NothingInTheDataCanEndItsScriptElement) {
  const std::string hostile = R"({"traceEvents":[{"ph":"M","pid":0,"tid":1,"name":"thread_name",)"
                              R"("args":{"name":"</script><script>alert(1)</script>"}}]})";
  HtmlReportInfo info;
  info.title = "a </script> title";
  const std::string empty_page = render_html_report("{}", HtmlReportInfo{});
  const std::string page = render_html_report(hostile, info);
  EXPECT_EQ(count(page, "</script>"), count(empty_page, "</script>"));
  EXPECT_EQ(page.find("alert(1)</script>"), std::string::npos);
  // The escapes read back as the same JSON.
  const test::JsonValue data = test::JsonReader::parse(embedded_timeline(page));
  EXPECT_EQ(data["traceEvents"][0]["args"]["name"].str(), "</script><script>alert(1)</script>");
  EXPECT_EQ(page.find("http://"), std::string::npos) << "nothing is fetched";
  EXPECT_EQ(page.find("https://"), std::string::npos) << "nothing is fetched";
}

struct ToolResult {
  int status = -1;
  std::string out, err;
};

ToolResult report_tool(const std::vector<std::string>& args) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  ToolResult r;
  r.status = run_report_tool(args, out, err);
  for (auto [f, s] : {std::pair{out, &r.out}, std::pair{err, &r.err}}) {
    std::rewind(f);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s->append(buf, n);
    std::fclose(f);
  }
  return r;
}

TEST(HtmlReport, TheToolRefusesWhatIsNoTimelineWithOneLine) {
  ToolResult r = report_tool({temp_path("missing.json")});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot read"), std::string::npos) << r.err;
  const std::string not_json = temp_path("notes.txt");
  std::ofstream(not_json) << "hello";
  r = report_tool({not_json});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("is not a timeline"), std::string::npos) << r.err;
  r = report_tool({"--frobnicate"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown option --frobnicate"), std::string::npos);
  r = report_tool({});
  EXPECT_EQ(r.status, 2);
  std::remove(not_json.c_str());
}

TEST(HtmlReport, ReplayWritesTheTimelineAndThePageOfItsRun) {
  const std::string trace = temp_path("trace.csv");
  std::ofstream(trace) << "# memlake-trace v1 workload=small\n"
                          "ts_us,op,id,bytes,stream\n"
                          "0,alloc,1,4194304,0\n"
                          "1,alloc,2,3000000,1\n"
                          "2,alloc,3,100000,0\n"
                          "3,free,1,4194304,0\n"
                          "4,alloc,4,8388608,1\n"
                          "5,free,2,3000000,1\n"
                          "6,free,3,100000,0\n"
                          "7,free,4,8388608,1\n";
  const std::string html = temp_path("run.html"), json = temp_path("run.json");
  ToolContext context;
  context.out = std::tmpfile();
  context.err = std::tmpfile();
  ASSERT_EQ(run_replay_tool({trace, "--html", html, "--timeline", json, "--no-progress"}, context),
            kExitOk);
  std::fclose(context.out);
  std::fclose(context.err);
  const std::string text = read_file(json);
  const test::JsonValue doc = test::JsonReader::parse(text);
  for (const std::string& problem : test::check_trace_events(doc)) ADD_FAILURE() << problem;
  int allocs = 0, frees = 0;
  std::vector<std::string> streams;
  for (const test::JsonValue& e : doc["traceEvents"].items) {
    if (e["ph"].str() == "X" && e.has("cat") && e["cat"].str() == "alloc") ++allocs;
    if (e["ph"].str() == "i" && e["name"].str() == "free") ++frees;
    if (e["ph"].str() == "M" && e["name"].str() == "thread_name" &&
        e["args"]["name"].str().rfind("stream ", 0) == 0)
      streams.push_back(e["args"]["name"].str());
  }
  EXPECT_EQ(allocs, 4);
  EXPECT_EQ(frees, 4) << "the trace's frees; the replay's teardown is not in the timeline";
  EXPECT_EQ(streams.size(), 2u);
  const std::string page = read_file(html);
  EXPECT_EQ(test::JsonReader::parse(embedded_timeline(page))["traceEvents"].items.size(),
            doc["traceEvents"].items.size());
  EXPECT_NE(page.find("memlake replay: small"), std::string::npos);
  // An unwritable report is bad input, said in one line.
  context.out = std::tmpfile();
  context.err = std::tmpfile();
  EXPECT_EQ(run_replay_tool({trace, "--html", "/nonexistent-dir/r.html", "--no-progress"}, context),
            kExitBadInput);
  std::fclose(context.out);
  std::fclose(context.err);
  for (const std::string& f : {trace, html, json}) std::remove(f.c_str());
}

}  // namespace
}  // namespace memlake
