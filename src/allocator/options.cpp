// The option table: one row per Config field (name, unit, range, help), and
// everything that reads or prints options through it: Config::apply() for
// "key:value,..." strings, Config::from_env() for MEMLAKE_<KEY> and
// MEMLAKE_CONF, and Config::describe(). Defaults live in config.hpp's member
// initializers; describe() reads them from a default-constructed Config, so
// they are written down once.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "memlake/config.hpp"
#include "memlake/errors.hpp"

namespace memlake {

namespace {

enum class Unit { size, integer, number, flag, choice, devices, path };

using Field = std::variant<std::size_t Config::*, int Config::*, double Config::*, bool Config::*,
                           BackendKind Config::*, MisuseAction Config::*, WorkerMode Config::*,
                           DeviceSet Config::*, std::string Config::*>;

constexpr double kNoLimit = std::numeric_limits<double>::infinity();

struct Option {
  std::string_view name;
  Field field;
  Unit unit;
  // Inclusive bounds for sizes, integers and numbers. All bounds in the table
  // are exact in a double.
  double min = 0;
  double max = kNoLimit;
  bool power_of_two = false;
  std::string_view help;
  bool tuning = false;  // changes placement and caching, not what memlake may use
};

// clang-format off
constexpr std::array kOptions = {
  Option{"backend", &Config::backend, Unit::choice, 0, 0, false,
         "memory backend; auto: cuda when a GPU is present, else host"},
  // 0..63: the C API keeps one allocator per device for devices 0 to 63.
  Option{"device", &Config::device, Unit::integer, 0, 63, false,
         "device the allocator serves (the C API sets it per call)"},
  Option{"peer_access", &Config::peer_access, Unit::devices, 0, 63, false,
         "devices whose kernels may access this allocator's memory: all, none, or numbers "
         "joined by + (1+3)"},
  Option{"capacity", &Config::capacity, Unit::size, 0, kNoLimit, false,
         "physical bytes the allocator may hold; 0: the backend's default "
         "(host: 80G, cuda: free device memory at start); not with capacity_fraction"},
  Option{"capacity_fraction", &Config::capacity_fraction, Unit::number, 0, 1, false,
         "when > 0, take this share of the device's total memory (host: of 80G); not with "
         "capacity"},
  Option{"worker", &Config::worker, Unit::choice, 0, 0, false,
         "background mapping worker: thread, inline (the same jobs at the same points on the "
         "allocating thread, reproducible), or off"},
  Option{"reserve", &Config::reserve, Unit::size, 0, kNoLimit, false,
         "free chunks the worker keeps created and mapped ahead of demand (counted as "
         "reserved memory; needs the worker); 0: none"},
  Option{"shareable", &Config::shareable, Unit::flag, 0, 0, false,
         "chunks are created exportable as POSIX file descriptors (Allocator::share)"},
  Option{"record", &Config::record, Unit::path, 0, 0, false,
         "write every allocation and free as a memlake-trace to this file (.gz: compressed; "
         "{device} and {pid} are replaced); empty: off"},
  Option{"nvtx", &Config::nvtx, Unit::flag, 0, 0, false,
         "NVTX ranges and markers (domain memlake) for Nsight Systems, and mapped ranges and "
         "live blocks as NVTX memory heaps and regions for compute-sanitizer"},
  Option{"timeline", &Config::timeline, Unit::path, 0, 0, false,
         "record a timeline of the last timeline_events events and write it as Chrome Trace "
         "Event JSON (Perfetto, chrome://tracing) to this file at exit ({device} and {pid} are "
         "replaced); empty: off"},
  // About 56 bytes an event in memory, 100-200 bytes in the JSON.
  Option{"timeline_events", &Config::timeline_events, Unit::integer, 1024, 1 << 28, false,
         "events the timeline keeps (a ring: the oldest go first)"},
  Option{"on_misuse", &Config::on_misuse, Unit::choice, 0, 0, false,
         "bad free or unknown pointer: error (report it to the caller) or abort (print a report "
         "and abort)"},
  Option{"host_granularity", &Config::host_granularity, Unit::size, 4096, 1 << 30, true,
         "host backend: chunk and mapping granularity"},
    Option{"host_max_mappings", &Config::host_max_mappings, Unit::integer, 0, 1e9, false,
         "host backend: most memory mappings it may make the kernel hold (0: the machine's "
         "vm.max_map_count, less what the process holds)"},
  Option{"host_max_fds", &Config::host_max_fds, Unit::integer, 0, 1e9, false,
         "host backend: most descriptors it may hold for chunks (0: the process's RLIMIT_NOFILE, "
         "less what is open)"},
  Option{"host_max_va", &Config::host_max_va, Unit::size, 0, kNoLimit, false,
         "host backend: most address space it may reserve (0: the process's RLIMIT_AS)"},
  Option{"host_simulate_latency", &Config::host_simulate_latency, Unit::flag, 0, 0, false,
         "host backend: add the VMM call latencies measured on an H200"},
  Option{"small_max", &Config::small_max, Unit::size, 0, kNoLimit, false,
         "requests up to this size are packed into free space of chunks in use first",
         true},
  Option{"max_chunk", &Config::max_chunk, Unit::size, 4096, kNoLimit, false,
         "largest chunk created at once; larger requests get several chunks",
         true},
  Option{"large_chunk", &Config::large_chunk, Unit::size, 0, kNoLimit, false,
         "chunk size for the body of requests of at least large_chunk_from (0: max_chunk)",
         true},
  Option{"large_chunk_from", &Config::large_chunk_from, Unit::size, 0, kNoLimit, false,
         "requests this large get their body in large_chunk chunks",
         true},
  Option{"fit_slack", &Config::fit_slack, Unit::number, 0, 4, false,
         "a cached block this much larger than the request (as a fraction of it) still fits",
         true},
  Option{"stitch_cache_ratio", &Config::stitch_cache_ratio, Unit::number, 0, 64, false,
         "idle mappings are kept while mapped bytes stay below (1 + ratio) * reserved bytes",
         true},
  Option{"max_stitch_chunks", &Config::max_stitch_chunks, Unit::integer, 1, 4096, false,
         "most chunks combined into one stitched range",
         true},
};
// clang-format on

template <class E>
struct EnumNames;
template <>
struct EnumNames<BackendKind> {
  // Indexed by the enum's value.
  static constexpr std::array<std::string_view, 3> names{"auto", "host", "cuda"};
};
template <>
struct EnumNames<MisuseAction> {
  static constexpr std::array<std::string_view, 2> names{"error", "abort"};
};
template <>
struct EnumNames<WorkerMode> {
  static constexpr std::array<std::string_view, 3> names{"off", "inline", "thread"};
};

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  out += s;
  out += '"';
  return out;
}

// " in MEMLAKE_CONF", or nothing for a string given to Config::apply().
std::string where(std::string_view source) {
  return source.empty() ? std::string() : " in " + std::string(source);
}

std::string known_keys() {
  std::string out;
  for (const Option& o : kOptions) {
    if (!out.empty()) out += ", ";
    out += o.name;
  }
  return out;
}

std::string join_choices(std::span<const std::string_view> names, std::string_view sep) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += sep;
    out += n;
  }
  return out;
}

// The names an enum option accepts, joined by `sep`.
std::string choices(const Option& o, std::string_view sep) {
  return std::visit(
      [&](auto member) -> std::string {
        using T = std::remove_cvref_t<decltype(Config{}.*member)>;
        if constexpr (std::is_enum_v<T>)
          return join_choices(EnumNames<T>::names, sep);
        else
          return {};
      },
      o.field);
}

std::string format_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// The largest binary suffix that divides the size exactly: 2097152 -> "2M".
std::string format_size(std::uint64_t v) {
  constexpr std::array<std::pair<char, int>, 4> kUnits{
      {{'T', 40}, {'G', 30}, {'M', 20}, {'K', 10}}};
  if (v != 0) {
    for (auto [suffix, shift] : kUnits) {
      const std::uint64_t unit = std::uint64_t{1} << shift;
      if (v % unit == 0) return std::to_string(v / unit) + suffix;
    }
  }
  return std::to_string(v);
}

// Bounds as written in messages: sizes with suffixes, counts as integers.
std::string format_bound(const Option& o, double v) {
  if (o.unit == Unit::size) return format_size(static_cast<std::uint64_t>(v));
  return format_number(v);
}

// What a value must look like, after "expected ".
std::string expectation(const Option& o) {
  switch (o.unit) {
    case Unit::size: {
      if (o.power_of_two)
        return "a power of two from " + format_bound(o, o.min) + " to " + format_bound(o, o.max);
      if (o.max == kNoLimit && o.min == 0) return "a size like 80G";
      if (o.max == kNoLimit) return "a size of at least " + format_bound(o, o.min);
      return "a size from " + format_bound(o, o.min) + " to " + format_bound(o, o.max);
    }
    case Unit::integer:
      return "an integer from " + format_bound(o, o.min) + " to " + format_bound(o, o.max);
    case Unit::number:
      return "a number from " + format_bound(o, o.min) + " to " + format_bound(o, o.max);
    case Unit::flag:
      return "true, false, 1, 0, yes, no, on or off";
    case Unit::choice:
      return "one of " + choices(o, ", ");
    case Unit::devices:
      return "all, none, or device numbers from 0 to 63 joined by + (like 1+3)";
    case Unit::path:
      return "a file path without commas, spaces or control characters";
  }
  return {};
}

// The type column of describe(): "size", "4K..1G, power of two", "auto|host|cuda".
std::string type_text(const Option& o) {
  switch (o.unit) {
    case Unit::size:
      if (o.power_of_two)
        return "size, power of two " + format_bound(o, o.min) + ".." + format_bound(o, o.max);
      if (o.max == kNoLimit) return o.min == 0 ? "size" : "size >= " + format_bound(o, o.min);
      return "size " + format_bound(o, o.min) + ".." + format_bound(o, o.max);
    case Unit::integer:
      return "integer " + format_bound(o, o.min) + ".." + format_bound(o, o.max);
    case Unit::number:
      return "number " + format_bound(o, o.min) + ".." + format_bound(o, o.max);
    case Unit::flag:
      return "bool";
    case Unit::choice:
      return choices(o, "|");
    case Unit::devices:
      return "all|none|devices like 1+3";
    case Unit::path:
      return "path";
  }
  return {};
}

[[noreturn]] void bad_value(const Option& o, std::string_view value, std::string_view source) {
  throw config_error("memlake config: bad value " + quoted(value) + " for key " + quoted(o.name) +
                     where(source) + ": expected " + expectation(o));
}

enum class SizeParse { ok, malformed, too_large };

// Bytes, or a number with a binary suffix: 4096, 2M, 2MB, 2MiB, 1.5g. A
// fraction is allowed with a suffix and rounds down to whole bytes.
SizeParse parse_size(std::string_view s, std::uint64_t* out) {
  std::size_t i = 0;
  std::uint64_t whole = 0;
  bool digits = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    digits = true;
    if (__builtin_mul_overflow(whole, 10, &whole) ||
        __builtin_add_overflow(whole, static_cast<std::uint64_t>(s[i] - '0'), &whole))
      return SizeParse::too_large;
  }
  std::string_view fraction;
  if (i < s.size() && s[i] == '.') {
    const std::size_t start = ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    fraction = s.substr(start, i - start);
    digits = digits || !fraction.empty();
  }
  if (!digits) return SizeParse::malformed;

  std::string_view suffix = s.substr(i);
  int shift = 0;
  if (!suffix.empty()) {
    constexpr std::string_view kLetters = "kmgt";
    const auto letter = kLetters.find(lower(suffix[0]));
    if (letter != std::string_view::npos) {
      shift = 10 * static_cast<int>(letter + 1);
      suffix.remove_prefix(1);
      if (!suffix.empty() && !iequals(suffix, "b") && !iequals(suffix, "ib"))
        return SizeParse::malformed;
    } else if (!iequals(suffix, "b")) {
      return SizeParse::malformed;
    }
  }
  if (shift == 0 && fraction.find_first_not_of('0') != std::string_view::npos)
    return SizeParse::malformed;  // a fraction of a byte

  if (whole > (std::numeric_limits<std::uint64_t>::max() >> shift)) return SizeParse::too_large;
  std::uint64_t bytes = whole << shift;
  if (shift != 0 && !fraction.empty()) {
    long double f = 0, scale = 0.1L;
    for (char c : fraction) {
      f += (c - '0') * scale;
      scale /= 10;
    }
    const auto part = static_cast<std::uint64_t>(std::floor(std::ldexp(f, shift)));
    if (__builtin_add_overflow(bytes, part, &bytes)) return SizeParse::too_large;
  }
  if (bytes > std::numeric_limits<std::size_t>::max()) return SizeParse::too_large;
  *out = bytes;
  return SizeParse::ok;
}

// "all", "none", or device numbers joined by '+': "1+3".
bool parse_devices(std::string_view s, DeviceSet* out) {
  if (iequals(s, "all")) return out->bits = DeviceSet::kAll, true;
  if (iequals(s, "none")) return out->bits = 0, true;
  DeviceSet set;
  while (true) {
    const auto plus = s.find('+');
    const std::string_view item = s.substr(0, plus);
    int d = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || d < 0 || d > 63)
      return false;
    set.bits |= std::uint64_t{1} << d;
    if (plus == std::string_view::npos) break;
    s.remove_prefix(plus + 1);
  }
  *out = set;
  return true;
}

std::string devices_text(const DeviceSet& set) {
  if (set.all()) return "all";
  std::string out;
  for (int d = 0; d < 64; ++d) {
    if (!set.has(d)) continue;
    if (!out.empty()) out += '+';
    out += std::to_string(d);
  }
  return out.empty() ? "none" : out;
}

bool parse_flag(std::string_view s, bool* out) {
  for (std::string_view t : {"true", "1", "yes", "on"})
    if (iequals(s, t)) return *out = true, true;
  for (std::string_view f : {"false", "0", "no", "off"})
    if (iequals(s, f)) return *out = false, true;
  return false;
}

void check_range(const Option& o, double v, std::string_view value, std::string_view source) {
  if (!(v >= o.min && v <= o.max)) bad_value(o, value, source);
}

void set_option(Config& c, const Option& o, std::string_view value, std::string_view source) {
  std::visit(
      [&](auto member) {
        using T = std::remove_cvref_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (!parse_flag(value, &(c.*member))) bad_value(o, value, source);
        } else if constexpr (std::is_same_v<T, std::string>) {
          // What describe() prints must parse back: no spaces or control bytes.
          for (char ch : value)
            if (static_cast<unsigned char>(ch) <= ' ' || ch == '\x7f') bad_value(o, value, source);
          c.*member = std::string(value);
        } else if constexpr (std::is_same_v<T, DeviceSet>) {
          if (!parse_devices(value, &(c.*member))) bad_value(o, value, source);
        } else if constexpr (std::is_same_v<T, double>) {
          double v = 0;
          const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
          if (ec != std::errc() || end != value.data() + value.size() || value.empty())
            bad_value(o, value, source);
          check_range(o, v, value, source);
          c.*member = v;
        } else if constexpr (std::is_enum_v<T>) {
          const auto& names = EnumNames<T>::names;
          for (std::size_t i = 0; i < names.size(); ++i) {
            if (iequals(value, names[i])) {
              c.*member = static_cast<T>(i);
              return;
            }
          }
          bad_value(o, value, source);
        } else {
          std::uint64_t v = 0;
          if (o.unit == Unit::size) {
            const SizeParse r = parse_size(value, &v);
            if (r == SizeParse::too_large) {
              throw config_error("memlake config: bad value " + quoted(value) + " for key " +
                                 quoted(o.name) + where(source) + ": size too large");
            }
            if (r != SizeParse::ok) bad_value(o, value, source);
          } else {
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
            if (ec != std::errc() || end != value.data() + value.size() || value.empty())
              bad_value(o, value, source);
          }
          // Compared as integers: a double would round sizes near 2^64.
          if (static_cast<double>(v) < o.min ||
              (o.max != kNoLimit && v > static_cast<std::uint64_t>(o.max)))
            bad_value(o, value, source);
          if (o.power_of_two && (v & (v - 1)) != 0) bad_value(o, value, source);
          c.*member = static_cast<T>(v);
        }
      },
      o.field);
}

std::string value_text(const Config& c, const Option& o) {
  return std::visit(
      [&](auto member) -> std::string {
        using T = std::remove_cvref_t<decltype(c.*member)>;
        const T& v = c.*member;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, DeviceSet>) {
          return devices_text(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return format_number(v);
        } else if constexpr (std::is_enum_v<T>) {
          const auto i = static_cast<std::size_t>(v);
          const auto& names = EnumNames<T>::names;
          return i < names.size() ? std::string(names[i]) : std::to_string(i);
        } else if (o.unit == Unit::size) {
          return format_size(static_cast<std::uint64_t>(v));
        } else {
          return std::to_string(v);
        }
      },
      o.field);
}

const Option* find_option(std::string_view name) {
  for (const Option& o : kOptions)
    if (o.name == name) return &o;
  return nullptr;
}

void apply_conf(Config& c, std::string_view conf, std::string_view source) {
  while (true) {
    const auto comma = conf.find(',');
    const std::string_view token = trim(conf.substr(0, comma));
    if (!token.empty()) {
      const auto colon = token.find(':');
      if (colon == std::string_view::npos) {
        throw config_error("memlake config: missing ':' in token " + quoted(token) + where(source) +
                           " (expected key:value)");
      }
      const std::string_view key = trim(token.substr(0, colon));
      const std::string_view value = trim(token.substr(colon + 1));
      const Option* o = find_option(key);
      if (o == nullptr) {
        throw config_error("memlake config: unknown key " + quoted(key) + where(source) +
                           " (known: " + known_keys() + ")");
      }
      set_option(c, *o, value, source);
    }
    if (comma == std::string_view::npos) break;
    conf.remove_prefix(comma + 1);
  }
}

std::string env_name(std::string_view key) {
  std::string name = "MEMLAKE_";
  for (char ch : key) name += (ch >= 'a' && ch <= 'z') ? static_cast<char>(ch - 'a' + 'A') : ch;
  return name;
}

}  // namespace

void Config::apply(std::string_view conf) {
  // On error *this stays as it was.
  Config next = *this;
  apply_conf(next, conf, {});
  *this = next;
}

Config Config::from_env() {
  Config c;
  for (const Option& o : kOptions) {
    const std::string name = env_name(o.name);
    // An empty variable counts as unset: `MEMLAKE_CAPACITY= cmd` runs with the default.
    const char* env = std::getenv(name.c_str());
    const std::string_view value = trim(env != nullptr ? env : "");
    if (!value.empty()) set_option(c, o, value, name);
  }
  if (const char* conf = std::getenv("MEMLAKE_CONF")) apply_conf(c, conf, "MEMLAKE_CONF");
  return c;
}

std::string Config::describe() const {
  const Config defaults;
  std::string out;
  for (const Option& o : kOptions) {
    std::string line(o.name);
    line += ':';
    line += value_text(*this, o);
    line.resize(std::max<std::size_t>(line.size() + 1, 32), ' ');
    line += o.tuning ? "# tuning, " : "# ";
    line += type_text(o);
    line += ", default ";
    line += value_text(defaults, o);
    line += ": ";
    line += o.help;
    out += line;
    out += '\n';
  }
  return out;
}

void Config::validate() const {
  auto conflict = [](std::string_view a, std::string_view b, std::string_view why) {
    throw config_error("memlake config: " + quoted(a) + " and " + quoted(b) + " " +
                       std::string(why));
  };
  if (capacity != 0 && capacity_fraction > 0)
    conflict("capacity", "capacity_fraction", "are both set: give one of them");
  if (reserve != 0 && worker == WorkerMode::off)
    conflict("reserve", "worker",
             "do not go together: the worker makes the reserve, and worker is off");
}

}  // namespace memlake
