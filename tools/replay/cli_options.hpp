// memlake-replay's command line: the options (see the usage text, which
// --help prints) and their parser.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "memlake/config.hpp"
#include "replay/gmlake_policy.hpp"

namespace memlake {

struct ToolOptions {
  std::vector<std::string> traces;
  bool help = false;
  std::optional<BackendKind> backend;
  std::vector<std::string> confs;
  std::optional<std::uint64_t> capacity;
  bool min_capacity = false;
  bool needed = false;  // --needed
  bool gmlake_only = false;
  bool cuda_async = false;  // --allocator cudaMallocAsync
  GmlakeOptions gmlake;
  double warmup = 0.3;
  std::size_t slowest = 0;
  double pace = 0;  // --pace
  bool json = false;
  std::string svg;
  bool svg_ts = false;
  std::string html;      // --html: the HTML report of memlake's replay
  std::string timeline;  // --timeline: its timeline (Chrome Trace Event JSON)
  bool progress = true;
};

// A bad option or value; what() says which.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

extern const char* const kReplayUsage;

// "15G", "14.5GiB", "512M", "1024": bytes (binary suffixes K, M, G, T).
std::optional<std::uint64_t> parse_size(std::string_view s);

// Throws UsageError. With -h or --help only `help` is set.
ToolOptions parse_args(const std::vector<std::string>& args);

}  // namespace memlake
