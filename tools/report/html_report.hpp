// The HTML memory report: one self-contained page (inline script and style,
// nothing fetched) drawn from a memlake timeline (Chrome Trace Event JSON as
// the timeline option and Allocator::timeline_json write it): memory over
// time with zoom and hover (live, reserved, mapped, fragmentation), the
// largest blocks at the peak, activity per stream, allocations per rung, the
// slowest allocations with what they did. report_template.html is the page;
// the build embeds it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace memlake {

struct HtmlReportInfo {
  std::string title;     // the heading; empty: "memlake report"
  std::string subtitle;  // one line under it
  std::vector<std::string> notes;
};

// The page for `timeline_json`. The JSON is embedded as it is, with every
// '<' written as \u003c so that no text in it can end the script element
// (valid JSON has '<' only inside strings, where the escape means the same).
std::string render_html_report(std::string_view timeline_json, const HtmlReportInfo& info);

// Writes render_html_report() to `path`; throws std::runtime_error naming
// the file when it cannot be written.
void write_html_report(const std::string& path, std::string_view timeline_json,
                       const HtmlReportInfo& info);

}  // namespace memlake
