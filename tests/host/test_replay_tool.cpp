// memlake-replay as a whole (run_replay_tool, the memlake_replay library):
// whatever fails inside a replay (a backend that fails or throws, an
// allocator that cannot be built, a capacity too small, an exception on
// another thread) ends in one line naming the trace and the cause and in the
// documented exit status, never in an abort.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/adaptors/backend_adaptor.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/errors.hpp"
#include "replay/cli.hpp"
#include "replay/replay.hpp"

namespace memlake {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr std::size_t MiB = std::size_t{1} << 20;

// Two blocks of 4 MiB live at once (lines 5 and 6), then freed.
constexpr const char* kTrace =
    "# memlake-trace v1 workload=two_blocks\n"
    "ts_us,op,id,bytes,stream\n"
    "0,alloc,1,4194304,0\n"
    "1,alloc,2,4194304,0\n"
    "2,free,1,4194304,0\n"
    "3,free,2,4194304,0\n";

// A trace file that lives as long as the test.
class TraceFile {
 public:
  TraceFile(const std::string& name, const std::string& csv) : path_(::testing::TempDir() + name) {
    std::ofstream(path_) << csv;
  }
  ~TraceFile() { std::remove(path_.c_str()); }
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_all(std::FILE* f) {
  std::string s;
  std::rewind(f);
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  std::fclose(f);
  return s;
}

struct ToolRun {
  int status = -1;
  std::string out, err;
};

// The tool with `args` over backends made by `backend` (empty: the
// configuration's), its output and errors captured.
ToolRun run_tool(std::vector<std::string> args, BackendFactory backend = {}) {
  ToolContext context;
  context.out = std::tmpfile();
  context.err = std::tmpfile();
  context.backend = std::move(backend);
  ToolRun r;
  r.status = run_replay_tool(args, context);
  r.out = read_all(context.out);
  r.err = read_all(context.err);
  return r;
}

// HostBackends with `fault` applied to a FaultBackend over each.
BackendFactory faulty(std::function<void(FaultBackend&)> fault) {
  return [fault](const Config&) -> std::unique_ptr<Backend> {
    auto f = std::make_unique<FaultBackend>(std::make_unique<HostBackend>());
    fault(*f);
    return f;
  };
}

// A backend that breaks its own contract: create_chunk throws `E`.
template <class E>
class ThrowingBackend final : public BackendAdaptor {
 public:
  explicit ThrowingBackend(E e)
      : BackendAdaptor(std::make_unique<HostBackend>(), "throwing"), e_(std::move(e)) {}
  Status create_chunk(std::size_t, ChunkHandle*) override { throw e_; }

 private:
  E e_;
};

template <class E>
BackendFactory throwing(E e) {
  return [e](const Config&) -> std::unique_ptr<Backend> {
    return std::make_unique<ThrowingBackend<E>>(e);
  };
}

std::size_t lines_of(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST(ReplayTool, BackendFailureIsOneLineAndStatusThree) {
  TraceFile trace("replay_tool_fault.csv", kTrace);
  const ToolRun r =
      run_tool({"--no-progress", trace.path()},
               faulty([](FaultBackend& f) { f.fail_randomly(1.0, 1, {VmmOp::map}); }));
  EXPECT_EQ(r.status, kExitAllocator);
  EXPECT_EQ(lines_of(r.err), 1u) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("memlake-replay: " + trace.path() + ":3: allocate(4194304)"),
                           HasSubstr("backend error"), HasSubstr("injected fault in map")));
  EXPECT_THAT(r.out, IsEmpty()) << "no report for a replay that failed";
}

TEST(ReplayTool, ExceptionsOfAnyKindFromTheBackendAreNamed) {
  TraceFile trace("replay_tool_throw.csv", kTrace);
  struct Case {
    BackendFactory backend;
    const char* cause;
  };
  const Case cases[] = {
      {throwing(std::bad_alloc()), "a host memory request failed (std::bad_alloc)"},
      {throwing(std::runtime_error("driver on fire")), "(std::runtime_error): driver on fire"},
      {throwing(misuse("bad\nfree")), "misuse (memlake::misuse): bad free"},
      {throwing(42), "an exception that is not a std::exception"},
  };
  for (const Case& c : cases) {
    const ToolRun r = run_tool({"--no-progress", "--json", trace.path()}, c.backend);
    EXPECT_EQ(r.status, kExitAllocator) << c.cause;
    EXPECT_EQ(lines_of(r.err), 1u) << r.err;
    EXPECT_THAT(r.err, HasSubstr(trace.path() + ":3: allocate(4194304) failed: "));
    EXPECT_THAT(r.err, HasSubstr(c.cause));
  }
}

TEST(ReplayTool, AnAllocatorThatCannotBeBuiltIsStatusThree) {
  TraceFile trace("replay_tool_build.csv", kTrace);
  const ToolRun r = run_tool(
      {"--no-progress", trace.path()},
      [](const Config&) -> std::unique_ptr<Backend> { throw backend_error("no device here"); });
  EXPECT_EQ(r.status, kExitAllocator);
  EXPECT_EQ(r.err, "memlake-replay: " + trace.path() +
                       ": cannot build the allocator: backend error (memlake::backend_error): no "
                       "device here\n");
}

TEST(ReplayTool, ATraceThatDoesNotFitIsStatusOneWithItsReport) {
  TraceFile trace("replay_tool_small.csv", kTrace);
  for (const char* how : {"--capacity=6M", "--conf=capacity:6M"}) {
    const ToolRun r = run_tool({"--no-progress", how, trace.path()});
    EXPECT_EQ(r.status, kExitDoesNotFit) << how;
    EXPECT_THAT(r.err, IsEmpty()) << how;
    EXPECT_THAT(r.out, HasSubstr("two_blocks")) << "the report still comes";
    EXPECT_THAT(r.out, HasSubstr("OOMs             1"));
  }
  EXPECT_EQ(run_tool({"--no-progress", "--capacity=8M", trace.path()}).status, kExitOk);
}

TEST(ReplayTool, FaultsWhileSearchingCapacitiesNameTheCapacity) {
  TraceFile trace("replay_tool_search.csv", kTrace);
  // The first replay (unlimited) passes; every later one fails its maps.
  auto replays = std::make_shared<int>(0);
  const ToolRun r = run_tool({"--no-progress", "--min-capacity", trace.path()},
                             faulty([replays](FaultBackend& f) {
                               if ((*replays)++ > 0) f.fail_randomly(1.0, 1, {VmmOp::map});
                             }));
  EXPECT_EQ(r.status, kExitAllocator);
  EXPECT_EQ(lines_of(r.err), 1u) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("injected fault in map"), HasSubstr("for --min-capacity")));
}

TEST(ReplayTool, BadInputIsStatusTwo) {
  TraceFile bad("replay_tool_bad.csv",
                "ts_us,op,id,bytes,stream\n0,alloc,1,4194304,0\n1,free,9,1,0\n");
  ToolRun r = run_tool({bad.path()});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr(bad.path() + ":3: "));
  EXPECT_EQ(run_tool({"--nonsense"}).status, kExitBadInput);
  EXPECT_EQ(run_tool({"--conf", "no_such_key:1", bad.path()}).status, kExitBadInput);
  r = run_tool({"--help"});
  EXPECT_EQ(r.status, kExitOk);
  for (const char* status : {"  0  ", "  1  ", "  2  ", "  3  ", "  4  "})
    EXPECT_THAT(r.out, HasSubstr(status)) << "--help documents every exit status";
}

TEST(ReplayToolDeathTest, AnExceptionOnAnotherThreadEndsWithStatusThree) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TraceFile trace("replay_tool_thread.csv", kTrace);
  // create_chunk starts a thread that throws: std::terminate, mid-replay.
  class ThreadThrows final : public BackendAdaptor {
   public:
    ThreadThrows() : BackendAdaptor(std::make_unique<HostBackend>(), "thread_throws") {}
    Status create_chunk(std::size_t, ChunkHandle*) override {
      std::thread([] { throw std::runtime_error("thrown on a worker"); }).join();
      return Status::error;
    }
  };
  EXPECT_EXIT(
      {
        install_terminate_handler();
        run_tool({"--no-progress", trace.path()},
                 [](const Config&) { return std::make_unique<ThreadThrows>(); });
      },
      ::testing::ExitedWithCode(kExitAllocator),
      "memlake-replay: .*replay_tool_thread.csv: an exception nothing caught ended the replay: "
      "exception \\(std::runtime_error\\): thrown on a worker");
}

TEST(ReplayErrors, ReplayMemlakeThrowsReplayErrorNamingTheLine) {
  const Trace t = parse_trace(kTrace, "lib.csv");
  const std::vector<std::uint32_t> alloc_of = match_frees(t);
  ReplaySetup setup;
  setup.trace = &t;
  setup.alloc_of = &alloc_of;
  setup.backend = faulty([](FaultBackend& f) { f.fail_nth(VmmOp::map, 1); });
  Config c;
  c.capacity = 64 * MiB;
  try {
    replay_memlake(setup, c);
    ADD_FAILURE() << "a failed map must end the replay";
  } catch (const ReplayError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("lib.csv:3: allocate(4194304) failed: backend error"),
                                HasSubstr("injected fault in map")));
  }
  setup.backend = {};
  EXPECT_TRUE(replay_memlake(setup, c).fits) << "the same trace passes without the fault";
}

TEST(ReplayErrors, DescribeExceptionNamesTheKindOnOneLine) {
  EXPECT_EQ(describe_exception(out_of_memory("full", 1)),
            "out of memory (memlake::out_of_memory): full");
  EXPECT_EQ(describe_exception(config_error("a\nb")),
            "configuration error (memlake::config_error): a b");
  EXPECT_EQ(describe_exception(error("x")), "error (memlake::error): x");
  EXPECT_EQ(describe_exception(std::logic_error("y")), "exception (std::logic_error): y");
}

}  // namespace
}  // namespace memlake
