// Hostile input, one case at a time, through the C++ and C APIs: frees of
// freed, foreign and interior pointers (also inside stitched blocks and
// continuations), size mismatches, zero and near-SIZE_MAX sizes, unknown and
// destroyed streams, calls after memlake_shutdown, malformed MEMLAKE_CONF,
// corrupt trace files, and on_misuse:abort. Each case asserts the defined
// result (the exception or return value, what changed in the stats: nothing
// but misuse_errors) and that the message names the cause. Cases that
// tests/host/test_c_api.cpp or tests/suites/test_core.cpp already assert
// the same way are not repeated.
//
// The C API keeps one allocator per device for the whole process, so every
// C API case that creates one, configures one from the environment or shuts
// the library down runs in a child process (EXPECT_EXIT / EXPECT_DEATH).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/host/host_backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/memlake.h"
#include "trace/trace.hpp"

namespace memlake {
namespace {

using testing::HasSubstr;
using testing::StartsWith;

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t kCapacity = 64 * MiB;

// Counts hostile inputs tried, for the report at the end of the binary.
int g_cases = 0;

std::unique_ptr<Allocator> make(Config c = {}) {
  c.capacity = kCapacity;
  c.max_chunk = 2 * MiB;
  HostBackendOptions o;
  o.capacity = kCapacity;
  return std::make_unique<Allocator>(c, std::make_unique<HostBackend>(o));
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#zx", reinterpret_cast<std::size_t>(p));
  return buf;
}

std::string ptr_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// The misuse message of `op`, or a note that it threw nothing / another type.
template <class F>
std::string misuse_of(F&& op) {
  ++g_cases;
  try {
    op();
  } catch (const misuse& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

// The stats that misuse must leave alone.
struct Snapshot {
  std::int64_t live, requested, reserved, allocs, frees, misuse;
  explicit Snapshot(const Allocator& a) {
    const Stats s = a.stats();
    live = s.live_bytes.current;
    requested = s.requested_bytes.current;
    reserved = s.reserved_bytes.current;
    allocs = s.allocs.current;
    frees = s.frees.current;
    misuse = s.misuse_errors.current;
  }
};

// Only misuse_errors moved, by `errors`.
void expect_unchanged(const Snapshot& before, const Allocator& a, int errors) {
  const Snapshot after(a);
  EXPECT_EQ(after.live, before.live);
  EXPECT_EQ(after.requested, before.requested);
  EXPECT_EQ(after.reserved, before.reserved);
  EXPECT_EQ(after.allocs, before.allocs);
  EXPECT_EQ(after.frees, before.frees);
  EXPECT_EQ(after.misuse, before.misuse + errors);
  EXPECT_EQ(a.check_invariants(), "");
}

// ---- pointers ----------------------------------------------------------------

TEST(HostileInput, ExactMessagesForBadFrees) {
  auto a = make();
  void* p = a->allocate(3 * MiB);
  const Snapshot s0(*a);
  int local = 0;
  EXPECT_EQ(misuse_of([&] { a->deallocate(&local, 4); }),
            "memlake: unknown pointer " + hex(&local) + ": not memory of this memlake allocator");
  EXPECT_EQ(misuse_of([&] { a->deallocate(static_cast<char*>(p) + 4096, 0); }),
            "memlake: interior pointer " + hex(static_cast<char*>(p) + 4096) +
                ": 4096 bytes into a live memlake block, not its start");
  EXPECT_EQ(misuse_of([&] { a->deallocate(p, 3 * MiB + 1); }),
            "memlake: size mismatch freeing " + ptr_text(p) +
                ": 3145729 bytes given, the block has 3145728");
  EXPECT_EQ(misuse_of([&] { a->deallocate(p, SIZE_MAX); }),
            "memlake: size mismatch freeing " + ptr_text(p) +
                ": 18446744073709551615 bytes given, the block has 3145728");
  expect_unchanged(s0, *a, 4);
  a->deallocate(p, 3 * MiB);  // still live and whole
  const Snapshot s1(*a);
  EXPECT_EQ(misuse_of([&] { a->deallocate(p, 3 * MiB); }),
            "memlake: double free of " + hex(p) +
                ": it lies in memlake memory that is not allocated (freed already, or never "
                "returned by allocate)");
  expect_unchanged(s1, *a, 1);
}

// A free goes to the lake at once: a second free of the block, or a
// record_stream of it, is named a double free there.
TEST(HostileInput, DoubleFreeAndRecordStreamOfAFreedBlockAreNamed) {
  auto a = make();
  void* p = a->allocate(3 * MiB);
  a->deallocate(p, 3 * MiB);
  const Snapshot s0(*a);
  EXPECT_EQ(misuse_of([&] { a->deallocate(p, 3 * MiB); }),
            "memlake: double free of " + hex(p) +
                ": it lies in memlake memory that is not allocated (freed already, or never "
                "returned by allocate)");
  EXPECT_EQ(misuse_of([&] { a->record_stream(p, nullptr); }),
            "memlake: record_stream: double free of " + hex(p) +
                ": it lies in memlake memory that is not allocated (freed already, or never "
                "returned by allocate)");
  expect_unchanged(s0, *a, 2);
}

// An interior pointer in the second chunk of a multi-chunk block: the message
// gives the offset from the block's start.
TEST(HostileInput, InteriorPointerDeepInsideAMultiChunkBlock) {
  auto a = make();
  void* p = a->allocate(6 * MiB);
  char* inside = static_cast<char*>(p) + 2 * MiB + 100;
  const Snapshot s0(*a);
  EXPECT_EQ(misuse_of([&] { a->deallocate(inside, 0); }),
            "memlake: interior pointer " + hex(inside) + ": " + std::to_string(2 * MiB + 100) +
                " bytes into a live memlake block, not its start");
  expect_unchanged(s0, *a, 1);
  a->deallocate(p, 6 * MiB);
}

// Pointers inside a stitched block and into a continuation (a block that
// starts in the free tail of the chunk before it).
TEST(HostileInput, InteriorPointersInStitchedAndContinuedBlocks) {
  auto a = make();
  void* p1 = a->allocate(4 * MiB);
  void* p2 = a->allocate(4 * MiB);
  a->deallocate(p1, 4 * MiB);
  a->deallocate(p2, 4 * MiB);
  a->process_pending_frees();
  void* big = a->allocate(8 * MiB);  // p2's range grown over p1's chunks
  ASSERT_EQ(a->stats().rung_grow.current, 1);
  ASSERT_GT(a->stats().stitched_bytes.current, 0);
  const Snapshot s0(*a);
  EXPECT_THAT(misuse_of([&] { a->deallocate(static_cast<char*>(big) + 512, 0); }),
              StartsWith("memlake: interior pointer " + hex(static_cast<char*>(big) + 512)));
  // The old addresses of the stitched chunks are not the block.
  EXPECT_THAT(misuse_of([&] { a->deallocate(p1, 4 * MiB); }), HasSubstr("double free of"));
  expect_unchanged(s0, *a, 2);

  void* head = a->allocate(3 * MiB - 4096);  // leaves a 4 KiB tail in its last chunk
  void* cont = a->allocate(3 * MiB);         // may start in that tail
  const Snapshot s1(*a);
  EXPECT_THAT(misuse_of([&] { a->deallocate(static_cast<char*>(cont) + 1024, 0); }),
              StartsWith("memlake: interior pointer"));
  EXPECT_THAT(misuse_of([&] { a->deallocate(static_cast<char*>(head) + 3 * MiB - 4096 - 512, 0); }),
              StartsWith("memlake: interior pointer"));
  expect_unchanged(s1, *a, 2);
  a->deallocate(cont, 3 * MiB);
  a->deallocate(head, 3 * MiB - 4096);
  a->deallocate(big, 8 * MiB);
  EXPECT_EQ(a->check_invariants(), "");
}

TEST(HostileInput, BadPointersToRecordStreamAndAllocationSize) {
  auto a = make();
  void* p = a->allocate(1 * MiB);
  int local = 0;
  const Snapshot s0(*a);
  EXPECT_EQ(misuse_of([&] { a->record_stream(&local, nullptr); }),
            "memlake: record_stream: unknown pointer " + hex(&local) +
                ": not memory of this memlake allocator");
  EXPECT_THAT(misuse_of([&] { a->record_stream(static_cast<char*>(p) + 512, nullptr); }),
              StartsWith("memlake: record_stream: interior pointer"));
  EXPECT_EQ(misuse_of([&] { (void)a->allocation_size(&local); }),
            "memlake: unknown pointer " + hex(&local) + ": not memory of this memlake allocator");
  EXPECT_EQ(misuse_of([&] { (void)a->allocation_size(nullptr); }),
            "memlake: unknown pointer 0: not memory of this memlake allocator");
  EXPECT_EQ(a->allocation_size(p), 1 * MiB);
  a->deallocate(p, 1 * MiB);
  a->process_pending_frees();
  EXPECT_THAT(misuse_of([&] { a->record_stream(p, nullptr); }),
              StartsWith("memlake: record_stream: double free of"));
  // record_stream and allocation_size count in misuse_errors like frees do
  // (allocation_size is a query: it does not count).
  const Stats s = a->stats();
  EXPECT_EQ(s.misuse_errors.current - s0.misuse, 3);
}

// ---- sizes -------------------------------------------------------------------

TEST(HostileInput, SizesAtAndAroundTheLimits) {
  auto a = make();
  const Snapshot s0(*a);
  for (std::size_t bytes : {kCapacity + 1, SIZE_MAX - 511, SIZE_MAX - 1, std::size_t{1} << 63}) {
    ++g_cases;
    try {
      a->allocate(bytes);
      ADD_FAILURE() << "no error for " << bytes;
    } catch (const out_of_memory& e) {
      EXPECT_EQ(e.requested(), bytes);
      EXPECT_THAT(e.what(), HasSubstr("requested " + std::to_string(bytes) + " bytes"));
      EXPECT_THAT(e.what(), HasSubstr("more than the whole capacity"));
    }
  }
  const Stats s = a->stats();
  EXPECT_EQ(s.ooms.current, 4);
  EXPECT_EQ(s.allocs.current, s0.allocs);
  EXPECT_EQ(s.reserved_bytes.current, 0) << "an impossible request creates nothing";
  // Size 0 has a size: 0 on free skips the check, 1 is a mismatch.
  void* z = a->allocate(0);
  EXPECT_EQ(a->allocation_size(z), 0u);
  EXPECT_EQ(misuse_of([&] { a->deallocate(z, 1); }),
            "memlake: size mismatch freeing " + ptr_text(z) + ": 1 bytes given, the block has 0");
  a->deallocate(z, 0);
  EXPECT_EQ(a->check_invariants(), "");
}

// ---- streams -----------------------------------------------------------------

TEST(HostileInput, UnknownStreamOnFreeAndRecordStream) {
  auto a = make();
  void* p = a->allocate(64 * KiB);
  int fake = 0;
  const Snapshot s0(*a);
  EXPECT_EQ(misuse_of([&] { a->deallocate(p, 64 * KiB, &fake); }),
            "memlake: unknown stream " + ptr_text(&fake) + " given to free " + ptr_text(p));
  EXPECT_EQ(misuse_of([&] { a->record_stream(p, &fake); }),
            "memlake: record_stream: unknown stream");
  expect_unchanged(s0, *a, 2);
  a->deallocate(p, 64 * KiB);  // the block survived both
  EXPECT_EQ(a->stats().live_bytes.current, 0);
}

TEST(HostileInput, DestroyedStreamIsUnknown) {
  auto a = make();
  Stream s = a->create_stream();
  void* p = a->allocate(64 * KiB, s);
  a->deallocate(p, 64 * KiB, s);
  a->destroy_stream(s);
  EXPECT_THAT(misuse_of([&] { a->allocate(64 * KiB, s); }),
              StartsWith("memlake: unknown stream " + ptr_text(s)));
  void* q = a->allocate(64 * KiB);
  EXPECT_EQ(misuse_of([&] { a->deallocate(q, 64 * KiB, s); }),
            "memlake: unknown stream " + ptr_text(s) + " given to free " + ptr_text(q));
  a->deallocate(q, 64 * KiB);
  EXPECT_EQ(a->check_invariants(), "");
}

// A block recorded on a stream that is then destroyed through the allocator
// frees cleanly on its own stream: the destroyed stream's work is done.
TEST(HostileInput, FreeAfterTheRecordedStreamWasDestroyed) {
  auto a = make();
  Stream s1 = a->create_stream(), s2 = a->create_stream();
  void* p = a->allocate(1 * MiB, s1);
  a->record_stream(p, s2);
  a->destroy_stream(s2);
  ++g_cases;
  EXPECT_NO_THROW(a->deallocate(p, 1 * MiB, s1));
  a->process_pending_frees();
  const Stats s = a->stats();
  EXPECT_EQ(s.live_bytes.current, 0);
  EXPECT_EQ(s.frees.current, 1);
  EXPECT_EQ(a->check_invariants(), "") << "the block must reach the lake, not vanish";
  a->destroy_stream(s1);
}

// A block freed while its stream's work may still use it is not "live":
// record_stream and allocation_size say it was freed, as deallocate does.
TEST(HostileInput, RecordStreamAndAllocationSizeOfAFreedBlock) {
  auto a = make();
  Stream s = a->create_stream();
  void* p = a->allocate(1 * MiB, s);
  a->deallocate(p, 1 * MiB, s);
  EXPECT_THAT(misuse_of([&] { a->record_stream(p, s); }),
              StartsWith("memlake: record_stream: double free of " + hex(p)));
  EXPECT_THAT(misuse_of([&] { (void)a->allocation_size(p); }), HasSubstr("freed already"));
  a->destroy_stream(s);
}

// ---- on_misuse:abort ---------------------------------------------------------

using HostileInputDeathTest = testing::Test;

TEST(HostileInputDeathTest, OnMisuseAbortReportsAndAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Config c;
  c.on_misuse = MisuseAction::abort;
  auto a = make(c);
  void* p = a->allocate(2 * MiB);
  int local = 0;
  g_cases += 5;
  EXPECT_DEATH(a->deallocate(&local, 4),
               "memlake: fatal misuse: unknown pointer 0x[0-9a-f]+: not memory of this memlake "
               "allocator");
  EXPECT_DEATH(a->deallocate(static_cast<char*>(p) + 512, 0),
               "memlake: fatal misuse: interior pointer 0x[0-9a-f]+: 512 bytes into a live "
               "memlake block");
  EXPECT_DEATH(a->deallocate(p, 7),
               "memlake: fatal misuse: size mismatch freeing 0x[0-9a-f]+: 7 bytes given, the block "
               "has 2097152");
  EXPECT_DEATH(a->allocate(16, &local), "memlake: fatal misuse: unknown stream 0x[0-9a-f]+");
  a->deallocate(p, 2 * MiB);
  EXPECT_DEATH(a->deallocate(p, 2 * MiB), "memlake: fatal misuse: double free of 0x[0-9a-f]+");
  // Out of memory is not misuse: it still throws.
  EXPECT_THROW(a->allocate(kCapacity + 1), out_of_memory);
}

// The C API with on_misuse:abort from MEMLAKE_CONF (a child process: the
// environment configures the process-wide allocator).
TEST(HostileInputDeathTest, CApiOnMisuseAbortFromTheEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ++g_cases;
  EXPECT_DEATH(
      {
        ::setenv("MEMLAKE_CONF", "backend:host,capacity:256M,on_misuse:abort", 1);
        void* p = memlake_malloc(4096, 9, nullptr);
        if (p == nullptr) std::_Exit(3);
        memlake_free(p, 4096, 9, nullptr);
        memlake_free(p, 4096, 9, nullptr);
        std::_Exit(0);
      },
      "memlake: fatal misuse: double free of 0x[0-9a-f]+");
}

// ---- the C API in child processes -------------------------------------------

std::string c_error() {
  return memlake_last_error();
}

// A malformed MEMLAKE_CONF: the first call fails and names the key or value;
// nothing is cached, so a corrected environment works on the next call.
int malformed_conf_child() {
  struct Case {
    const char* conf;
    const char* message;
  };
  const Case cases[] = {
      {"capacity:lots",
       "memlake: cannot create the allocator for device 5: memlake config: bad value \"lots\" for "
       "key \"capacity\" in MEMLAKE_CONF: expected a size like 80G"},
      {"backend:gpu",
       "memlake: cannot create the allocator for device 5: memlake config: bad value \"gpu\" for "
       "key \"backend\" in MEMLAKE_CONF: expected one of auto, host, cuda"},
      {"backend:host,,capacit:1G",
       "memlake: cannot create the allocator for device 5: memlake config: unknown key "
       "\"capacit\" in MEMLAKE_CONF"},
      {"backend:host,capacity",
       "memlake: cannot create the allocator for device 5: memlake config: missing ':' in token "
       "\"capacity\" in MEMLAKE_CONF (expected key:value)"},
      {"backend:host,capacity:99999999999T",
       "memlake: cannot create the allocator for device 5: memlake config: bad value "
       "\"99999999999T\" for key \"capacity\" in MEMLAKE_CONF"},
      {"backend:host,host_granularity:3000",
       "memlake: cannot create the allocator for device 5: memlake config: bad value \"3000\" for "
       "key \"host_granularity\" in MEMLAKE_CONF: expected a power of two from 4K to 1G"},
      {"backend:host,fit_slack:nan",
       "memlake: cannot create the allocator for device 5: memlake config: bad value \"nan\" for "
       "key \"fit_slack\" in MEMLAKE_CONF: expected a number from 0 to 4"},
  };
  int failures = 0;
  for (const Case& c : cases) {
    ::setenv("MEMLAKE_CONF", c.conf, 1);
    if (memlake_malloc(64, 5, nullptr) != nullptr) {
      std::fprintf(stderr, "no error for %s\n", c.conf);
      ++failures;
    } else if (c_error().rfind(c.message, 0) != 0) {
      std::fprintf(stderr, "for %s:\n  got      %s\n  expected %s\n", c.conf, c_error().c_str(),
                   c.message);
      ++failures;
    }
  }
  ::setenv("MEMLAKE_CONF", "backend:host,capacity:256M", 1);
  void* p = memlake_malloc(64, 5, nullptr);
  if (p == nullptr) {
    std::fprintf(stderr, "no recovery: %s\n", c_error().c_str());
    return failures + 100;
  }
  memlake_free(p, 64, 5, nullptr);
  if (!c_error().empty()) ++failures;
  return failures;
}

TEST(HostileInputDeathTest, MalformedConfFailsTheFirstCallAndNamesTheKey) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  g_cases += 7;
  EXPECT_EXIT(std::_Exit(malformed_conf_child()), testing::ExitedWithCode(0), "");
}

// An unknown stream through the C API: NULL and a message, nothing changes.
int unknown_stream_child() {
  ::setenv("MEMLAKE_CONF", "backend:host,capacity:256M", 1);
  int fake = 0;
  int failures = 0;
  void* p = memlake_malloc(64, 0, nullptr);
  if (p == nullptr) return 50;
  if (memlake_malloc(2 << 20, 0, &fake) != nullptr) ++failures;
  if (c_error().rfind("memlake: unknown stream " + ptr_text(&fake), 0) != 0) {
    std::fprintf(stderr, "malloc: %s\n", c_error().c_str());
    ++failures;
  }
  memlake_free(p, 64, 0, &fake);
  if (c_error() != "memlake: unknown stream " + ptr_text(&fake) + " given to free " + ptr_text(p)) {
    std::fprintf(stderr, "free: %s\n", c_error().c_str());
    ++failures;
  }
  if (memlake_record_stream(p, 0, &fake) != -1 ||
      c_error() != "memlake: record_stream: unknown stream")
    ++failures;
  memlake_free(p, 64, 0, nullptr);  // still live after all of that
  if (!c_error().empty()) ++failures;
  memlake_stats s{};
  s.version = MEMLAKE_STATS_VERSION;
  s.size = sizeof s;
  if (memlake_get_stats(0, &s) != 0 || s.misuse_errors.current != 3 || s.live_bytes.current != 0 ||
      s.allocs.current != 1 || s.frees.current != 1)
    ++failures;
  return failures;
}

TEST(HostileInputDeathTest, CApiUnknownStream) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  g_cases += 3;
  EXPECT_EXIT(std::_Exit(unknown_stream_child()), testing::ExitedWithCode(0), "");
}

// memlake_options_print after shutdown prints the reason (the other calls
// after shutdown are in test_c_api.cpp).
TEST(HostileInputDeathTest, OptionsPrintAfterShutdown) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ++g_cases;
  EXPECT_EXIT(
      {
        memlake_shutdown();
        memlake_options_print();
        std::_Exit(c_error() == "memlake: called after memlake_shutdown()" ? 0 : 1);
      },
      testing::ExitedWithCode(0), "memlake: called after memlake_shutdown\\(\\)");
}

// ---- corrupt trace files -------------------------------------------------------

namespace fs = std::filesystem;

class TraceFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("memlake_hostile_" + std::to_string(::getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string write_gzip(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile gz = gzopen(path.c_str(), "wb");
    EXPECT_NE(gz, nullptr);
    gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(gz);
    return path;
  }
  // "FILE:LINE: reason" of reading (and matching) the file.
  static std::string error_of(const std::string& path) {
    ++g_cases;
    try {
      Trace t = read_trace(path);
      match_frees(t);
    } catch (const TraceError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("wrong exception type: ") + e.what();
    }
    return "no error";
  }
  fs::path dir_;
};

constexpr const char* kHeader = "ts_us,op,id,bytes,stream\n";

TEST_F(TraceFiles, BinaryGarbage) {
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk += static_cast<char>((i * 7919) % 251);
  const std::string path = write("junk.bin", junk);
  EXPECT_THAT(error_of(path), StartsWith(path + ":1: expected the column header"));
}

TEST_F(TraceFiles, NulByteInsideARow) {
  const std::string text = std::string(kHeader) + "0,alloc,1,10,0\n" +
                           std::string(
                               "1,alloc,2,1\0"
                               "0,0\n",
                               15);
  const std::string path = write("nul.csv", text);
  // The NUL is an ordinary byte of the field: the line and the field are named.
  EXPECT_THAT(error_of(path), StartsWith(path + ":3: bytes is not a number: '1"));
}

TEST_F(TraceFiles, GzipMagicFollowedByGarbage) {
  const std::string path = write("fake.csv.gz", std::string("\x1f\x8b\x08\x00garbage", 11));
  EXPECT_THAT(error_of(path), StartsWith(path + ":1: "));
  EXPECT_THAT(error_of(path), HasSubstr("gzip"));
}

TEST_F(TraceFiles, GzipOfGarbage) {
  std::string junk(1000, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 31);
  const std::string path = write_gzip("junk.csv.gz", junk);
  EXPECT_THAT(error_of(path), StartsWith(path + ":1: expected the column header"));
}

TEST_F(TraceFiles, EmptyFileAndEmptyGzip) {
  const std::string plain = write("empty.csv", "");
  EXPECT_EQ(error_of(plain), plain + ":1: no column header 'ts_us,op,id,bytes,stream'");
  const std::string gz = write_gzip("empty.csv.gz", "");
  EXPECT_EQ(error_of(gz), gz + ":1: no column header 'ts_us,op,id,bytes,stream'");
}

TEST_F(TraceFiles, ADirectoryIsNotATrace) {
  ++g_cases;
  try {
    read_trace(dir_.string());
    ADD_FAILURE() << "no error";
  } catch (const TraceError& e) {
    EXPECT_EQ(std::string(e.what()), dir_.string() + ":1: cannot read: Is a directory");
  }
}

TEST_F(TraceFiles, VeryLongLineAndManyFields) {
  const std::string fields =
      std::string(kHeader) + "0,alloc,1,10,0" + std::string(100000, ',') + "\n";
  const std::string path = write("fields.csv", fields);
  EXPECT_EQ(error_of(path), path + ":2: expected 5 fields (ts_us,op,id,bytes,stream), got 100005");
  const std::string digits = std::string(kHeader) + "0,alloc,1," + std::string(5000, '9') + ",0\n";
  const std::string path2 = write("digits.csv", digits);
  EXPECT_THAT(error_of(path2), StartsWith(path2 + ":2: bytes out of range '999"));
}

TEST_F(TraceFiles, FreeOfAnIdThatWasNeverAllocatedAfterManyRows) {
  std::string text = kHeader;
  for (int i = 0; i < 1000; ++i)
    text += std::to_string(i) + ",alloc," + std::to_string(i) + ",8,0\n";
  text += "1000,free,5000,8,0\n";
  const std::string path = write("late.csv", text);
  EXPECT_EQ(error_of(path), path + ":1002: free of unknown id 5000 (not live)");
}

// Printed once, after every test of the binary has run.
class CountReport : public testing::Environment {
 public:
  void TearDown() override {
    if (g_cases > 0) std::printf("[ hostile  ] %d hostile inputs tried in this process\n", g_cases);
  }
};
const testing::Environment* const kCountReport = testing::AddGlobalTestEnvironment(new CountReport);

}  // namespace
}  // namespace memlake
