// memlake-replay as a whole (run_replay_tool, the memlake_replay library):
// whatever fails inside a replay (a backend that fails or throws, an
// allocator that cannot be built, a capacity too small, an exception on
// another thread) ends in one line naming the trace and the cause and in the
// documented exit status, never in an abort.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
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
using ::testing::Not;

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

// The allocator turns std::bad_alloc inside allocate (the host's heap ran
// out) into out_of_memory: the trace did not fit, status 1, named.
TEST(ReplayTool, AHostHeapFailureInsideAllocateIsOutOfMemory) {
  TraceFile trace("replay_tool_heap.csv", kTrace);
  const ToolRun r = run_tool({"--no-progress", "--json", trace.path()}, throwing(std::bad_alloc()));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("the host's heap ran out inside the allocator"));
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

// The number after the first "key": of a JSON line; nullopt when the key
// is missing or its value is not a number.
std::optional<long long> json_number(const std::string& json, const std::string& key) {
  const std::size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nullopt;
  const char* begin = json.c_str() + at + key.size() + 3;
  char* end = nullptr;
  const long long v = std::strtoll(begin, &end, 10);
  if (end == begin) return std::nullopt;
  return v;
}

TEST(ReplayTool, BeyondNeededOfTheGmlakePolicyIsKnownByHand) {
  // GMLake: the 4 MiB block takes a 20 MiB segment, the 30 MiB one a
  // segment of its own: 50 MiB. At 30 MiB the full device releases the
  // free 20 MiB segment first; at 28 MiB the 30 MiB one cannot fit.
  TraceFile trace("replay_tool_gmlake_needed.csv",
                  "ts_us,op,id,bytes,stream\n0,alloc,1,4194304,0\n1,free,1,4194304,0\n"
                  "2,alloc,2,31457280,0\n3,free,2,31457280,0\n");
  const ToolRun r = run_tool({"--json", "--needed", "--policy", "gmlake", trace.path()});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_EQ(json_number(r.out, "peak_reserved_bytes"), 50 * MiB);
  EXPECT_EQ(json_number(r.out, "needed_capacity_bytes"), 30 * MiB);
  EXPECT_EQ(json_number(r.out, "beyond_needed_bytes"), 20 * MiB);
  const ToolRun table = run_tool({"--needed", "--policy", "gmlake", trace.path()});
  EXPECT_THAT(table.out, HasSubstr("beyond needed    20.00 MiB (20,971,520 bytes): peak reserved "
                                   "50.00 MiB, fits in 30.00 MiB"));
}

TEST(ReplayTool, BeyondNeededOfMemlakeIsPeakReservedMinusACapacityThatFits) {
  TraceFile trace("replay_tool_needed.csv", kTrace);
  const ToolRun r = run_tool({"--json", "--needed", trace.path()});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  const auto reserved = json_number(r.out, "peak_reserved_bytes");
  const auto needed = json_number(r.out, "needed_capacity_bytes");
  ASSERT_TRUE(reserved && needed);
  EXPECT_EQ(json_number(r.out, "beyond_needed_bytes"), *reserved - *needed);
  EXPECT_GE(*needed, static_cast<long long>(8 * MiB)) << "never below peak live";
  // The answer fits and a step less does not.
  const std::string at = "--capacity=" + std::to_string(*needed);
  const std::string below =
      "--capacity=" + std::to_string(*needed - 2 * static_cast<long long>(MiB));
  EXPECT_EQ(run_tool({"--no-progress", at, trace.path()}).status, kExitOk);
  EXPECT_EQ(run_tool({"--no-progress", below, trace.path()}).status, kExitDoesNotFit);
  // Without --needed nothing is searched; --min-capacity's answer serves.
  EXPECT_FALSE(json_number(run_tool({"--json", trace.path()}).out, "beyond_needed_bytes"));
  const ToolRun min = run_tool({"--json", "--min-capacity", trace.path()});
  EXPECT_EQ(json_number(min.out, "needed_capacity_bytes"),
            json_number(min.out, "min_capacity_bytes"));
  EXPECT_EQ(json_number(min.out, "beyond_needed_bytes"), *reserved - *needed);
}

TEST(ReplayTool, AllocatorTimesAreInTheJsonAndTheTable) {
  TraceFile trace("replay_tool_times.csv", kTrace);
  const ToolRun r = run_tool({"--json", "--warmup=0.5", trace.path()});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  const auto total = json_number(r.out, "allocator_ns_total");
  const auto after = json_number(r.out, "allocator_ns_total_after_warmup");
  const auto vmm = json_number(r.out, "critical_path_vmm_ns");
  const auto vmm_after = json_number(r.out, "critical_path_vmm_ns_after_warmup");
  const auto max_after = json_number(r.out, "alloc_ns_max_after_warmup");
  ASSERT_TRUE(total && after && vmm && vmm_after && max_after) << r.out;
  EXPECT_GT(*total, 0);
  EXPECT_LE(*after, *total);
  EXPECT_GE(*total, *vmm);
  EXPECT_LE(*vmm_after, *vmm);
  EXPECT_LE(*max_after, *after);
  // The same stat as the allocator's own, which "stats" repeats.
  const std::size_t stats = r.out.find("\"stats\":");
  ASSERT_NE(stats, std::string::npos);
  EXPECT_EQ(json_number(r.out.substr(stats), "critical_path_vmm_ns"), vmm);
  EXPECT_EQ(json_number(r.out, "alloc_ns_p99_after_warmup"),
            json_number(r.out.substr(r.out.find("\"alloc_ns_after_warmup\":")), "p99"));
  const ToolRun table = run_tool({"--no-progress", trace.path()});
  EXPECT_THAT(table.out, AllOf(HasSubstr("allocator time"), HasSubstr("in allocate and deallocate"),
                               HasSubstr("of it in VMM calls"), HasSubstr("warm allocate")));
  EXPECT_THAT(table.out, Not(HasSubstr("beyond needed")));
  // The worker runs inline by default: its VMM calls are inside the
  // allocator's time too, beside the critical path's, and the table says so.
  EXPECT_THAT(r.out, HasSubstr("\"worker_inline\":true"));
  const auto worker = json_number(r.out, "worker_vmm_ns");
  ASSERT_TRUE(worker && json_number(r.out, "worker_vmm_ns_after_warmup")) << r.out;
  EXPECT_LE(*worker + *vmm, *total);
  EXPECT_THAT(table.out, HasSubstr("in the inline worker's VMM calls"));
  // Allocations after warm-up less the inline worker's jobs: never slower
  // than the calls they came from; with the worker on its thread, none.
  const auto p99_less = json_number(r.out, "alloc_ns_p99_after_warmup_less_worker");
  const auto max_less = json_number(r.out, "alloc_ns_max_after_warmup_less_worker");
  ASSERT_TRUE(p99_less && max_less) << r.out;
  EXPECT_LE(*p99_less, *json_number(r.out, "alloc_ns_p99_after_warmup"));
  EXPECT_LE(*max_less, *max_after);
  EXPECT_THAT(table.out, HasSubstr("less the inline worker's jobs"));
  const ToolRun threaded = run_tool({"--json", "--conf", "worker:thread", trace.path()});
  ASSERT_EQ(threaded.status, kExitOk) << threaded.err;
  EXPECT_THAT(threaded.out, HasSubstr("\"worker_inline\":false"));
  EXPECT_THAT(threaded.out, HasSubstr("\"alloc_ns_p99_after_warmup_less_worker\":null"));
  EXPECT_THAT(run_tool({"--no-progress", "--conf", "worker:thread", trace.path()}).out,
              Not(HasSubstr("inline worker")));
}

// With a reserve of 4 MiB, every request for new memory takes the reserve
// and the next one's call makes it again, inline: that call less the job is
// faster than the call (after warm-up only the last two allocations count).
TEST(ReplayTool, AllocationsLessTheInlineWorkersJobsLeaveTheJobOut) {
  std::string csv = "# memlake-trace v1 workload=reserve\nts_us,op,id,bytes,stream\n";
  int ts = 0;
  auto event = [&](const char* op, int id, std::size_t bytes) {
    csv += std::to_string(++ts) + "," + op + "," + std::to_string(id) + "," +
           std::to_string(bytes) + ",0\n";
  };
  for (int id = 1; id <= 36; ++id) event("alloc", id, 2 * MiB);
  event("alloc", 100, 4 * MiB);
  event("alloc", 101, 4 * MiB);
  TraceFile trace("replay_tool_reserve.csv", csv);
  const ToolRun r = run_tool({"--json", "--warmup=0.95", "--conf", "reserve:4M", trace.path()});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  ASSERT_GT(json_number(r.out, "worker_vmm_ns_after_warmup").value_or(0), 0)
      << "the inline worker made no VMM call after warm-up: " << r.out;
  const auto max = json_number(r.out, "alloc_ns_max_after_warmup");
  const auto max_less = json_number(r.out, "alloc_ns_max_after_warmup_less_worker");
  ASSERT_TRUE(max && max_less) << r.out;
  EXPECT_LT(*max_less, *max);
  EXPECT_GT(*max_less, 0);
  // Those two took the reserve the worker had mapped: the worker mapped,
  // not the allocating thread.
  EXPECT_EQ(json_number(r.out, "allocs_mapping_after_warmup"), 0) << r.out;
}

// Two of three 2 MiB blocks freed in warm-up, then two 4 MiB blocks: the
// first takes both freed chunks, mapping one of them again beside the
// other (reserved memory only), the second needs new chunks. Both mapped,
// one over reserved memory only, in the JSON and the table. (An allocation
// that maps nothing is not counted: the test with the reserve above.)
TEST(ReplayTool, AllocationsThatMappedAfterWarmUpAreCountedAndThoseOverReservedMemoryApart) {
  TraceFile trace("replay_tool_mapped_reserved.csv",
                  "# memlake-trace v1 workload=mapped_reserved\n"
                  "ts_us,op,id,bytes,stream\n"
                  "0,alloc,1,2097152,0\n"
                  "1,alloc,2,2097152,0\n"
                  "2,alloc,3,2097152,0\n"
                  "3,free,1,2097152,0\n"
                  "4,free,3,2097152,0\n"
                  "5,alloc,4,4194304,0\n"
                  "6,alloc,5,4194304,0\n"
                  "7,free,2,2097152,0\n"
                  "8,free,4,4194304,0\n"
                  "9,free,5,4194304,0\n");
  const ToolRun r = run_tool({"--json", "--warmup=0.5", trace.path()});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_EQ(json_number(r.out.substr(r.out.find("\"alloc_ns_after_warmup\":")), "count"), 2)
      << r.out;
  EXPECT_EQ(json_number(r.out, "allocs_mapping_after_warmup"), 2) << r.out;
  EXPECT_EQ(json_number(r.out, "allocs_mapping_reserved_after_warmup"), 1) << r.out;
  const ToolRun table = run_tool({"--no-progress", "--warmup=0.5", trace.path()});
  EXPECT_THAT(table.out, HasSubstr("2 of 2 allocations (100.00%) mapped on the allocating thread, "
                                   "1 of them over reserved memory only"));
}

// The trace's gaps add up to 40 ms: paced at 1 the replay spins through
// them (a lower bound only: nothing here is timed against a limit), paced at
// 0 it does not, and a bad factor is bad input.
TEST(ReplayTool, PaceSpinsThroughTheTracesGaps) {
  TraceFile trace("replay_tool_pace.csv",
                  "# memlake-trace v1 workload=paced\n"
                  "ts_us,op,id,bytes,stream\n"
                  "0,alloc,1,4194304,0\n"
                  "20000,alloc,2,4194304,0\n"
                  "30000,free,1,4194304,0\n"
                  "40000,free,2,4194304,0\n");
  const ToolRun paced = run_tool({"--json", "--pace", "1", trace.path()});
  ASSERT_EQ(paced.status, kExitOk) << paced.err;
  // memlake's own "seconds" follows "events_replayed" (the GMLake policy's
  // comes earlier, inside its object).
  const std::size_t at = paced.out.find("\"events_replayed\":");
  ASSERT_NE(at, std::string::npos) << paced.out;
  const std::size_t key = paced.out.find("\"seconds\":", at);
  ASSERT_NE(key, std::string::npos) << paced.out;
  EXPECT_GE(std::strtod(paced.out.c_str() + key + 10, nullptr), 0.040) << paced.out;
  EXPECT_EQ(run_tool({"--pace", "-1", trace.path()}).status, kExitBadInput);
  EXPECT_EQ(run_tool({"--pace", "fast", trace.path()}).status, kExitBadInput);
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
      "memlake-replay: .*replay_tool_thread.csv: an uncaught exception ended the run: "
      "exception \\(std::runtime_error\\): thrown on a worker");
}

TEST(ReplayToolDeathTest, AnUncaughtExceptionOutsideAReplayIsStatusFour) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        install_terminate_handler();
        std::thread([] { throw std::length_error("outside"); }).join();
      },
      ::testing::ExitedWithCode(kExitTool),
      "^memlake-replay: an uncaught exception ended the run: exception \\(std::length_error\\): "
      "outside\n$");
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
