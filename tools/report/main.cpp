// memlake-report: the HTML memory report of a memlake timeline file.
#include "report/report_tool.hpp"

int main(int argc, char** argv) {
  return memlake::report_tool_main(argc, argv);
}
