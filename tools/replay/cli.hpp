// memlake-replay as a function: reads every trace, replays each through
// memlake and the GMLake policy (and, when asked, searches capacities and
// replays through cudaMallocAsync), prints the reports, and returns one of
// the documented exit statuses. Nothing escapes it: every failure is one
// line naming the trace and the cause, and a status (kReplayUsage lists
// them).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "replay/replay.hpp"

namespace memlake {

enum ExitStatus : int {
  kExitOk = 0,
  kExitDoesNotFit = 1,  // a trace ran out of memory at the capacity given
  kExitBadInput = 2,    // bad trace, file, option or configuration
  kExitAllocator = 3,   // the allocator failed other than by running out of memory
  kExitTool = 4,        // memlake-replay itself failed
};

// Where a run writes, and (for tests) what its allocators are built over.
struct ToolContext {
  std::FILE* out = stdout;
  std::FILE* err = stderr;
  BackendFactory backend;  // empty: the configuration's backend
};

// Runs memlake-replay with `args` (the arguments after the program name).
int run_replay_tool(const std::vector<std::string>& args, const ToolContext& context = {});

// What main() does: install_terminate_handler(), then run_replay_tool().
int replay_tool_main(int argc, char** argv);

// Turns std::terminate (an exception that leaves one of the allocator's
// threads, or a noexcept function that throws) into one line on stderr,
// naming the trace being replayed and the exception, and exit status
// kExitAllocator (kExitTool outside a replay).
void install_terminate_handler();

}  // namespace memlake
