// memlake-replay: replays recorded allocation traces through memlake and
// through a simulation of GMLake's policy, and reports peaks, utilization
// against the stock allocators' baselines, per-op latency and VMM calls.
// Everything it does is in the memlake_replay library (replay/cli.hpp);
// see docs/replay.md.
#include "replay/cli.hpp"

int main(int argc, char** argv) {
  return memlake::replay_tool_main(argc, argv);
}
