// render_html_report (html_report.hpp): the template with the data put in.
#include "report/html_report.hpp"

#include <fstream>
#include <stdexcept>

#include "profiling/json_text.hpp"

namespace memlake {

extern const char* const kReportTemplate;  // report_template.html, embedded by the build

namespace {

constexpr std::string_view kMetaSlot = "/*MEMLAKE_REPORT_META*/";
constexpr std::string_view kTimelineSlot = "/*MEMLAKE_TIMELINE*/";

void append_script_safe(std::string& out, std::string_view json) {
  for (char c : json) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
}

std::string meta_json(const HtmlReportInfo& info) {
  std::string m = "{\"title\":";
  json::string(m, info.title.empty() ? "memlake report" : info.title);
  m += ",\"subtitle\":";
  json::string(m, info.subtitle);
  m += ",\"notes\":[";
  for (std::size_t i = 0; i < info.notes.size(); ++i) {
    if (i) m += ',';
    json::string(m, info.notes[i]);
  }
  m += "]}";
  return m;
}

}  // namespace

std::string render_html_report(std::string_view timeline_json, const HtmlReportInfo& info) {
  const std::string_view page = kReportTemplate;
  const std::size_t meta = page.find(kMetaSlot), data = page.find(kTimelineSlot);
  if (meta == std::string_view::npos || data == std::string_view::npos || data < meta)
    throw std::logic_error("memlake: the report template lacks its data slots");
  std::string out;
  out.reserve(page.size() + timeline_json.size() + 256);
  out += page.substr(0, meta);
  out += meta_json(info);
  out += page.substr(meta + kMetaSlot.size(), data - meta - kMetaSlot.size());
  append_script_safe(out, timeline_json);
  out += page.substr(data + kTimelineSlot.size());
  return out;
}

void write_html_report(const std::string& path, std::string_view timeline_json,
                       const HtmlReportInfo& info) {
  const std::string html = render_html_report(timeline_json, info);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(html.data(), static_cast<std::streamsize>(html.size()));
  if (out) out.close();
  if (!out) throw std::runtime_error("cannot write the HTML report " + path);
}

}  // namespace memlake
