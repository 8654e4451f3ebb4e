// memlake-report as a function (main.cpp calls it; tests run it in process):
//
//   memlake-report TIMELINE.json [-o REPORT.html] [--title TEXT]
//
// reads a timeline (the timeline option's file, memlake_timeline_dump,
// memlake-replay --timeline) and writes the HTML report (html_report.hpp);
// without -o, next to it with .html for .json. Exit status 0, or 2 with one
// line on stderr for a bad argument, a file that cannot be read or written,
// or a file that is no timeline.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace memlake {

int run_report_tool(const std::vector<std::string>& args, std::FILE* out = stdout,
                    std::FILE* err = stderr);
int report_tool_main(int argc, char** argv);

}  // namespace memlake
