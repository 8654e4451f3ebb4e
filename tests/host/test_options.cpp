// The option table through its public face: Config::apply()/parse() for every
// key, size suffixes, the exact error messages, MEMLAKE_<KEY> and MEMLAKE_CONF
// precedence in Config::from_env(), and Config::describe().
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "memlake/allocator.hpp"
#include "memlake/config.hpp"
#include "memlake/errors.hpp"

namespace memlake {
namespace {

constexpr std::size_t kKiB = std::size_t{1} << 10;
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr std::size_t kTiB = std::size_t{1} << 40;

const std::vector<std::string> kKeys = {"backend",
                                        "device",
                                        "peer_access",
                                        "capacity",
                                        "capacity_fraction",
                                        "worker",
                                        "reserve",
                                        "shareable",
                                        "record",
                                        "nvtx",
                                        "timeline",
                                        "timeline_events",
                                        "on_misuse",
                                        "host_granularity",
                                        "host_max_mappings",
                                        "host_max_fds",
                                        "host_max_va",
                                        "host_simulate_latency",
                                        "small_max",
                                        "max_chunk",
                                        "large_chunk",
                                        "large_chunk_from",
                                        "fit_slack",
                                        "stitch_cache_ratio",
                                        "max_stitch_chunks"};

const std::string kKnown =
    "backend, device, peer_access, capacity, capacity_fraction, worker, reserve, shareable, "
    "record, nvtx, timeline, timeline_events, on_misuse, host_granularity, host_max_mappings, "
    "host_max_fds, host_max_va, host_simulate_latency, small_max, max_chunk, large_chunk, "
    "large_chunk_from, fit_slack, stitch_cache_ratio, max_stitch_chunks";

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

// Clears MEMLAKE_CONF and every MEMLAKE_<KEY> for one test and puts back what
// was there before, so the other tests in this binary see the environment
// they started with.
class EnvGuard {
 public:
  EnvGuard() {
    names_.push_back("MEMLAKE_CONF");
    for (const std::string& k : kKeys) names_.push_back("MEMLAKE_" + upper(k));
    for (const std::string& n : names_) {
      const char* v = std::getenv(n.c_str());
      saved_.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n.c_str());
    }
  }
  ~EnvGuard() {
    for (const auto& [n, v] : saved_) {
      if (v)
        ::setenv(n.c_str(), v->c_str(), 1);
      else
        ::unsetenv(n.c_str());
    }
  }
  void set(const char* name, const char* value) { ::setenv(name, value, 1); }

 private:
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::size_t size_of(const std::string& text) {
  return Config::parse("capacity:" + text).capacity;
}

std::string error_of(const std::string& conf) {
  try {
    Config::parse(conf);
  } catch (const config_error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string env_error() {
  try {
    Config::from_env();
  } catch (const config_error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.capacity, b.capacity);
  EXPECT_EQ(a.capacity_fraction, b.capacity_fraction);
  EXPECT_EQ(a.host_granularity, b.host_granularity);
  EXPECT_EQ(a.host_simulate_latency, b.host_simulate_latency);
  EXPECT_EQ(a.small_max, b.small_max);
  EXPECT_EQ(a.max_chunk, b.max_chunk);
  EXPECT_EQ(a.fit_slack, b.fit_slack);
  EXPECT_EQ(a.stitch_cache_ratio, b.stitch_cache_ratio);
  EXPECT_EQ(a.max_stitch_chunks, b.max_stitch_chunks);
  EXPECT_EQ(a.large_chunk, b.large_chunk);
  EXPECT_EQ(a.large_chunk_from, b.large_chunk_from);
  EXPECT_EQ(a.record, b.record);
  EXPECT_EQ(a.host_max_mappings, b.host_max_mappings);
  EXPECT_EQ(a.host_max_fds, b.host_max_fds);
  EXPECT_EQ(a.host_max_va, b.host_max_va);
  EXPECT_EQ(a.on_misuse, b.on_misuse);
  EXPECT_EQ(a.peer_access, b.peer_access);
  EXPECT_EQ(a.worker, b.worker);
  EXPECT_EQ(a.reserve, b.reserve);
  EXPECT_EQ(a.shareable, b.shareable);
}

TEST(Options, EveryKeyParses) {
  const Config c = Config::parse(
      "backend:host,device:3,capacity:12G,capacity_fraction:0.75,host_granularity:64K,"
      "host_simulate_latency:true,small_max:256K,max_chunk:64M,fit_slack:0.5,"
      "stitch_cache_ratio:2.5,max_stitch_chunks:16,large_chunk:8M,large_chunk_from:1G,"
      "on_misuse:abort,peer_access:1+3,worker:inline,reserve:64M,shareable:true");
  EXPECT_EQ(c.backend, BackendKind::host);
  EXPECT_EQ(c.peer_access.bits, (std::uint64_t{1} << 1) | (std::uint64_t{1} << 3));
  EXPECT_EQ(c.worker, WorkerMode::inline_jobs);
  EXPECT_EQ(c.reserve, 64 * kMiB);
  EXPECT_TRUE(c.shareable);
  EXPECT_EQ(c.device, 3);
  EXPECT_EQ(c.capacity, 12 * kGiB);
  EXPECT_EQ(c.capacity_fraction, 0.75);
  EXPECT_EQ(c.host_granularity, 64 * kKiB);
  EXPECT_TRUE(c.host_simulate_latency);
  EXPECT_EQ(c.small_max, 256 * kKiB);
  EXPECT_EQ(c.max_chunk, 64 * kMiB);
  EXPECT_EQ(c.fit_slack, 0.5);
  EXPECT_EQ(c.stitch_cache_ratio, 2.5);
  EXPECT_EQ(c.max_stitch_chunks, 16u);
  EXPECT_EQ(c.large_chunk, 8 * kMiB);
  EXPECT_EQ(c.large_chunk_from, kGiB);
  EXPECT_EQ(c.on_misuse, MisuseAction::abort);
}

TEST(Options, EmptyAndBlankStringsChangeNothing) {
  expect_same(Config::parse(""), Config{});
  expect_same(Config::parse("  \t "), Config{});
  expect_same(Config::parse(",, ,"), Config{});
}

TEST(Options, WhitespaceAroundTokensAndTrailingComma) {
  const Config c = Config::parse("  capacity : 2G ,\tbackend:host , max_stitch_chunks: 4,");
  EXPECT_EQ(c.capacity, 2 * kGiB);
  EXPECT_EQ(c.backend, BackendKind::host);
  EXPECT_EQ(c.max_stitch_chunks, 4u);
}

TEST(Options, LaterTokensWin) {
  EXPECT_EQ(Config::parse("capacity:1G,capacity:3G").capacity, 3 * kGiB);
}

TEST(Options, ApplyKeepsOtherFields) {
  Config c;
  c.apply("capacity:1G");
  c.apply("max_stitch_chunks:7");
  EXPECT_EQ(c.capacity, kGiB);
  EXPECT_EQ(c.max_stitch_chunks, 7u);
}

TEST(Options, FailedApplyLeavesConfigUnchanged) {
  Config c = Config::parse("capacity:1G");
  EXPECT_THROW(c.apply("capacity:5G,max_stitch_chunks:0"), config_error);
  EXPECT_EQ(c.capacity, kGiB);
  EXPECT_EQ(c.max_stitch_chunks, Config{}.max_stitch_chunks);
}

TEST(Options, SizeSuffixes) {
  EXPECT_EQ(size_of("0"), 0u);
  EXPECT_EQ(size_of("4096"), 4096u);
  EXPECT_EQ(size_of("7B"), 7u);
  EXPECT_EQ(size_of("3K"), 3 * kKiB);
  EXPECT_EQ(size_of("3k"), 3 * kKiB);
  EXPECT_EQ(size_of("3KB"), 3 * kKiB);
  EXPECT_EQ(size_of("3KiB"), 3 * kKiB);
  EXPECT_EQ(size_of("2M"), 2 * kMiB);
  EXPECT_EQ(size_of("2MB"), 2 * kMiB);
  EXPECT_EQ(size_of("2MiB"), 2 * kMiB);
  EXPECT_EQ(size_of("2mib"), 2 * kMiB);
  EXPECT_EQ(size_of("2Mb"), 2 * kMiB);
  EXPECT_EQ(size_of("80G"), 80 * kGiB);
  EXPECT_EQ(size_of("80gb"), 80 * kGiB);
  EXPECT_EQ(size_of("1T"), kTiB);
  EXPECT_EQ(size_of("1TiB"), kTiB);
  EXPECT_EQ(size_of("1.5G"), 1610612736u);
  EXPECT_EQ(size_of("0.5K"), 512u);
  EXPECT_EQ(size_of(".5M"), 512 * kKiB);
  EXPECT_EQ(size_of("0.1K"), 102u);  // rounds down to whole bytes
  EXPECT_EQ(size_of("2.0"), 2u);
  EXPECT_EQ(size_of("16777215T"), 16777215 * kTiB);
  EXPECT_EQ(size_of("18446744073709551615"), SIZE_MAX);
}

TEST(Options, MalformedSizes) {
  const std::string expected = "\" for key \"capacity\": expected a size like 80G";
  for (const char* bad : {"", "M", "12Q", "2 M", "2MM", "2iB", "2BB", "-1", "+1", "1.5", "0x10",
                          "1e3", "2MiBs", ".", "1.2.3K", "K2"}) {
    EXPECT_EQ(error_of(std::string("capacity:") + bad),
              "memlake config: bad value \"" + std::string(bad) + expected)
        << bad;
  }
}

TEST(Options, SizeTooLarge) {
  EXPECT_EQ(error_of("capacity:16777216T"),
            "memlake config: bad value \"16777216T\" for key \"capacity\": size too large");
  EXPECT_EQ(error_of("capacity:18446744073709551616"),
            "memlake config: bad value \"18446744073709551616\" for key \"capacity\": size too "
            "large");
}

TEST(Options, Booleans) {
  for (const char* t : {"true", "1", "yes", "on", "TRUE", "Yes", "ON"})
    EXPECT_TRUE(Config::parse(std::string("host_simulate_latency:") + t).host_simulate_latency)
        << t;
  for (const char* f : {"false", "0", "no", "off", "False", "NO", "Off"})
    EXPECT_FALSE(Config::parse(std::string("shareable:") + f).shareable) << f;
  EXPECT_EQ(error_of("shareable:maybe"),
            "memlake config: bad value \"maybe\" for key \"shareable\": expected true, "
            "false, 1, 0, yes, no, on or off");
  EXPECT_EQ(error_of("host_simulate_latency:2"),
            "memlake config: bad value \"2\" for key \"host_simulate_latency\": expected true, "
            "false, 1, 0, yes, no, on or off");
}

TEST(Options, Choices) {
  EXPECT_EQ(Config::parse("backend:auto").backend, BackendKind::automatic);
  EXPECT_EQ(Config::parse("backend:host").backend, BackendKind::host);
  EXPECT_EQ(Config::parse("backend:cuda").backend, BackendKind::cuda);
  EXPECT_EQ(Config::parse("backend:CUDA").backend, BackendKind::cuda);
  EXPECT_EQ(Config::parse("on_misuse:error").on_misuse, MisuseAction::error);
  EXPECT_EQ(Config::parse("on_misuse:abort").on_misuse, MisuseAction::abort);
  EXPECT_EQ(error_of("backend:gpu"),
            "memlake config: bad value \"gpu\" for key \"backend\": expected one of auto, host, "
            "cuda");
  EXPECT_EQ(error_of("on_misuse:warn"),
            "memlake config: bad value \"warn\" for key \"on_misuse\": expected one of error, "
            "abort");
  EXPECT_EQ(error_of("backend:"),
            "memlake config: bad value \"\" for key \"backend\": expected one of auto, host, "
            "cuda");
}

TEST(Options, PeerAccessDeviceSets) {
  EXPECT_TRUE(Config::parse("peer_access:all").peer_access.all());
  EXPECT_TRUE(Config::parse("peer_access:ALL").peer_access.all());
  EXPECT_EQ(Config::parse("peer_access:none").peer_access.bits, 0u);
  EXPECT_EQ(Config::parse("peer_access:0").peer_access.bits, 1u);
  EXPECT_EQ(Config::parse("peer_access:63+2").peer_access.bits,
            (std::uint64_t{1} << 63) | (std::uint64_t{1} << 2));
  EXPECT_EQ(Config{}.peer_access.bits, 0u) << "no peer access unless asked for";
  const std::string expected =
      "\": expected all, none, or device numbers from 0 to 63 joined by + (like 1+3)";
  for (const char* bad : {"64", "1+", "+1", "1++2", "-1", "one", "2.5", ""}) {
    EXPECT_EQ(
        error_of(std::string("peer_access:") + bad),
        std::string("memlake config: bad value \"") + bad + "\" for key \"peer_access" + expected)
        << bad;
  }
}

TEST(Options, NumberRanges) {
  EXPECT_EQ(Config::parse("capacity_fraction:0").capacity_fraction, 0.0);
  EXPECT_EQ(Config::parse("capacity_fraction:1").capacity_fraction, 1.0);
  EXPECT_EQ(Config::parse("fit_slack:4").fit_slack, 4.0);
  EXPECT_EQ(Config::parse("fit_slack:1e-1").fit_slack, 0.1);
  EXPECT_EQ(Config::parse("stitch_cache_ratio:64").stitch_cache_ratio, 64.0);
  EXPECT_EQ(error_of("capacity_fraction:1.5"),
            "memlake config: bad value \"1.5\" for key \"capacity_fraction\": expected a number "
            "from 0 to 1");
  EXPECT_EQ(error_of("capacity_fraction:-0.1"),
            "memlake config: bad value \"-0.1\" for key \"capacity_fraction\": expected a number "
            "from 0 to 1");
  EXPECT_EQ(error_of("fit_slack:4.01"),
            "memlake config: bad value \"4.01\" for key \"fit_slack\": expected a number from 0 "
            "to 4");
  EXPECT_EQ(error_of("fit_slack:nan"),
            "memlake config: bad value \"nan\" for key \"fit_slack\": expected a number from 0 to "
            "4");
  EXPECT_EQ(error_of("stitch_cache_ratio:inf"),
            "memlake config: bad value \"inf\" for key \"stitch_cache_ratio\": expected a number "
            "from 0 to 64");
  EXPECT_EQ(error_of("stitch_cache_ratio:1x"),
            "memlake config: bad value \"1x\" for key \"stitch_cache_ratio\": expected a number "
            "from 0 to 64");
}

TEST(Options, IntegerRanges) {
  EXPECT_EQ(Config::parse("device:0").device, 0);
  EXPECT_EQ(Config::parse("device:63").device, 63);
  EXPECT_EQ(Config::parse("max_stitch_chunks:1").max_stitch_chunks, 1u);
  EXPECT_EQ(Config::parse("max_stitch_chunks:4096").max_stitch_chunks, 4096u);
  EXPECT_EQ(error_of("device:64"),
            "memlake config: bad value \"64\" for key \"device\": expected an integer from 0 to "
            "63");
  EXPECT_EQ(error_of("device:-1"),
            "memlake config: bad value \"-1\" for key \"device\": expected an integer from 0 to "
            "63");
  EXPECT_EQ(error_of("max_stitch_chunks:0"),
            "memlake config: bad value \"0\" for key \"max_stitch_chunks\": expected an integer "
            "from 1 to 4096");
  EXPECT_EQ(error_of("max_stitch_chunks:4097"),
            "memlake config: bad value \"4097\" for key \"max_stitch_chunks\": expected an "
            "integer from 1 to 4096");
  EXPECT_EQ(error_of("max_stitch_chunks:2K"),
            "memlake config: bad value \"2K\" for key \"max_stitch_chunks\": expected an integer "
            "from 1 to 4096");
  EXPECT_EQ(error_of("max_stitch_chunks:1.0"),
            "memlake config: bad value \"1.0\" for key \"max_stitch_chunks\": expected an integer "
            "from 1 to 4096");
}

TEST(Options, SizeRanges) {
  EXPECT_EQ(Config::parse("host_granularity:4K").host_granularity, 4 * kKiB);
  EXPECT_EQ(Config::parse("host_granularity:1G").host_granularity, kGiB);
  EXPECT_EQ(Config::parse("max_chunk:4096").max_chunk, 4096u);
  const std::string granularity_error =
      "\" for key \"host_granularity\": expected a power of two from 4K to 1G";
  for (const char* bad : {"6K", "2K", "2G", "0", "4097", "x"}) {
    EXPECT_EQ(error_of(std::string("host_granularity:") + bad),
              "memlake config: bad value \"" + std::string(bad) + granularity_error)
        << bad;
  }
  EXPECT_EQ(error_of("max_chunk:4095"),
            "memlake config: bad value \"4095\" for key \"max_chunk\": expected a size of at "
            "least 4K");
}

TEST(Options, UnknownKey) {
  EXPECT_EQ(error_of("capcity:1G"),
            "memlake config: unknown key \"capcity\" (known: " + kKnown + ")");
  // Keys are exact: lower case, no prefix.
  EXPECT_EQ(error_of("Capacity:1G"),
            "memlake config: unknown key \"Capacity\" (known: " + kKnown + ")");
  EXPECT_EQ(error_of(":1G"), "memlake config: unknown key \"\" (known: " + kKnown + ")");
}

TEST(Options, MissingColon) {
  EXPECT_EQ(error_of("capacity=1G"),
            "memlake config: missing ':' in token \"capacity=1G\" (expected key:value)");
  EXPECT_EQ(error_of("backend:host, capacity"),
            "memlake config: missing ':' in token \"capacity\" (expected key:value)");
}

TEST(Options, FromEnvDefaults) {
  EnvGuard env;
  expect_same(Config::from_env(), Config{});
}

TEST(Options, FromEnvEveryKeyVariable) {
  EnvGuard env;
  env.set("MEMLAKE_BACKEND", "host");
  env.set("MEMLAKE_DEVICE", "2");
  env.set("MEMLAKE_CAPACITY", "4G");
  env.set("MEMLAKE_CAPACITY_FRACTION", "0.5");
  env.set("MEMLAKE_HOST_GRANULARITY", "1M");
  env.set("MEMLAKE_HOST_SIMULATE_LATENCY", "on");
  env.set("MEMLAKE_SMALL_MAX", "512K");
  env.set("MEMLAKE_MAX_CHUNK", "32M");
  env.set("MEMLAKE_FIT_SLACK", "0.25");
  env.set("MEMLAKE_STITCH_CACHE_RATIO", "3");
  env.set("MEMLAKE_MAX_STITCH_CHUNKS", "8");
  env.set("MEMLAKE_SHAREABLE", "no");
  env.set("MEMLAKE_LARGE_CHUNK", "16M");
  env.set("MEMLAKE_ON_MISUSE", "abort");
  expect_same(Config::from_env(),
              Config::parse("backend:host,device:2,capacity:4G,capacity_fraction:0.5,"
                            "host_granularity:1M,host_simulate_latency:true,small_max:512K,"
                            "max_chunk:32M,fit_slack:0.25,stitch_cache_ratio:3,"
                            "max_stitch_chunks:8,shareable:false,large_chunk:16M,"
                            "on_misuse:abort"));
}

TEST(Options, FromEnvConfOverridesKeyVariables) {
  EnvGuard env;
  env.set("MEMLAKE_CAPACITY", "4G");
  env.set("MEMLAKE_MAX_STITCH_CHUNKS", "16");
  env.set("MEMLAKE_CONF", "capacity:8G,backend:host");
  const Config c = Config::from_env();
  EXPECT_EQ(c.capacity, 8 * kGiB);      // MEMLAKE_CONF wins
  EXPECT_EQ(c.max_stitch_chunks, 16u);  // only set by its variable
  EXPECT_EQ(c.backend, BackendKind::host);
  EXPECT_EQ(c.max_chunk, Config{}.max_chunk);
}

TEST(Options, FromEnvKeyVariableAlone) {
  EnvGuard env;
  env.set("MEMLAKE_CAPACITY", " 4G ");
  EXPECT_EQ(Config::from_env().capacity, 4 * kGiB);
}

TEST(Options, FromEnvEmptyVariableIsUnset) {
  EnvGuard env;
  env.set("MEMLAKE_CAPACITY", "");
  env.set("MEMLAKE_CONF", "");
  expect_same(Config::from_env(), Config{});
}

TEST(Options, FromEnvErrorsNameTheVariable) {
  EnvGuard env;
  env.set("MEMLAKE_CAPACITY", "12Q");
  EXPECT_EQ(env_error(),
            "memlake config: bad value \"12Q\" for key \"capacity\" in MEMLAKE_CAPACITY: expected "
            "a size like 80G");
  ::unsetenv("MEMLAKE_CAPACITY");
  env.set("MEMLAKE_CONF", "capcity:1G");
  EXPECT_EQ(env_error(),
            "memlake config: unknown key \"capcity\" in MEMLAKE_CONF (known: " + kKnown + ")");
  env.set("MEMLAKE_CONF", "max_stitch_chunks:0");
  EXPECT_EQ(env_error(),
            "memlake config: bad value \"0\" for key \"max_stitch_chunks\" in MEMLAKE_CONF: "
            "expected an integer from 1 to 4096");
  env.set("MEMLAKE_CONF", "capacity");
  EXPECT_EQ(env_error(),
            "memlake config: missing ':' in token \"capacity\" in MEMLAKE_CONF (expected "
            "key:value)");
}

// describe() is one "key:value  # type, default D: help" line per option.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Options, DescribeListsEveryKeyInOrder) {
  const std::vector<std::string> lines = lines_of(Config{}.describe());
  ASSERT_EQ(lines.size(), kKeys.size());
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    EXPECT_EQ(lines[i].rfind(kKeys[i] + ":", 0), 0u) << lines[i];
    EXPECT_NE(lines[i].find(" # "), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("default "), std::string::npos) << lines[i];
  }
}

TEST(Options, DescribeShowsValuesAndDefaults) {
  const Config c = Config::parse(
      "backend:host,capacity:1G,host_granularity:64K,fit_slack:0.5,on_misuse:abort,"
      "shareable:on,capacity:1536M");
  const std::string text = c.describe();
  EXPECT_EQ(text.rfind("backend:host ", 0), 0u) << text;
  EXPECT_NE(text.find("\ncapacity:1536M "), std::string::npos) << text;
  EXPECT_NE(text.find("\nhost_granularity:64K "), std::string::npos) << text;
  EXPECT_NE(text.find("\nfit_slack:0.5 "), std::string::npos) << text;
  EXPECT_NE(text.find("\non_misuse:abort "), std::string::npos) << text;
  EXPECT_NE(text.find("\nshareable:true "), std::string::npos) << text;
  EXPECT_NE(text.find("# tuning, number 0..4, default "), std::string::npos) << text;
  EXPECT_NE(text.find("# auto|host|cuda, default "), std::string::npos) << text;
  EXPECT_NE(text.find("# size, power of two 4K..1G, default "), std::string::npos) << text;
  EXPECT_NE(text.find("number 0..4, default "), std::string::npos) << text;
  EXPECT_NE(text.find("integer 1..4096, default "), std::string::npos) << text;
  EXPECT_NE(text.find("# bool, default "), std::string::npos) << text;
  EXPECT_NE(text.find("size >= 4K, default "), std::string::npos) << text;
  // Each line's default is the value a default Config shows.
  const std::vector<std::string> lines = lines_of(text);
  const std::vector<std::string> defaults = lines_of(Config{}.describe());
  ASSERT_EQ(lines.size(), defaults.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string shown = defaults[i].substr(0, defaults[i].find(' '));
    const std::string value = shown.substr(shown.find(':') + 1);
    EXPECT_NE(lines[i].find(", default " + value + ": "), std::string::npos) << lines[i];
  }
}

TEST(Options, DescribeValuesParseBack) {
  const Config original = Config::parse(
      "backend:cuda,device:5,capacity:1536M,capacity_fraction:0.3,host_granularity:8K,"
      "host_simulate_latency:yes,small_max:12345,max_chunk:3G,fit_slack:0.1,"
      "stitch_cache_ratio:0.7,max_stitch_chunks:99,large_chunk:6M,large_chunk_from:100M,"
      "on_misuse:abort,peer_access:4+7,reserve:3M,shareable:on,record:/tmp/t.csv,"
      "host_max_mappings:6553,host_max_fds:512,host_max_va:1T");
  std::string conf;
  for (const std::string& line : lines_of(original.describe())) {
    conf += line.substr(0, line.find(' '));
    conf += ',';
  }
  expect_same(Config::parse(conf), original);
  // And the defaults.
  conf.clear();
  for (const std::string& line : lines_of(Config{}.describe())) {
    conf += line.substr(0, line.find(' '));
    conf += ',';
  }
  expect_same(Config::parse(conf), Config{});
}

// Combinations that cannot work are errors naming both keys, when the
// Allocator is made (or validate() is called), never silently resolved.
TEST(Options, ImpossibleCombinationsNameBothKeys) {
  auto validate_error = [](const std::string& conf) -> std::string {
    try {
      Config::parse(conf).validate();
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(validate_error("capacity:8G,capacity_fraction:0.5"),
            "memlake config: \"capacity\" and \"capacity_fraction\" are both set: give one of "
            "them");
  EXPECT_EQ(validate_error("reserve:64M,worker:off"),
            "memlake config: \"reserve\" and \"worker\" do not go together: the worker makes "
            "the reserve, and worker is off");
  EXPECT_EQ(validate_error("capacity:8G,worker:off"), "no error");
  EXPECT_EQ(validate_error("capacity_fraction:0.5,reserve:64M,worker:inline"), "no error");
  EXPECT_THROW(Allocator(Config::parse("backend:host,capacity:1G,capacity_fraction:0.5")),
               config_error);
}

// capacity_fraction takes its share of the backend's memory (the host
// backend's 80 GiB); a capacity below one chunk is rejected with the sizes.
TEST(Options, CapacityFractionAndTooSmallACapacity) {
  const Allocator half(Config::parse("backend:host,capacity_fraction:0.25,worker:off"));
  EXPECT_EQ(half.capacity(), 20 * kGiB);
  const Allocator fixed(Config::parse("backend:host,capacity:3G,worker:off"));
  EXPECT_EQ(fixed.capacity(), 3 * kGiB);
  try {
    Allocator tiny(Config::parse("backend:host,capacity:1M,worker:off"));
    FAIL() << "a capacity below one chunk must be rejected";
  } catch (const config_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "memlake config: capacity 1048576 bytes is below one chunk (the host backend's "
              "granularity, 2097152 bytes)");
  }
}

}  // namespace
}  // namespace memlake
