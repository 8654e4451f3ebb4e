// memlake-report's command line (report_tool.hpp).
#include "report/report_tool.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "report/html_report.hpp"

namespace memlake {

namespace {

constexpr const char* kUsage =
    R"(usage: memlake-report TIMELINE.json [-o REPORT.html] [--title TEXT]

Writes the HTML memory report of a memlake timeline: the file the timeline
option writes (MEMLAKE_CONF=timeline:PATH), memlake_timeline_dump /
memlake.dump_timeline, or memlake-replay --timeline. The page needs no
network: memory over time (zoom with the wheel, hover for values), the
largest blocks at the peak, streams, rungs, the slowest allocations.

options:
  -o, --output FILE   the report (default: TIMELINE with .html for .json)
  --title TEXT        the report's heading (default: the timeline's name)
  -h, --help          this text
)";

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + path);
  return s.str();
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int run_report_tool(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  std::string input, output, title;
  try {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= args.size()) throw Usage(a + " needs a value");
        return args[++i];
      };
      if (a == "-h" || a == "--help") {
        std::fputs(kUsage, out);
        return 0;
      } else if (a == "-o" || a == "--output") {
        output = value();
      } else if (a == "--title") {
        title = value();
      } else if (!a.empty() && a[0] == '-') {
        throw Usage("unknown option " + a);
      } else if (input.empty()) {
        input = a;
      } else {
        throw Usage("one timeline at a time (got " + input + " and " + a + ")");
      }
    }
    if (input.empty()) throw Usage("no timeline given");
  } catch (const Usage& e) {
    std::fprintf(err, "memlake-report: %s\n(memlake-report --help lists the options)\n", e.what());
    return 2;
  }
  if (output.empty()) {
    output =
        input.ends_with(".json") ? input.substr(0, input.size() - 5) + ".html" : input + ".html";
  }
  try {
    const std::string json = read_all(input);
    // The page reads any Trace Event JSON; refuse what cannot be one.
    const std::size_t first = json.find_first_not_of(" \t\r\n");
    if (first == std::string::npos || (json[first] != '{' && json[first] != '[') ||
        json.find("\"traceEvents\"") == std::string::npos)
      throw std::runtime_error(input +
                               " is not a timeline (Chrome Trace Event JSON with traceEvents)");
    HtmlReportInfo info;
    info.title = title.empty() ? "memlake report: " + base_name(input) : title;
    write_html_report(output, json, info);
  } catch (const std::exception& e) {
    std::fprintf(err, "memlake-report: %s\n", e.what());
    return 2;
  }
  std::fprintf(out, "memlake-report: wrote %s\n", output.c_str());
  return 0;
}

int report_tool_main(int argc, char** argv) {
  return run_report_tool(std::vector<std::string>(argv + 1, argv + argc));
}

}  // namespace memlake
