// Stats::to_json(): every MEMLAKE_STAT_FIELDS entry in declaration order,
// gauges as {"current":N,"peak":N}, counters as a plain number.
#include <charconv>
#include <cstdint>
#include <string>

#include "memlake/stats.hpp"
#include "common/stat_update.hpp"

namespace memlake {

namespace {

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void append_key(std::string& out, const char* name) {
  out += ",\"";
  out += name;
  out += "\":";
}

void append_field(std::string& out, const char* name, const StatValue& v, stat_kind::gauge) {
  append_key(out, name);
  out += "{\"current\":";
  append_int(out, v.current);
  out += ",\"peak\":";
  append_int(out, v.peak);
  out += '}';
}

void append_field(std::string& out, const char* name, const StatValue& v, stat_kind::counter) {
  append_key(out, name);
  append_int(out, v.current);
}

}  // namespace

std::string Stats::to_json() const {
  std::string out;
  out.reserve(2048);
  out += "{\"version\":";
  append_int(out, kVersion);
#define MEMLAKE_STAT_JSON(name, kind, help) append_field(out, #name, name, stat_kind::kind{});
  MEMLAKE_STAT_FIELDS(MEMLAKE_STAT_JSON)
#undef MEMLAKE_STAT_JSON
  out += '}';
  return out;
}

}  // namespace memlake
